import crypto from 'node:crypto';
import { WorkflowExecutionAlreadyStartedError, type Client } from '@temporalio/client';
import type { Config } from '../config';
import type { Db } from '../db/pool';
import { countOnlineSolvers } from '../db/solvers';
import type { RequestFigures } from '../db/matching';
import { createTaskWithHold, markWorkflowStarted, type CreateTaskOutcome, type Idempotency } from '../db/tasks/create';
import type { Finished } from '../db/tasks/finish';
import { getTaskRecord, type TaskRecord, type TaskRow } from '../db/tasks/records';
import { finishTask } from './finish';
import type { EarlyAttempts } from '../dispatch/early-attempts';
import type { Logger } from '../logger';
import { recordTaskCreated } from '../metrics/metrics';
import { CHAT_TASK_TYPE, type RoutingSort, type WebTaskType } from '../schemas/domain';
import { taskFailure, type Assignment, type AttemptFailed, type TaskState } from '../contract/lifecycle';
import {
  AccountIdAttribute,
  chatWorkflowId,
  TaskStatusAttribute,
  TaskTypeAttribute,
  taskWorkflowId,
  type TaskWorkflowInput,
  type TaskWorkflowResult,
} from '../contract/workflows';
import type { TaskFinishedWatch } from './finished';
import type { HandoffSender } from './handoffs';
import type { RecentPayloads } from './recent-payloads';
import type { WebhookSender } from '../webhooks/sender';

export interface CreateTaskInput {
  /** Chosen by the caller when it must listen for the task's events before the task starts. */
  taskId?: string;
  accountId: string;
  /** The API key of the request: the task counts against its spend limit, if it has one. */
  keyId?: string;
  taskType: WebTaskType | typeof CHAT_TASK_TYPE;
  payload: Record<string, unknown>;
  maxPricePoints?: string | null;
  timeoutSeconds?: number | null;
  /** The request's Idempotency-Key (as the task stores it) and the request's fingerprint. */
  idempotency?: Idempotency;
  /** Create nothing when no eligible solver is online at all (a new task only): `no_solver_online`. */
  requireOnline?: boolean;
  /**
   * Chat: eligible strong-tier models, the node that streams the deltas to the client, and the client's
   * request (aborted when it ends), which bounds a first attempt sent before the workflow takes it over.
   */
  chat?: {
    strongModels: string[];
    clientNodeId: string;
    clientGone?: AbortSignal;
    /** The request's token figures and price limits (docs/queue.md, "What a chat pays"). */
    figures?: RequestFigures;
    /** `provider.allow_fallbacks: false`: one solver only, matched now or refused (no queue, no second attempt). */
    noFallbacks?: boolean;
  };
  /** The strict order the client asked matching for (`provider.sort`); unset, work is shared among equal offers. */
  routingSort?: RoutingSort;
  /** The country the task must be fetched from (ISO 3166-1 alpha-2): only solvers declaring it take it. */
  country?: string;
}

// Longer than nearly every web task takes, so the long poll is rarely opened.
const RESULT_FALLBACK_MS = 5000;
// A caller waits a little past the task's own deadline, so the workflow's verdict wins.
const WAIT_GRACE_MS = 5000;

/** What creating a task did: the task, or why there is none. */
export type CreateResult =
  | { kind: 'created' | 'existing'; task: TaskRecord }
  /** The idempotency key came with another request before: nothing is created. */
  | { kind: 'idempotency_key_reused' }
  | { kind: 'insufficient_balance'; requiredPoints: string }
  | Extract<CreateTaskOutcome, { kind: 'key_spend_limit_reached' }>
  | { kind: 'no_solver_online' }
  | Extract<CreateTaskOutcome, { kind: 'no_solver_within_price' }>
  /** Every fitting solver is busy and the queue is full or too slow for its deadline: refused, nothing held. */
  | { kind: 'solvers_busy'; retryAfterSeconds: number; waiting: number }
  /** Its workflow could not be started: the task is failed and its hold released. */
  | { kind: 'not_started'; taskId: string };

/** What starting a task's workflow needs; the worker's recovery sweep has this much. */
export interface StartDeps {
  config: Config;
  db: Db;
  temporal: Client;
  logger: Logger;
  /** A workflow worker runs in this process: the first workflow task runs here without a round trip. */
  eagerStart: boolean;
  handoffs: HandoffSender;
  webhooks: WebhookSender;
}

/** After the commit that finished a task: the slots it freed are told, its webhook deliveries sent. */
function afterFinish(deps: StartDeps, finished: Finished): void {
  deps.handoffs.deliver(finished.handoffs);
  deps.webhooks.send(finished.webhooks);
}

export const newTaskId = (kind: 'task' | 'chat' = 'task') => `${kind}_${crypto.randomBytes(12).toString('hex')}`;

