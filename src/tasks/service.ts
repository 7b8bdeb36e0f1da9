import crypto from 'node:crypto';
import { WorkflowExecutionAlreadyStartedError, type Client } from '@temporalio/client';
import type { Config } from '../config';
import type { Db } from '../db/pool';
import { countOnlineSolvers } from '../db/solvers';
import { createTaskWithHold, finishTaskWithoutResult, getTaskRecord, markWorkflowStarted, type Assignment, type TaskRecord, type TaskRow } from '../db/tasks';
import type { EarlyAttempts } from '../dispatch/early-attempts';
import { ApiError } from '../errors';
import type { Logger } from '../logger';
import { CHAT_TASK_TYPE, type WebTaskType } from '../schemas/domain';
import {
  AccountIdAttribute,
  chatWorkflowId,
  TaskStatusAttribute,
  TaskTypeAttribute,
  taskWorkflowId,
  type TaskWorkflowInput,
  type TaskWorkflowResult,
} from '../../workflows/contract';
import type { TaskFinishedWatch } from './finished';
import type { RecentPayloads } from './recent-payloads';

export interface CreateTaskInput {
  /** Chosen by the caller when it must listen for the task's events before the task starts. */
  taskId?: string;
  accountId: string;
  taskType: WebTaskType | typeof CHAT_TASK_TYPE;
  payload: Record<string, unknown>;
  maxPricePoints?: string | null;
  /** The request can set max_price_points (POST /v1/tasks). */
  priceFromRequest?: boolean;
  timeoutSeconds?: number | null;
  idempotencyKey?: string;
  /** The error thrown, with nothing created, when no eligible solver is online at all (a new task only). */
  unavailable?: () => ApiError;
  /**
   * Chat: eligible strong-tier models, the node that streams the deltas to the client, and the client's
   * request (aborted when it ends), which bounds a first attempt sent before the workflow takes it over.
   */
  chat?: { strongModels: string[]; clientNodeId: string; clientGone?: AbortSignal };
}

// Longer than nearly every web task takes, so the long poll is rarely opened.
const RESULT_FALLBACK_MS = 5000;
// A caller waits a little past the task's own deadline, so the workflow's verdict wins.
const WAIT_GRACE_MS = 5000;

/** Creating, starting, waiting for and completing tasks: shared by the task routes and the worker's recovery sweep. */
export class TaskService {
  constructor(
    private readonly deps: { config: Config; db: Db; temporal: Client; logger: Logger; eagerStart?: boolean; finished?: TaskFinishedWatch; payloads?: RecentPayloads; earlyAttempts?: EarlyAttempts; resultFallbackMs?: number },
  ) {}

  /** Holds the points and starts the task's workflow; with a reused idempotency key, returns the first task. */
  async create(input: CreateTaskInput): Promise<TaskRecord> {
    const taskId = input.taskId ?? `${input.chat ? 'chat' : 'task'}_${crypto.randomBytes(12).toString('hex')}`;
    const { task, created, firstAssignment } = await createTaskWithHold(this.deps.db, {
      taskId,
      accountId: input.accountId,
      taskType: input.taskType,
      payload: input.payload,
      maxPricePoints: input.maxPricePoints ?? (input.chat ? this.deps.config.defaultChatPricePoints : this.deps.config.defaultWebTaskPricePoints),
      priceFromRequest: input.priceFromRequest,
      timeoutSeconds: input.timeoutSeconds ?? this.deps.config.defaultTaskTimeoutSeconds,
      workflowId: input.chat ? chatWorkflowId(taskId) : taskWorkflowId(taskId),
      idempotencyKey: input.idempotencyKey,
      match: { strongModels: input.chat?.strongModels, unavailable: input.unavailable },
    });
    if (!created) return (await getTaskRecord(this.deps.db, task.task_id))!;
    const chat = input.chat && { strongModels: input.chat.strongModels, clientNodeId: input.chat.clientNodeId, completionId: chatWorkflowId(taskId) };
    // A chat's first token need not wait for the workflow: its solver, if connected here, gets the task now.
    const clientGone = input.chat?.clientGone;
    const startedEarly = chat && firstAssignment && clientGone ? this.startFirstAttemptEarly(task, firstAssignment, chat, clientGone) : false;
    if (!startedEarly) this.deps.payloads?.remember(task.task_id, task.payload);
    try {
      await this.startWorkflow(task, chat, firstAssignment, startedEarly);
    } catch (error) {
      if (startedEarly) this.deps.earlyAttempts?.abandon(firstAssignment!.attemptId);
      throw error;
    }
    // A new task has no attempts yet; its row as inserted is the record (the workflow may have moved on).
    const { account_id: _account, ...record } = task;
    return { ...record, attempts: [] };
  }

