import { Context } from '@temporalio/activity';
import { getTaskRow, storeAttemptResult } from '../src/db/tasks';
import { AttemptFailure } from '../src/dispatch/hub';
import type { AttemptOutcome, CapabilityTaskType } from '../src/schemas/domain';
import type { NodeActivityDeps } from './deps';

export interface DispatchInput {
  taskId: string;
  attemptId: string;
  solverId: string;
  taskType: CapabilityTaskType;
  deadlineMs: number;
  acceptTimeoutMs: number;
}

export type DispatchOutcome =
  | { ok: true }
  | { ok: false; outcome: AttemptOutcome; error: { type: string; message: string }; retryable: boolean };

// Heartbeats carry cancellation to the activity and let Temporal notice a dead node.
const HEARTBEAT_EVERY_MS = 1000;

/**
 * Runs on the API node that holds the solver's socket (its own task queue). Sends the task, waits for
 * acceptance and the result, stores a valid result with the attempt, and reports the outcome.
 */
export function createDispatchActivities({ db, hub }: NodeActivityDeps) {
  return {
    async dispatchAttempt(input: DispatchInput): Promise<DispatchOutcome> {
      const context = Context.current();
      const heartbeat = setInterval(() => context.heartbeat(), HEARTBEAT_EVERY_MS);
      try {
        const task = await getTaskRow(db, input.taskId);
        if (!task) return { ok: false, outcome: 'error', error: { type: 'task_not_found', message: 'The task no longer exists.' }, retryable: false };
        const result = await hub.runAttempt({
          solverId: input.solverId,
          attemptId: input.attemptId,
          taskId: input.taskId,
          taskType: input.taskType,
          payload: task.payload,
          deadline: new Date(input.deadlineMs),
          acceptTimeoutMs: input.acceptTimeoutMs,
          signal: context.cancellationSignal,
        });
        if (!(await storeAttemptResult(db, input.attemptId, result))) {
          return { ok: false, outcome: 'cancelled', error: { type: 'attempt_closed', message: 'The attempt ended before its result arrived.' }, retryable: true };
        }
        return { ok: true };
      } catch (error) {
        if (error instanceof AttemptFailure) {
          if (error.outcome === 'cancelled' && context.cancellationSignal.aborted) throw context.cancellationSignal.reason ?? error;
          return { ok: false, outcome: error.outcome, error: { type: error.errorType, message: error.message }, retryable: error.retryable };
        }
        throw error;
      } finally {
        clearInterval(heartbeat);
      }
    },
  };
}