/** Creating, starting and waiting for tasks, on an API node. */
export class TaskService {
  constructor(
    private readonly deps: StartDeps & {
      finished: TaskFinishedWatch;
      payloads: RecentPayloads;
      earlyAttempts: EarlyAttempts;
      /** How long a waiter trusts the announcement before it asks the workflow (tests shorten it). */
      resultFallbackMs?: number;
    },
  ) {}

  /** Holds the points and starts the task's workflow; with a reused idempotency key, returns the first task. */
  async create(input: CreateTaskInput): Promise<CreateResult> {
    const taskId = input.taskId ?? newTaskId(input.chat ? 'chat' : 'task');
    const outcome = await createTaskWithHold(this.deps.db, {
      taskId,
      accountId: input.accountId,
      taskType: input.taskType,
      payload: input.payload,
      maxPricePoints: input.maxPricePoints ?? (input.chat ? this.deps.config.defaultChatPricePoints : this.deps.config.defaultWebTaskPricePoints),
      timeoutSeconds: input.timeoutSeconds ?? this.deps.config.defaultTaskTimeoutSeconds,
      workflowId: input.chat ? chatWorkflowId(taskId) : taskWorkflowId(taskId),
      idempotency: input.idempotency,
      keyId: input.keyId,
      match: { strongModels: input.chat?.strongModels, requireOnline: input.requireOnline },
      // Without fallbacks a chat waits for no slot: the best offer free now serves it, or it is refused.
      admission: { maxQueued: input.chat?.noFallbacks ? 0 : this.deps.config.queueLimitPerTaskType },
      routingSort: input.routingSort,
      figures: input.chat?.figures,
      country: input.country,
    });
    if (outcome.kind === 'existing') return { kind: 'existing', task: (await getTaskRecord(this.deps.db, outcome.task.task_id))! };
    if (outcome.kind !== 'created') return outcome;
    const { task, firstAssignment } = outcome;
    recordTaskCreated(task.task_type);
    const chat = input.chat && {
      strongModels: input.chat.strongModels,
      clientNodeId: input.chat.clientNodeId,
      completionId: chatWorkflowId(taskId),
      ...(input.chat.noFallbacks ? { maxAttempts: 1 } : {}),
    };
    // A chat's first token need not wait for the workflow: its solver, if connected here, gets the task now.
    const clientGone = input.chat?.clientGone;
    const startedEarly = chat && firstAssignment && clientGone ? this.startFirstAttemptEarly(task, firstAssignment, chat, clientGone) : false;
    if (!startedEarly) this.deps.payloads.remember(task.task_id, task.payload);
    const started = await startTaskWorkflow(this.deps, task, chat, firstAssignment, startedEarly);
    // After the start, so that a slot handed to this task as it queued reaches its workflow too.
    this.deps.handoffs.deliver(outcome.handoffs);
    if (!started) {
      if (startedEarly) this.deps.earlyAttempts.abandon(firstAssignment!.attemptId);
      return { kind: 'not_started', taskId: task.task_id };
    }
    // A new task has no attempts yet; its row as inserted is the record (the workflow may have moved on).
    const { account_id: _account, ...record } = task;
    // Its hold, opened with it, is its maximum price; nothing is charged yet.
    return {
      kind: 'created',
      task: {
        ...record,
        attempts: [],
        held_points: record.max_price_points,
        estimated_price_points: firstAssignment?.estimatedPricePoints ?? null,
        hold_status: 'open',
        charged_points: '0',
        verification: 'unchecked',
      },
    };
  }

  private startFirstAttemptEarly(task: TaskRow, assignment: Assignment, stream: { clientNodeId: string; completionId: string }, clientGone: AbortSignal): boolean {
    return this.deps.earlyAttempts.start({
      ...assignment,
      taskId: task.task_id,
      taskType: CHAT_TASK_TYPE,
      payload: task.payload,
      deadline: new Date(Date.now() + task.timeout_seconds * 1000),
      acceptTimeoutMs: this.deps.config.acceptTimeoutMs,
      stream,
      clientGone,
      occasion: 'created',
    });
  }

  /**
   * Waits for the task to reach a terminal state; null when `timeoutMs` (by default a little past the
   * task's deadline) passes first. The stored state, announced when it commits, is the answer; the
   * workflow's result (a long poll the server answers by reading the history) is asked for only if no
   * announcement came within `resultFallbackMs`, e.g. while this node's notification connection was down.
   */
  async waitForResult(task: TaskRecord, timeoutMs = task.timeout_seconds * 1000 + WAIT_GRACE_MS): Promise<TaskWorkflowResult | null> {
    const handle = this.deps.temporal.workflow.getHandle(task.workflow_id);
    const timers: NodeJS.Timeout[] = [];
    const after = <T>(ms: number, value: () => T | Promise<T>) =>
      new Promise<T>((resolve) => {
        timers.push(setTimeout(() => resolve(value()), ms));
      });
    const fromWorkflow = () => {
      const result = handle.result() as Promise<TaskWorkflowResult>;
      // Whichever comes second is ignored; a late failure of the result call must not go unhandled.
      result.catch(() => undefined);
      return result;
    };
    const announced = this.deps.finished.wait(task.task_id);
    const stored = announced.finished.then((status): TaskWorkflowResult => ({ taskId: task.task_id, status }));
    try {
      return await Promise.race([after(timeoutMs, () => null), Promise.race([stored, after(this.deps.resultFallbackMs ?? RESULT_FALLBACK_MS, fromWorkflow)])]);
    } finally {
      for (const timer of timers) clearTimeout(timer);
      announced.stop();
    }
  }

