import crypto from 'node:crypto';
import type { Client } from '@temporalio/client';
// The errors the client throws, from the package that defines them: the engine loads without the client's gRPC stack.
import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError } from '@temporalio/common';
import { storeArtifacts } from '../artifacts/results';
import type { ArtifactStore } from '../artifacts/store';
import type { Config } from '../config';
import type { RequestFigures } from '../db/matching';
import type { Handoff } from '../db/matching';
import type { AttemptEnd } from '../db/tasks/attempts';
import type { CreateTaskOutcome, Idempotency, NewTask } from '../db/tasks/create';
import type { TaskRecord, TaskRow } from '../db/tasks/records';
import { type Finished } from '../db/tasks/finish';
import { type ReserveAttemptInput } from '../db/matching';
import type { DueDelivery } from '../db/webhooks';
import type { Completion } from './finish';
import type { TaskStore } from './store';
import type { AttemptStops } from '../dispatch/attempt-stops';
import type { EarlyAttempts } from '../dispatch/early-attempts';
import type { MeteredUsage } from '../chat/usage';
import type { Logger } from '../logger';
import { recordTaskCreated } from '../metrics/metrics';
import { CHAT_TASK_TYPE, type BilledUsage, type RoutingSort, type WebTaskType } from '../schemas/domain';
import {
  claimsTargetFailure,
  isTerminalState,
  taskFailure,
  WEBHOOK_EVENTS,
  type Assignment,
  type AttemptFailed,
  type TargetFailureType,
  type TargetFailureVerdict,
  type TaskFailure,
  type TaskState,
  type TerminalState,
  type WebhookEvent,
} from '../contract/lifecycle';
import {
  AccountIdAttribute,
  adminCompleteSignal,
  cancelTaskSignal,
  chatWorkflowId,
  TaskStatusAttribute,
  TaskTypeAttribute,
  taskWorkflowId,
  type TaskWorkflowInput,
  type TaskWorkflowResult,
} from '../contract/workflows';
import type { TaskFinishedWatch } from './finished';
import type { HandoffSender, WebhookSender } from './handoffs';
import type { RecentPayloads } from './recent-payloads';
import { taskSummary } from './workflow-summary';

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
  /**
   * Told of the task's terminal state: stored before the task, under its id, so the task cannot finish
   * unobserved; dropped when no task is created. Without it the account's default webhook, if any, is.
   */
  webhook?: { url: string; events?: readonly WebhookEvent[] } | null;
  /** Told as each step of a new task's creation ends (the chat route's Server-Timing). */
  onStep?: (step: CreationStep) => void;
}

/** The steps of a creation: its statement, its first attempt sent early (a chat), its workflow started. */
export type CreationStep = 'store' | 'send' | 'start';

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
  /**
   * No eligible solver is online, but `solvers` that would serve it wait on probation for a check the
   * platform account cannot pay (src/db/check-funding.ts): the operator's to fix, not a solver's.
   */
  | { kind: 'checks_unfunded'; solvers: number }
  | Extract<CreateTaskOutcome, { kind: 'no_solver_within_price' }>
  /** Every fitting solver is busy and the queue is full or too slow for its deadline: refused, nothing held. */
  | { kind: 'solvers_busy'; retryAfterSeconds: number; waiting: number }
  /** Its workflow could not be started: the task is failed and its hold released. */
  | { kind: 'not_started'; taskId: string };

/** What running a task (create, start, wait) came to: the task's end, or why there is none. */
export type RunResult =
  | Exclude<CreateResult, { kind: 'created' | 'existing' }>
  /** It ended (`task` as read then, its result's artifacts read back), or `task` is null: it did not end in time. */
  | { kind: 'ended'; created: TaskRecord; task: TaskRecord | null; elapsedMs: number };

/** What a client's cancel came to. */
export type CancelResult =
  | { kind: 'task_not_found' }
  /** Cancelled now, or before (asked again): the record as cancelled. */
  | { kind: 'cancelled'; task: TaskRecord }
  /** It had ended otherwise: `before` the cancel, or while it was on its way. */
  | { kind: 'already_finished'; status: TaskState | undefined; before: boolean };

