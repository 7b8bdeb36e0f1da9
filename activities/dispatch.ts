import { Context } from '@temporalio/activity';
import { completeTask, getTaskRow } from '../src/db/tasks';
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
}

export type DispatchOutcome =
  /** The result is stored and the task completed and settled (`status` is the task's state after that). */
  | { ok: true; chunks: number; status: TaskState }
  | { ok: false; outcome: AttemptOutcome; error: { type: string; message: string }; retryable: boolean; chunks: number };

// Heartbeats carry cancellation to the activity and let Temporal notice a dead node.
const HEARTBEAT_EVERY_MS = 1000;

/**
 * Runs on the API node that holds the solver's socket (its own task queue). Sends the task, waits for
 * acceptance and the result, completes the task with a valid result and settles it
 * (once: keyed in the ledger, and a task already finished is left as it is), and reports the outcome.
 * Settling here rather than in a later workflow step saves the workflow a round trip per task.
 */
export function createDispatchActivities({ db, hub, relay, logger, config, payloads }: NodeActivityDeps) {
  return {
    async dispatchAttempt(input: DispatchInput): Promise<DispatchOutcome> {
      const context = Context.current();
      const heartbeat = setInterval(() => context.heartbeat(), HEARTBEAT_EVERY_MS);
      let chunks = 0;
      // Deltas are relayed in order; a failed relay is logged, and the client sees the gap at the end.
      let relayed: Promise<void> = Promise.resolve();
      const stream = input.stream;
      const onChunk = stream
        ? (delta: Record<string, unknown>) => {
            const seq = chunks++;
            if (relay.isLocal(stream.clientNodeId)) {
              // Same node: hand the delta over synchronously (order is the call order).
              relay
                .forward(stream.clientNodeId, stream.completionId, { type: 'chunk', attempt: input.attemptId, seq, delta })
                .catch((error) => logger.warn({ err: error, attempt_id: input.attemptId }, 'chat delta not delivered'));
              return;
            }
            relayed = relayed
              .then(() => relay.forward(stream.clientNodeId, stream.completionId, { type: 'chunk', attempt: input.attemptId, seq, delta }))
              .catch((error) => logger.warn({ err: error, attempt_id: input.attemptId }, 'chat delta not relayed'));
          }
        : undefined;
      try {
        const payload = payloads?.take(input.taskId) ?? (await getTaskRow(db, input.taskId))?.payload;
        if (!payload) return { ok: false, outcome: 'error', error: { type: 'task_not_found', message: 'The task no longer exists.' }, retryable: false, chunks };
        const result = await hub.runAttempt({
          solverId: input.solverId,
          attemptId: input.attemptId,
          taskId: input.taskId,
          taskType: input.taskType,
          payload,
          deadline: new Date(input.deadlineMs),
          acceptTimeoutMs: input.acceptTimeoutMs,
          signal: context.cancellationSignal,
          onChunk,
        });
        const completed = await completeTask(db, { taskId: input.taskId, completion: { kind: 'attempt', attemptId: input.attemptId, result }, feePercent: config.platformFeePercent });
        if (completed.attemptClosed) {
          return { ok: false, outcome: 'cancelled', error: { type: 'attempt_closed', message: 'The attempt ended before its result arrived.' }, retryable: true, chunks };
        }
        if (stream) {
          await relayed;
          const usage = (result.usage as Record<string, unknown> | undefined) ?? null;
          await relay.forward(stream.clientNodeId, stream.completionId, { type: 'end', attempt: input.attemptId, chunks, finish_reason: (result.finish_reason as string | null) ?? null, usage });
        }
        return { ok: true, chunks, status: completed.status };
      } catch (error) {
        if (error instanceof AttemptFailure) {
          if (error.outcome === 'cancelled' && context.cancellationSignal.aborted) throw context.cancellationSignal.reason ?? error;
          return { ok: false, outcome: error.outcome, error: { type: error.errorType, message: error.message }, retryable: error.retryable, chunks };
        }
        throw error;
      } finally {
        clearInterval(heartbeat);
      }
    },
  };
}
