import { Context } from '@temporalio/activity';
import { completeTask, getTaskRow } from '../src/db/tasks';
import { DeltaForwarder } from '../src/chat/delta-forwarder';
import { AttemptFailure } from '../src/dispatch/hub';
import type { AttemptOutcome, CapabilityTaskType, TaskState } from '../src/schemas/domain';
import type { NodeActivityDeps } from './deps';

export interface DispatchInput {
  taskId: string;
  attemptId: string;
  solverId: string;
  taskType: CapabilityTaskType;
  deadlineMs: number;
  acceptTimeoutMs: number;
  /** Chat: where to stream the deltas (the node serving the client's HTTP request). */
  stream?: { clientNodeId: string; completionId: string };
  /** The task went to the solver as it was created (src/dispatch/early-attempts.ts): take that attempt over. */
  startedEarly?: boolean;
}

export type DispatchOutcome =
  /** The result is stored and the task completed and settled (`status` is the task's state after that). */
  | { ok: true; chunks: number; status: TaskState }
  | { ok: false; outcome: AttemptOutcome; error: { type: string; message: string }; retryable: boolean; chunks: number };

// Heartbeats carry cancellation to the activity and let Temporal notice a dead node.
const HEARTBEAT_EVERY_MS = 1000;

/**
 * Runs on the API node that holds the solver's socket (its own task queue). Sends the task (or takes over
 * the attempt sent as the task was created), waits for acceptance and the result, completes the task
 * with a valid result and settles it (once: keyed in the ledger, and a task already finished is left as
 * it is), and reports the outcome.
 * Settling here rather than in a later workflow step saves the workflow a round trip per task.
 */
export function createDispatchActivities({ db, hub, relay, stops, logger, config, payloads, earlyAttempts }: NodeActivityDeps) {
  return {
    async dispatchAttempt(input: DispatchInput): Promise<DispatchOutcome> {
      const context = Context.current();
      const stream = input.stream;
      // The attempt stops when Temporal cancels this activity, or at once when the task is settled
      // elsewhere (src/dispatch/attempt-stops.ts): the activity would hear of that only at its next heartbeat.
      const settledElsewhere = new AbortController();
      const stop = AbortSignal.any([context.cancellationSignal, settledElsewhere.signal]);
      const early = input.startedEarly ? earlyAttempts?.adopt(input.attemptId, stop) : undefined;
      if (input.startedEarly && !early) {
        // Abandoned before this activity ran (its client went away, or the workflow gave up on it): what
        // it streamed meanwhile is unknown here (-1); sending the task again would repeat the answer.
        return { ok: false, outcome: 'cancelled', error: { type: 'attempt_closed', message: 'The attempt ended before its workflow took it over.' }, retryable: true, chunks: -1 };
      }
      const forgetStop = stops.onStop(input.taskId, () => settledElsewhere.abort());
      const heartbeat = setInterval(() => context.heartbeat(), HEARTBEAT_EVERY_MS);
      const deltas = early?.deltas ?? (stream ? new DeltaForwarder({ relay, logger }, stream, input.attemptId) : undefined);
      const chunks = () => deltas?.chunks ?? 0;
      try {
        let result: Record<string, unknown>;
        if (early) {
          result = await early.result;
        } else {
          const payload = payloads?.take(input.taskId) ?? (await getTaskRow(db, input.taskId))?.payload;
          if (!payload) return { ok: false, outcome: 'error', error: { type: 'task_not_found', message: 'The task no longer exists.' }, retryable: false, chunks: chunks() };
          result = await hub.runAttempt({
            solverId: input.solverId,
            attemptId: input.attemptId,
            taskId: input.taskId,
            taskType: input.taskType,
            payload,
            deadline: new Date(input.deadlineMs),
            acceptTimeoutMs: input.acceptTimeoutMs,
            signal: stop,
            onChunk: deltas?.onChunk,
          });
        }
        const completed = await completeTask(db, { taskId: input.taskId, completion: { kind: 'attempt', attemptId: input.attemptId, result }, feePercent: config.platformFeePercent });
        if (completed.attemptClosed) {
          return { ok: false, outcome: 'cancelled', error: { type: 'attempt_closed', message: 'The attempt ended before its result arrived.' }, retryable: true, chunks: chunks() };
        }
        if (stream) {
          await deltas?.flushed();
          const usage = (result.usage as Record<string, unknown> | undefined) ?? null;
          await relay.forward(stream.clientNodeId, stream.completionId, { type: 'end', attempt: input.attemptId, chunks: chunks(), finish_reason: (result.finish_reason as string | null) ?? null, usage });
        }
        return { ok: true, chunks: chunks(), status: completed.status };
      } catch (error) {
        if (error instanceof AttemptFailure) {
          if (error.outcome === 'cancelled' && context.cancellationSignal.aborted) throw context.cancellationSignal.reason ?? error;
          return { ok: false, outcome: error.outcome, error: { type: error.errorType, message: error.message }, retryable: error.retryable, chunks: chunks() };
        }
        throw error;
      } finally {
        clearInterval(heartbeat);
        forgetStop();
      }
    },
  };
}