/** What an admin's completion came to. */
export type AdminCompleteResult =
  | { kind: 'task_not_found' }
  /** It had ended otherwise: `before` the completion, or while it was on its way. */
  | { kind: 'already_finished'; status: TaskState | undefined; before: boolean }
  | { kind: 'solver_not_found' }
  /** Completed (`task` is its record), or not ended within the wait: `task` as it stands. */
  | { kind: 'completed'; task: TaskRecord | null };

/** What a solver's result for its attempt came to. */
export type AttemptCompletion =
  | { kind: 'completed' }
  /** The task had ended before (an admin, its deadline): that is its state. */
  | { kind: 'finished_already'; status: TerminalState }
  /** The attempt had been closed (reassigned): the result is not the task's. */
  | { kind: 'attempt_closed' };

/** What a task's ending without a result came to (the workflow's shape: its histories hold it). */
export type Ended = Told<Finished>;

/** A commit's result without the effects due after it, which the engine makes. */
type Told<T> = T extends unknown ? Omit<T, 'handoffs' | 'webhooks'> : never;

/** What the engine needs; built once by each entry point. */
export interface TaskEngineDeps {
  config: Config;
  /** Every read and write of tasks (src/tasks/store.ts). */
  store: TaskStore;
  temporal: Client;
  logger: Logger;
  /** A workflow worker runs in this process: the first workflow task runs here without a round trip. */
  eagerStart: boolean;
  handoffs: HandoffSender;
  webhooks: WebhookSender;
  artifacts: ArtifactStore;
  finished: TaskFinishedWatch;
  /** Stops a task's attempts on every node, when it is settled elsewhere. */
  stops: AttemptStops;
  /** On an API node: payloads of the tasks it just created, which their first attempts need not read back. */
  payloads?: RecentPayloads;
  /** On an API node: a chat's first attempt sent before its workflow asks (src/dispatch/early-attempts.ts). */
  earlyAttempts?: EarlyAttempts;
  /** How long a waiter trusts the announcement before it asks the workflow (tests shorten it). */
  resultFallbackMs?: number;
}

// How long a cancel or an admin's completion waits for the workflow to end the task.
const SETTLE_WAIT_MS = 30_000;

export const newTaskId = (kind: 'task' | 'chat' = 'task') => `${kind}_${crypto.randomBytes(12).toString('hex')}`;

/**
 * The task engine (docs/decisions.md, "Layers"): the one owner of the statements that write tasks. Every
 * creation, attempt and ending goes through it and returns what it did as a union; the effects due after
 * each commit (the freed slots handed on, the webhook deliveries' first attempts) are made here, so no
 * caller repeats them.
 */
export class TaskEngine {
  constructor(private readonly deps: TaskEngineDeps) {}

  /**
   * Tells the slots handed on and sends the webhook deliveries a commit wrote; returns the rest. Every
   * write that hands slots on or writes deliveries passes its result here, the engine's own and the
   * services' (a solver's new capabilities, a quarantine's refunds, a crawl's events).
   */
  afterCommit<T extends object>(result: T): Told<T> {
    const { handoffs, webhooks, ...rest } = result as T & { handoffs?: Handoff[]; webhooks?: DueDelivery[] };
    this.deps.handoffs.deliver(handoffs);
    this.deps.webhooks.send(webhooks);
    return rest as Told<T>;
  }

  /** Holds the points and starts the task's workflow; with a reused idempotency key, returns the first task. */
  async create(input: CreateTaskInput): Promise<CreateResult> {
    if (!input.webhook) return this.createTask(input);
    const taskId = input.taskId ?? newTaskId();
    await this.deps.store.saveSubscription({
      taskId,
      accountId: input.accountId,
      url: input.webhook.url,
      events: input.webhook.events ?? WEBHOOK_EVENTS,
    });
    const result = await this.createTask({ ...input, taskId });
    if (result.kind !== 'created') await this.deps.store.dropSubscription(taskId);
    return result;
  }

