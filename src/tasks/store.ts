import type { ArtifactStore } from '../artifacts/store';
import type { TargetFailureType, TargetFailureVerdict, TaskFailure } from '../contract/lifecycle';
import type { BilledUsage } from '../schemas/domain';
import { findAccount } from '../db/accounts';
import type { Handoff, ReserveAttemptInput } from '../db/matching';
import type { Db } from '../db/pool';
import type { TrustPolicy } from '../db/reputation';
import { solversAwaitingUnfundedChecks } from '../db/check-funding';
import { countOnlineSolvers } from '../db/solvers';
import type { TargetClaim } from '../db/target-claims';
import {
  closeAttempt,
  markAttemptAccepted,
  recordDeliveredUsage,
  reserveAttempt,
  type AttemptEnd,
  type Reservation,
} from '../db/tasks/attempts';
import {
  createTaskWithHold,
  findUnstartedTasks,
  markWorkflowStarted,
  type CreateTaskOutcome,
  type NewTask,
} from '../db/tasks/create';
import type { Finished, FinishOutcome } from '../db/tasks/finish';
import { getTaskRecord, type TaskRecord, type TaskRow } from '../db/tasks/records';
import { dropSubscription, saveSubscription, type WebhookEvent } from '../db/webhooks';
import { examineTargetClaim } from '../trust/target-failures';
import { finishTask, type Completion } from './finish';
import { deleteUntakenArtifacts, readTaskRecord } from './records';

/**
 * What the task engine reads and writes (src/tasks/engine.ts), and nothing else: its one way to storage,
 * so that its branches run as well against a store kept in memory (test/support/memory-task-store.ts).
 * Each operation is a statement of src/db (or a composition of src/tasks) with the pool and the trust
 * policy bound; their doc comments say what each one keeps.
 */
export interface TaskStore {
  /** A task with its hold, matched or queued as it is inserted; once per idempotency key. */
  createTask(task: NewTask & { claim?: undefined }): Promise<CreateTaskOutcome>;
  markWorkflowStarted(taskId: string): Promise<void>;
  /** Active tasks whose workflow start was never recorded, `olderThanSeconds` after creation. */
  findUnstartedTasks(olderThanSeconds: number): Promise<readonly TaskRow[]>;
  /** The record as stored; null when there is none (on that account). */
  taskRecord(taskId: string, accountId?: string): Promise<TaskRecord | null>;
  /** The record as its client sees it, its result's artifacts read back. */
  readTaskRecord(taskId: string, accountId?: string): Promise<TaskRecord | null>;
  /** Ends the task with a result, settled at its price; not when it had ended or the attempt was closed. */
  completeTask(taskId: string, ending: { completion: Completion; feePercent: string }): Promise<FinishOutcome>;
  /**
   * Ends the task without a result, its hold released, or, when its client ended it after a chat attempt
   * delivered content, settled at what was delivered; `applied` false when it had ended.
   */
  failTask(taskId: string, failure: TaskFailure, feePercent: string): Promise<Finished>;
  reserveAttempt(input: ReserveAttemptInput): Promise<Reservation>;
  markAttemptAccepted(attemptId: string): Promise<void>;
  /** What a chat attempt stopped while it ran had delivered, which an ending by its client bills. */
  recordDeliveredUsage(attemptId: string, usage: BilledUsage): Promise<void>;
  /** Ends an attempt once and hands its slot on. */
  closeAttempt(
    input: AttemptEnd,
  ): Promise<{ closed: boolean; handoffs: Handoff[]; targetVerdict: TargetFailureVerdict | null }>;
  /** The service's own view of an attempt's claim that its target failed; null when it has none. */
  examineTargetClaim(attemptId: string, errorType: TargetFailureType): Promise<TargetClaim | null>;
  /** A task's webhook, stored before the task so that the task cannot finish unobserved. */
  saveSubscription(input: {
    taskId: string;
    accountId: string;
    url: string;
    events: readonly WebhookEvent[];
  }): Promise<void>;
  dropSubscription(taskId: string): Promise<void>;
  accountExists(accountId: string): Promise<boolean>;
  countOnlineSolvers(taskType: string, options: { country?: string; strongModels?: string[] }): Promise<number>;
  /** Solvers online for the type that wait on probation for a check the platform account cannot pay now. */
  solversAwaitingUnfundedChecks(
    taskType: string,
    options: { strongModels?: string[]; country?: string },
  ): Promise<number>;
  /** Deletes the artifacts written for a result the task did not take. */
  deleteUntakenArtifacts(taskId: string, keys: readonly string[]): Promise<void>;
}

/** The task store in PostgreSQL: the statements bound to the pool, the trust policy and the artifact store. */
export function pgTaskStore(deps: { db: Db; trust: TrustPolicy; artifacts: ArtifactStore }): TaskStore {
  const { db, trust } = deps;
  return {
    createTask: (task) => createTaskWithHold(db, trust, task),
    markWorkflowStarted: (taskId) => markWorkflowStarted(db, taskId),
    findUnstartedTasks: (olderThanSeconds) => findUnstartedTasks(db, olderThanSeconds),
    taskRecord: (taskId, accountId) => getTaskRecord(db, taskId, accountId),
    readTaskRecord: (taskId, accountId) => readTaskRecord(deps, taskId, accountId),
    completeTask: (taskId, ending) => finishTask(db, trust, taskId, ending),
    failTask: (taskId, failure, feePercent) => finishTask(db, trust, taskId, { failure, feePercent }),
    reserveAttempt: (input) => reserveAttempt(db, trust, input),
    markAttemptAccepted: (attemptId) => markAttemptAccepted(db, attemptId),
    recordDeliveredUsage: (attemptId, usage) => recordDeliveredUsage(db, attemptId, usage),
    closeAttempt: (input) => closeAttempt(db, trust, input),
    examineTargetClaim: (attemptId, errorType) => examineTargetClaim(db, attemptId, errorType),
    saveSubscription: (input) => saveSubscription(db, input),
    dropSubscription: (taskId) => dropSubscription(db, taskId),
    accountExists: async (accountId) => (await findAccount(db, accountId)) !== null,
    countOnlineSolvers: (taskType, options) => countOnlineSolvers(db, trust, taskType, options),
    solversAwaitingUnfundedChecks: (taskType, options) => solversAwaitingUnfundedChecks(db, trust, taskType, options),
    deleteUntakenArtifacts: (taskId, keys) => deleteUntakenArtifacts(deps, taskId, keys),
  };
}