  /** Whether a solver for the type (declaring that country, when given) is online at all. */
  async solverOnline(taskType: WebTaskType, country?: string): Promise<boolean> {
    return (await countOnlineSolvers(this.deps.db, taskType, { country })) > 0;
  }
}

/**
 * Starts the workflow of a stored task; false when it could not be started, and the task is then failed
 * with its hold released. Idempotent (the workflow id is the task's), so the worker's sweep can call it
 * for tasks whose API node died between the insert and the start.
 */
export async function startTaskWorkflow(
  deps: StartDeps,
  task: TaskRow,
  chat?: { strongModels: string[]; clientNodeId: string; completionId: string; maxAttempts?: number },
  firstAssignment?: Assignment | null,
  firstAttemptStartedEarly = false,
  firstAttemptReport?: AttemptFailed,
): Promise<boolean> {
  if (task.task_type === CHAT_TASK_TYPE && !chat) {
    // A chat completion whose client request is gone cannot be streamed to anyone: give the points back.
    afterFinish(deps, await finishTask(deps.db, task.task_id, { failure: taskFailure('client_cancelled', 'The request ended before the completion started.') }));
    return true;
  }
  const input: TaskWorkflowInput = {
    taskId: task.task_id,
    taskType: task.task_type,
    maxPricePoints: task.max_price_points,
    timeoutSeconds: task.timeout_seconds,
    maxAttempts: chat?.maxAttempts ?? deps.config.maxTaskAttempts,
    // A generation may legitimately stream for as long as the whole completion is allowed to take.
    attemptTimeoutSeconds: chat ? task.timeout_seconds : deps.config.attemptTimeoutSeconds,
    acceptTimeoutMs: deps.config.acceptTimeoutMs,
    ...(chat ? { strongModels: chat.strongModels, stream: { clientNodeId: chat.clientNodeId, completionId: chat.completionId } } : {}),
    ...(firstAssignment ? { firstAssignment } : {}),
    ...(firstAttemptStartedEarly ? { firstAttemptStartedEarly } : {}),
    ...(firstAttemptReport ? { firstAttemptReport } : {}),
  };
  try {
    await launchTaskWorkflow(deps, { workflowId: task.workflow_id, input, accountId: task.account_id, searchTaskType: task.task_type, chat: chat !== undefined });
  } catch (error) {
    deps.logger.error({ err: error, task_id: task.task_id }, 'could not start the task workflow');
    // Without a workflow nothing would ever settle the hold: end the task now and give the points back.
    afterFinish(deps, await finishTask(deps.db, task.task_id, { failure: taskFailure('service_unavailable', 'The task could not be started; its hold was released.') }));
    return false;
  }
  // Only the stranded-task sweep reads this mark; the caller need not wait for it.
  void markWorkflowStarted(deps.db, task.task_id).catch((error) => deps.logger.warn({ err: error, task_id: task.task_id }, 'workflow start not recorded'));
  return true;
}

/**
 * Starts the task workflow (a chat's, with `chat`), client's or platform's: false when one with its id
 * was started already (by another process, or an earlier try). A platform task's workflow creates its
 * task (docs/trust.md), so it has no row to start from; `searchTaskType` names it in the Temporal UI.
 */
export async function launchTaskWorkflow(
  deps: Pick<StartDeps, 'config' | 'temporal'> & { eagerStart?: boolean },
  start: {
    workflowId: string;
    input: TaskWorkflowInput;
    accountId: string;
    searchTaskType: string;
    chat?: boolean;
    /** Refuse a second start even once the first workflow has ended (a verification run is started once). */
    once?: boolean;
  },
): Promise<boolean> {
  try {
    await deps.temporal.workflow.start(start.chat ? 'chatCompletionWorkflow' : 'taskWorkflow', {
      taskQueue: deps.config.taskQueue,
      workflowId: start.workflowId,
      ...(start.once ? { workflowIdReusePolicy: 'REJECT_DUPLICATE' as const } : {}),
      args: [start.input],
      requestEagerStart: deps.eagerStart,
      typedSearchAttributes: [
        { key: TaskTypeAttribute, value: start.searchTaskType },
        { key: AccountIdAttribute, value: start.accountId },
        // Visibility shows a task's progress as queued until its final state (each upsert is a visibility write).
        { key: TaskStatusAttribute, value: 'queued' satisfies TaskState },
      ],
    });
    return true;
  } catch (error) {
    if (error instanceof WorkflowExecutionAlreadyStartedError) return false;
    throw error;
  }
}