  private startFirstAttemptEarly(task: TaskRow, assignment: Assignment, stream: { clientNodeId: string; completionId: string }, clientGone: AbortSignal): boolean {
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
      }) ?? false
    );
  }

  /**
   * Starts the workflow of a stored task. Idempotent (the workflow id is the task's), so the worker's
   * sweep can call it for tasks whose API node died between the insert and the start.
   */
  async startWorkflow(
    task: TaskRow,
    chat?: { strongModels: string[]; clientNodeId: string; completionId: string },
    firstAssignment?: Assignment | null,
    firstAttemptStartedEarly = false,
  ): Promise<void> {
    if (task.task_type === CHAT_TASK_TYPE && !chat) {
      // A chat completion whose client request is gone cannot be streamed to anyone: give the points back.
      await finishTaskWithoutResult(this.deps.db, { taskId: task.task_id, status: 'failed', error: { type: 'client_cancelled', message: 'The request ended before the completion started.' } });
      return;
    }
    const input: TaskWorkflowInput = {
      taskId: task.task_id,
      taskType: task.task_type,
      maxPricePoints: task.max_price_points,
      timeoutSeconds: task.timeout_seconds,
      maxAttempts: this.deps.config.maxTaskAttempts,
      // A generation may legitimately stream for as long as the whole completion is allowed to take.
      attemptTimeoutSeconds: chat ? task.timeout_seconds : this.deps.config.attemptTimeoutSeconds,
      acceptTimeoutMs: this.deps.config.acceptTimeoutMs,
      ...(chat ? { strongModels: chat.strongModels, stream: { clientNodeId: chat.clientNodeId, completionId: chat.completionId } } : {}),
      ...(firstAssignment ? { firstAssignment } : {}),
      ...(firstAttemptStartedEarly ? { firstAttemptStartedEarly } : {}),
    };
    try {
      await this.deps.temporal.workflow.start(chat ? 'chatCompletionWorkflow' : 'taskWorkflow', {
        taskQueue: this.deps.config.taskQueue,
        workflowId: task.workflow_id,
        args: [input],
        // With a workflow worker in this process, the first workflow task runs here without a round trip.
        requestEagerStart: this.deps.eagerStart ?? false,
        typedSearchAttributes: [
          { key: TaskTypeAttribute, value: task.task_type },
          { key: AccountIdAttribute, value: task.account_id },
          { key: TaskStatusAttribute, value: 'queued' },
        ],
      });
    } catch (error) {
      if (!(error instanceof WorkflowExecutionAlreadyStartedError)) {
        this.deps.logger.error({ err: error, task_id: task.task_id }, 'could not start the task workflow');
        // Without a workflow nothing would ever settle the hold: end the task now and give the points back.
        await finishTaskWithoutResult(this.deps.db, {
          taskId: task.task_id,
          status: 'failed',
          error: { type: 'service_unavailable', message: 'The task could not be started; its hold was released.' },
        });
        throw new ApiError('service_unavailable', 'The task could not be started; nothing was charged. Retry shortly.', { task_id: task.task_id });
      }
    }
    // Only the stranded-task sweep reads this mark; the caller need not wait for it.
    void markWorkflowStarted(this.deps.db, task.task_id).catch((error) => this.deps.logger.warn({ err: error, task_id: task.task_id }, 'workflow start not recorded'));
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
    const announced = this.deps.finished?.wait(task.task_id);
    const stored = announced?.finished.then((status) => ({ taskId: task.task_id, status: status as TaskWorkflowResult['status'] }));
    try {
      return await Promise.race([
        after(timeoutMs, () => null),
        stored ? Promise.race([stored, after(this.deps.resultFallbackMs ?? RESULT_FALLBACK_MS, fromWorkflow)]) : fromWorkflow(),
      ]);
    } finally {
      for (const timer of timers) clearTimeout(timer);
      announced?.stop();
    }
  }

  async ensureSolverOnline(taskType: WebTaskType): Promise<void> {
    if ((await countOnlineSolvers(this.deps.db, taskType)) === 0) throw noSolverOnline(taskType);
  }
}

export const noSolverOnline = (taskType: WebTaskType) => new ApiError('no_solver_available', `No solver for ${taskType} is online right now; retry later.`);