  private async createTask(input: CreateTaskInput): Promise<CreateResult> {
    const taskId = input.taskId ?? newTaskId(input.chat ? 'chat' : 'task');
    const outcome = await this.deps.store.createTask({
      taskId,
      accountId: input.accountId,
      taskType: input.taskType,
      payload: input.payload,
      maxPricePoints:
        input.maxPricePoints ??
        (input.chat ? this.deps.config.defaultChatPricePoints : this.deps.config.defaultWebTaskPricePoints),
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
    input.onStep?.('store');
    if (outcome.kind === 'existing')
      return { kind: 'existing', task: (await this.deps.store.taskRecord(outcome.task.task_id))! };
    if (outcome.kind === 'no_solver_online')
      return this.whyNoSolver(input.taskType, { strongModels: input.chat?.strongModels, country: input.country });
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
    const startedEarly =
      chat && firstAssignment && clientGone
        ? this.startFirstAttemptEarly(task, firstAssignment, chat, clientGone)
        : false;
    if (startedEarly) input.onStep?.('send');
    else this.deps.payloads?.remember(task.task_id, task.payload);
    const started = await this.start(
      task,
      { chat, firstAssignment, firstAttemptStartedEarly: startedEarly },
      outcome.handoffs,
    );
    input.onStep?.('start');
    if (!started) {
      if (startedEarly) this.deps.earlyAttempts?.abandon(firstAssignment!.attemptId);
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

  /**
   * Stores a task matched as it is created (a crawl's page) and runs its first attempt: `stored` sees the
   * new task first, then `sendFirst` sends its attempt without a workflow (true), or else the task's
   * workflow is started with it. The slots the creation handed on are told after either.
   */
  async createWithFirstAttempt(
    task: NewTask & { claim?: undefined },
    then: {
      stored: (task: TaskRow) => Promise<void>;
      sendFirst: (task: TaskRow, assignment: Assignment) => Promise<boolean>;
    },
  ): Promise<Told<CreateTaskOutcome>> {
    const outcome = await this.deps.store.createTask(task);
    if (outcome.kind !== 'created') return outcome;
    const { handoffs, ...created } = outcome;
    const { task: row, firstAssignment } = created;
    await then.stored(row);
    if (!firstAssignment || !(await then.sendFirst(row, firstAssignment)))
      await this.start(row, { firstAssignment }, handoffs);
    else this.deps.handoffs.deliver(handoffs);
    return created;
  }

  /**
   * Creates the task (refused when no solver for it is online at all), waits for its end and reads it.
   * `onCreated` sees the task as soon as it exists (to name it in a response header).
   */
  async run(
    input: Omit<CreateTaskInput, 'requireOnline'>,
    onCreated: (task: TaskRecord) => void = () => undefined,
  ): Promise<RunResult> {
    const started = Date.now();
    const result = await this.create({ ...input, requireOnline: true });
    if (result.kind !== 'created' && result.kind !== 'existing') return result as RunResult;
    const created = result.task;
    onCreated(created);
    const verdict = isTerminalState(created.status) ? created : await this.waitForResult(created);
    const task = verdict ? await this.read(created.task_id) : null;
    return { kind: 'ended', created, task, elapsedMs: Date.now() - started };
  }

  /**
   * The task record as its client sees it, its result's artifacts read back; null when there is none (on that
   * account).
   */
  read(taskId: string, accountId?: string): Promise<TaskRecord | null> {
    return this.deps.store.readTaskRecord(taskId, accountId);
  }

  private startFirstAttemptEarly(
    task: TaskRow,
    assignment: Assignment,
    stream: { clientNodeId: string; completionId: string },
    clientGone: AbortSignal,
  ): boolean {
    return (
      this.deps.earlyAttempts?.start({
        ...assignment,
        taskId: task.task_id,
        taskType: CHAT_TASK_TYPE,
        payload: task.payload,
        deadline: new Date(Date.now() + task.timeout_seconds * 1000),
        acceptTimeoutMs: this.deps.config.acceptTimeoutMs,
        stream,
        clientGone,
        occasion: 'created',
      }) ?? false
    );
  }

  /**
   * Waits for the task to reach a terminal state; null when `timeoutMs` (by default a little past the
   * task's deadline) passes first. The stored state, announced when it commits, is the answer; the
   * workflow's result (a long poll the server answers by reading the history) is asked for only if no
   * announcement came within `resultFallbackMs`, e.g. while this node's notification connection was down.
   */
  async waitForResult(
    task: TaskRecord,
    timeoutMs = task.timeout_seconds * 1000 + WAIT_GRACE_MS,
  ): Promise<TaskWorkflowResult | null> {
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
      return await Promise.race([
        after(timeoutMs, () => null),
        Promise.race([stored, after(this.deps.resultFallbackMs ?? RESULT_FALLBACK_MS, fromWorkflow)]),
      ]);
    } finally {
      for (const timer of timers) clearTimeout(timer);
      announced.stop();
    }
  }

  /** Whether a solver for the type (declaring that country, when given) is online at all. */
  async solverOnline(taskType: WebTaskType, country?: string): Promise<boolean> {
    return (await this.deps.store.countOnlineSolvers(taskType, { country })) > 0;
  }

  /**
   * True when a strong-tier chat solver serving one of `strongModels` is online (a scrape's json and summary
   * formats need one).
   */
  async chatSolverOnline(strongModels: string[]): Promise<boolean> {
    return (await this.deps.store.countOnlineSolvers(CHAT_TASK_TYPE, { strongModels })) > 0;
  }

  /**
   * Why no eligible solver of the type is online: none at all, or some wait for checks the platform account
   * cannot pay.
   */
  async whyNoSolver(
    taskType: string,
    options: { strongModels?: string[]; country?: string } = {},
  ): Promise<{ kind: 'no_solver_online' } | { kind: 'checks_unfunded'; solvers: number }> {
    const solvers = await this.deps.store.solversAwaitingUnfundedChecks(taskType, options);
    return solvers > 0 ? { kind: 'checks_unfunded', solvers } : { kind: 'no_solver_online' };
  }

  /**
   * A client's cancel of its task: its workflow is told, its attempt stopped, and the answer waits for
   * the task to end (a task that ended otherwise meanwhile keeps that end).
   */
  async cancel(taskId: string, accountId: string): Promise<CancelResult> {
    const task = await this.deps.store.taskRecord(taskId, accountId);
    if (!task) return { kind: 'task_not_found' };
    // Cancelling a cancelled task answers it again.
    if (task.status === 'cancelled') return { kind: 'cancelled', task };
    if (isTerminalState(task.status)) return { kind: 'already_finished', status: task.status, before: true };
    await this.endByCancel(taskId, task.workflow_id);
    // The signal first, so that the stopped attempt is not taken for a failed one and reassigned.
    await this.deps.stops
      .stop(taskId)
      .catch((error) =>
        this.deps.logger.warn({ err: error, task_id: taskId }, 'could not stop the attempt of a cancelled task'),
      );
    await this.waitForResult(task, SETTLE_WAIT_MS);
    const finished = await this.deps.store.taskRecord(taskId);
    if (finished?.status !== 'cancelled') return { kind: 'already_finished', status: finished?.status, before: false };
    return { kind: 'cancelled', task: finished };
  }

  /**
   * Cancels a task (a crawl's page) without waiting: as `cancel` does, its attempt stopped only when it
   * was ended here (its workflow, when it has one, stops it). A task that has ended stays as it is.
   */
  async cancelNow(taskId: string): Promise<void> {
    const ended = await this.endByCancel(taskId, taskWorkflowId(taskId));
    if (ended.applied) await this.deps.stops.stop(taskId);
  }

  /**
   * Its workflow by signal, or, when it has none (not started yet, or a crawl page whose first attempt
   * runs without one), ended here as its workflow would.
   */
  private async endByCancel(taskId: string, workflowId: string): Promise<{ applied: boolean }> {
    try {
      await this.deps.temporal.workflow.getHandle(workflowId).signal(cancelTaskSignal);
      return { applied: false };
    } catch (error) {
      if (!(error instanceof WorkflowNotFoundError)) throw error;
      // The sweep starts only tasks still active, so no workflow starts for it afterwards.
      return this.fail(taskId, taskFailure('task_cancelled', 'Cancelled by its client.'));
    }
  }

  /**
   * The client waiting for the task (a chat's request) went away: its workflow is cancelled, then its
   * attempt stopped. The cancellation first: once it is in the workflow's history, the stopped attempt's
   * report cannot be taken for a failure and the task handed to another solver.
   */
  async clientGone(taskId: string, workflowId: string): Promise<void> {
    // An attempt sent early and not yet taken over stopped with the client: what it delivered is kept first.
    await this.deps.earlyAttempts?.delivered(taskId);
    await this.deps.temporal.workflow
      .getHandle(workflowId)
      .cancel()
      .catch(() => undefined);
    await this.deps.stops.stop(taskId);
  }

  /**
   * An admin's completion of a task: the workflow is told (it settles the task, paying `solverId`), the
   * task's attempt stopped, and the answer waits for the task to end. `checkResult` sees the task's type
   * before anything is done (the result must be one its solver could have returned).
   */
  async adminComplete(
    input: { taskId: string; solverId: string; result: Record<string, unknown> },
    checkResult: (taskType: string) => void,
  ): Promise<AdminCompleteResult> {
    const { taskId } = input;
    const task = await this.deps.store.taskRecord(taskId);
    if (!task) return { kind: 'task_not_found' };
    if (isTerminalState(task.status)) return { kind: 'already_finished', status: task.status, before: true };
    checkResult(task.task_type);
    if (!(await this.deps.store.accountExists(input.solverId))) return { kind: 'solver_not_found' };
    await this.deps.temporal.workflow
      .getHandle(task.workflow_id)
      .signal(adminCompleteSignal, { solverId: input.solverId, result: input.result });
    // The signal first: a solver still at work is then stopped now, not at its activity's next heartbeat.
    await this.deps.stops
      .stop(taskId)
      .catch((error) =>
        this.deps.logger.warn(
          { err: error, task_id: taskId },
          'could not stop the attempt of a task completed by an admin',
        ),
      );
    const verdict = await this.waitForResult(task, SETTLE_WAIT_MS);
    const finished = await this.read(taskId);
    if (verdict && finished?.status !== 'completed')
      return { kind: 'already_finished', status: finished?.status, before: false };
    return { kind: 'completed', task: finished };
  }

  /**
   * Settles an admin's completion, as its workflow's activity: the result's large parts are written
   * first, as a solver's are (a write that fails is retried, and nothing is settled meanwhile).
   */
  async settleAdminCompletion(input: {
    taskId: string;
    taskType: string;
    completion: Extract<Completion, { kind: 'admin' }>;
  }): Promise<Ended> {
    const { store, artifacts, config } = this.deps;
    const stored = await storeArtifacts(artifacts, {
      taskId: input.taskId,
      scope: 'admin',
      taskType: input.taskType,
      result: input.completion.result,
    });
    const completion = stored.keys.length > 0 ? { ...input.completion, stored: stored.parts } : input.completion;
    const outcome = this.afterCommit(
      await store.completeTask(input.taskId, { completion, feePercent: config.platformFeePercent }),
    );
    if (!outcome.applied) await store.deleteUntakenArtifacts(input.taskId, stored.keys);
    // An admin's completion takes no particular attempt, so it cannot find one closed.
    if (outcome.attemptClosed) throw new Error(`task ${input.taskId}: an admin completion found an attempt closed`);
    return outcome;
  }

  /** Opens the task's next attempt (its workflow's activity); the slots it hands on are told. */
  async reserveAttempt(input: ReserveAttemptInput) {
    return this.afterCommit(await this.deps.store.reserveAttempt(input));
  }

  /** The solver accepted the attempt (the sweep then waits out its time before it runs the task elsewhere). */
  markAccepted(attemptId: string): Promise<void> {
    return this.deps.store.markAttemptAccepted(attemptId);
  }

  /**
   * A solver's valid result for its attempt, its large parts written to the artifact store (`stored`):
   * the task completes and settles, or, when it had ended or the attempt was closed, the parts it did
   * not take are deleted. A client chat's `answer` (its message as the client was streamed it) is kept
   * only if the chat is sampled for verification.
   */
  async completeAttempt(input: {
    taskId: string;
    attemptId: string;
    result: Record<string, unknown>;
    usage?: MeteredUsage;
    answer?: Record<string, unknown>;
    stored: { keys: readonly string[]; parts: Record<string, unknown> };
  }): Promise<AttemptCompletion> {
    const { store, config, logger } = this.deps;
    const { taskId, attemptId, result, usage, answer, stored } = input;
    const completed = this.afterCommit(
      await store.completeTask(taskId, {
        completion: {
          kind: 'attempt',
          attemptId,
          result,
          ...(usage ? { usage } : {}),
          ...(answer ? { answer } : {}),
          ...(stored.keys.length > 0 ? { stored: stored.parts } : {}),
        },
        feePercent: config.platformFeePercent,
      }),
    );
    if (!completed.applied)
      await store
        .deleteUntakenArtifacts(taskId, stored.keys)
        .catch((error) => logger.warn({ err: error, task_id: taskId }, 'untaken artifacts not deleted'));
    if (completed.attemptClosed) return { kind: 'attempt_closed' };
    return completed.applied ? { kind: 'completed' } : { kind: 'finished_already', status: completed.status };
  }

  /**
   * Ends an attempt without a result; a claim that the target failed is examined first (the service's
   * own check, where it has one). Whether it closed the attempt, and how such a claim was judged.
   */
  async failAttempt(input: AttemptEnd): Promise<{ closed: boolean; targetVerdict: TargetFailureVerdict | null }> {
    const { store } = this.deps;
    const claim = claimsTargetFailure(input)
      ? await store.examineTargetClaim(input.attemptId, input.error!.type as TargetFailureType)
      : null;
    const { closed, targetVerdict } = this.afterCommit(
      await store.closeAttempt({ ...input, ...(claim ? { claim } : {}) }),
    );
    return { closed, targetVerdict };
  }

  /**
   * Ends the task without a result: its hold released, or, when its client ended it after its chat
   * attempt delivered content, settled at what was delivered (TASK_ERRORS' `billsDelivered`); `applied`
   * false when it had ended already.
   */
  async fail(taskId: string, failure: TaskFailure): Promise<Ended> {
    return this.afterCommit(
      await this.deps.store.failTask(
        taskId,
        { status: failure.status, error: failure.error },
        this.deps.config.platformFeePercent,
      ),
    );
  }

  /** A chat attempt stopped while it ran delivered this (before its task ends: an ending by its client bills it). */
  recordDelivered(attemptId: string, usage: BilledUsage): Promise<void> {
    return this.deps.store.recordDeliveredUsage(attemptId, usage);
  }

  /**
   * Starts the workflow of a stored task, then tells the slots its creation handed on (after the start,
   * so that a slot handed to this task as it queued reaches its workflow too); false when it could not be
   * started, and the task is then failed with its hold released. Idempotent (the workflow id is the
   * task's), so the sweep can call it for tasks whose API node died between the insert and the start.
   */
  async start(
    task: TaskRow,
    first: {
      chat?: { strongModels: string[]; clientNodeId: string; completionId: string; maxAttempts?: number };
      firstAssignment?: Assignment | null;
      firstAttemptStartedEarly?: boolean;
      firstAttemptReport?: AttemptFailed;
    } = {},
    handoffs?: Handoff[],
  ): Promise<boolean> {
    try {
      return await this.startWorkflow(task, first);
    } finally {
      this.deps.handoffs.deliver(handoffs);
    }
  }

  private async startWorkflow(
    task: TaskRow,
    {
      chat,
      firstAssignment,
      firstAttemptStartedEarly,
      firstAttemptReport,
    }: Parameters<TaskEngine['start']>[1] & object,
  ): Promise<boolean> {
    const { config, logger } = this.deps;
    if (task.task_type === CHAT_TASK_TYPE && !chat) {
      // A chat completion whose client request is gone cannot be streamed to anyone: give the points back.
      await this.fail(
        task.task_id,
        taskFailure('client_cancelled', 'The request ended before the completion started.'),
      );
      return true;
    }
    const input: TaskWorkflowInput = {
      taskId: task.task_id,
      taskType: task.task_type,
      maxPricePoints: task.max_price_points,
      timeoutSeconds: task.timeout_seconds,
      maxAttempts: chat?.maxAttempts ?? config.maxTaskAttempts,
      // A generation may legitimately stream for as long as the whole completion is allowed to take.
      attemptTimeoutSeconds: chat ? task.timeout_seconds : config.attemptTimeoutSeconds,
      acceptTimeoutMs: config.acceptTimeoutMs,
      ...(chat
        ? {
            strongModels: chat.strongModels,
            stream: { clientNodeId: chat.clientNodeId, completionId: chat.completionId },
          }
        : {}),
      ...(firstAssignment ? { firstAssignment } : {}),
      ...(firstAttemptStartedEarly ? { firstAttemptStartedEarly } : {}),
      ...(firstAttemptReport ? { firstAttemptReport } : {}),
    };
    try {
      await launchTaskWorkflow(this.deps, {
        workflowId: task.workflow_id,
        input,
        accountId: task.account_id,
        searchTaskType: task.task_type,
        chat: chat !== undefined,
        summary: taskSummary(task),
      });
    } catch (error) {
      logger.error({ err: error, task_id: task.task_id }, 'could not start the task workflow');
      // Without a workflow nothing would ever settle the hold: end the task now and give the points back.
      await this.fail(
        task.task_id,
        taskFailure('service_unavailable', 'The task could not be started; its hold was released.'),
      );
      return false;
    }
    // Only the stranded-task sweep reads this mark; the caller need not wait for it.
    void this.deps.store
      .markWorkflowStarted(task.task_id)
      .catch((error) => logger.warn({ err: error, task_id: task.task_id }, 'workflow start not recorded'));
    return true;
  }

  /**
   * Starts the workflows of tasks whose start was never recorded `olderThanSeconds` after creation: their
   * API node died between the insert and the start. Returns the ids it handled. Starting is idempotent
   * (the workflow id is the task's), so a start the mark merely missed is harmless.
   */
  async sweepUnstarted(olderThanSeconds: number): Promise<string[]> {
    const stranded = await this.deps.store.findUnstartedTasks(olderThanSeconds);
    const handled: string[] = [];
    for (const task of stranded) {
      this.deps.logger.warn({ task_id: task.task_id }, 'starting the workflow of a stranded task');
      try {
        if (await this.start(task)) handled.push(task.task_id);
      } catch (error) {
        this.deps.logger.error({ err: error, task_id: task.task_id }, 'stranded task not started');
      }
    }
    return handled;
  }
}

/**
 * Starts the task workflow (a chat's, with `chat`), client's or platform's: false when one with its id
 * was started already (by another process, or an earlier try). A platform task's workflow creates its
 * task (docs/trust.md), so it has no row to start from; `searchTaskType` names it in the Temporal UI.
 */
export async function launchTaskWorkflow(
  deps: { config: Config; temporal: Client; eagerStart?: boolean },
  start: {
    workflowId: string;
    input: TaskWorkflowInput;
    accountId: string;
    searchTaskType: string;
    chat?: boolean;
    /** Refuse a second start even once the first workflow has ended (a verification run is started once). */
    once?: boolean;
    /** The line the Temporal UI's workflow list shows (src/tasks/workflow-summary.ts). */
    summary: string;
  },
): Promise<boolean> {
  try {
    await deps.temporal.workflow.start(start.chat ? 'chatCompletionWorkflow' : 'taskWorkflow', {
      taskQueue: deps.config.taskQueue,
      workflowId: start.workflowId,
      ...(start.once ? { workflowIdReusePolicy: 'REJECT_DUPLICATE' as const } : {}),
      args: [start.input],
      requestEagerStart: deps.eagerStart,
      staticSummary: start.summary,
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
