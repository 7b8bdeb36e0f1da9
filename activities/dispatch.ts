import { Context } from '@temporalio/activity';
import { storeArtifacts } from '../src/artifacts/results';
import { getTaskRow } from '../src/db/tasks/records';
import { DeltaForwarder } from '../src/chat/delta-forwarder';
import { chatSink, MessageAssembler } from '../src/chat/openai-format';
import { countedChunks, DeliveredTokens, deliveredUsage, meterUsage } from '../src/chat/usage';
import { AttemptFailure } from '../src/dispatch/attempt';
import { CHAT_TASK_TYPE, type CapabilityTaskType } from '../src/schemas/domain';
import { attemptFailed, UNKNOWN_CHUNKS, type AttemptReport } from '../src/contract/lifecycle';
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
  /**
   * The task went to the solver before the workflow asked (src/dispatch/early-attempts.ts: as it was
   * created, or as this node handed it a freed slot): take that attempt over.
   */
  startedEarly?: boolean;
}

// Heartbeats carry cancellation to the activity and let Temporal notice a dead node.
const HEARTBEAT_EVERY_MS = 1000;

/**
 * Runs on the API node that holds the solver's socket (its own task queue). Sends the task (or takes over
 * the attempt sent early, as the task was created or handed its slot), waits for acceptance and the
 * result, completes the task with a valid result and settles it (once: keyed in the ledger, and a task
 * already finished is left as it is), and reports the outcome.
 * Settling here rather than in a later workflow step saves the workflow a round trip per task.
 */
export function createDispatchActivities(deps: NodeActivityDeps) {
  return {
    async dispatchAttempt(input: DispatchInput): Promise<AttemptReport> {
      const context = Context.current();
      const heartbeat = setInterval(() => context.heartbeat(), HEARTBEAT_EVERY_MS);
      try {
        return await runDispatch(deps, input, context.cancellationSignal);
      } finally {
        clearInterval(heartbeat);
      }
    },
  };
}

/**
 * The attempt as its dispatch activity runs it, and as a crawl's page runs it without a workflow
 * (activities/page-dispatch.ts). `cancelled` is the caller's cancellation: an attempt it cancels throws
 * its reason rather than reporting a failure.
 */
export async function runDispatch(
  { db, hub, relay, stops, logger, config, payloads, earlyAttempts, engine, artifacts }: NodeActivityDeps,
  input: DispatchInput,
  cancelled: AbortSignal,
): Promise<AttemptReport> {
  const stream = input.stream;
  // The attempt stops when its caller is cancelled, or at once when the task is settled elsewhere
  // (src/dispatch/attempt-stops.ts): the activity would hear of that only at its next heartbeat.
  const settledElsewhere = new AbortController();
  const stop = AbortSignal.any([cancelled, settledElsewhere.signal]);
  // Taken over whenever it runs here: a handoff's signal resent by the sweep does not say it went early.
  const early = earlyAttempts?.adopt(input.attemptId, stop);
  if (input.startedEarly && !early) {
    // Abandoned before this activity ran (its client went away, or the workflow gave up on it): what
    // it streamed meanwhile is unknown here (-1); sending the task again would repeat the answer.
    return attemptFailed('attempt_closed', 'The attempt ended before its workflow took it over.', UNKNOWN_CHUNKS);
  }
  const forgetStop = stops.onStop(input.taskId, () => settledElsewhere.abort());
  const deltas = early?.deltas ?? (stream ? new DeltaForwarder({ relay, logger }, stream, input.attemptId) : undefined);
  // A chat's deltas are assembled as they go by (an attempt sent early assembles its own). With no client
  // to stream to (a chat audit, a verification run, docs/trust.md) the message is the stored result,
  // which the judge reads; a client's is its answer, kept only if the chat is sampled for verification.
  const assembled = early ? early.assembled : input.taskType === CHAT_TASK_TYPE ? new MessageAssembler() : undefined;
  const chunks = () => deltas?.chunks ?? 0;
  // Chat: what its deltas delivered is counted, to bound the usage it is billed for (src/chat/usage.ts).
  let delivered = early?.delivered;
  try {
    let result: Record<string, unknown>;
    if (early) {
      result = await early.result;
    } else {
      const payload = payloads?.take(input.taskId) ?? (await getTaskRow(db, input.taskId))?.payload;
      if (!payload) return attemptFailed('task_not_found', 'The task no longer exists.', chunks());
      if (input.taskType === CHAT_TASK_TYPE) delivered = new DeliveredTokens(payload);
      result = await hub.runAttempt({
        solverId: input.solverId,
        attemptId: input.attemptId,
        taskId: input.taskId,
        taskType: input.taskType,
        payload,
        deadline: new Date(input.deadlineMs),
        acceptTimeoutMs: input.acceptTimeoutMs,
        signal: stop,
        onChunk: countedChunks(delivered, chatSink(deltas, assembled)),
      });
    }
    let answer: Record<string, unknown> | undefined;
    if (assembled && stream) answer = { message: assembled.message() };
    else if (assembled) result = { ...result, message: assembled.message() };
    const usage = delivered ? meterUsage(result.usage, await delivered.counted()) : undefined;
    // Written before the task is completed and settled: a write that fails fails the attempt, and
    // nothing is charged for a result whose bytes are not kept.
    let stored: Awaited<ReturnType<typeof storeArtifacts>>;
    try {
      stored = await storeArtifacts(artifacts, {
        taskId: input.taskId,
        scope: input.attemptId,
        taskType: input.taskType,
        result,
      });
    } catch (error) {
      logger.error(
        { err: error, task_id: input.taskId, attempt_id: input.attemptId, store: artifacts.location },
        'artifact store write failed',
      );
      return attemptFailed('artifact_store_failed', 'The result could not be written to the artifact store.', chunks());
    }
    // A result the task did not take (finished or reassigned meanwhile) leaves nothing in the store.
    const completed = await engine.completeAttempt({
      taskId: input.taskId,
      attemptId: input.attemptId,
      result,
      ...(usage ? { usage } : {}),
      ...(answer ? { answer } : {}),
      stored,
    });
    if (completed.kind === 'attempt_closed') {
      return attemptFailed('attempt_closed', 'The attempt ended before its result arrived.', chunks());
    }
    if (stream) {
      await deltas?.flushed();
      // The client is shown the usage it was billed for.
      const billed = usage ? { ...usage.billed } : null;
      await relay.forward(stream.clientNodeId, stream.completionId, {
        type: 'end',
        attempt: input.attemptId,
        chunks: chunks(),
        finish_reason: (result.finish_reason as string | null) ?? null,
        usage: billed,
      });
    }
    // Not applied: the task had finished already (an admin, its deadline), and that is its state.
    return { ok: true, chunks: chunks(), status: completed.kind === 'completed' ? 'completed' : completed.status };
  } catch (error) {
    if (error instanceof AttemptFailure) {
      // Stopped while it ran: what it delivered is kept before the workflow hears of it, so that an
      // ending by the task's client bills it (src/db/tasks/finish.ts, failTaskIn).
      if (error.failure.outcome === 'cancelled' && delivered) await keepDelivered(engine, logger, input, delivered);
      if (error.failure.outcome === 'cancelled' && cancelled.aborted) throw cancelled.reason ?? error;
      return { ...error.failure, chunks: chunks() };
    }
    throw error;
  } finally {
    forgetStop();
  }
}

async function keepDelivered(
  engine: NodeActivityDeps['engine'],
  logger: NodeActivityDeps['logger'],
  input: DispatchInput,
  delivered: DeliveredTokens,
): Promise<void> {
  const usage = deliveredUsage(await delivered.counted());
  if (!usage) return;
  // Not kept, it is not billed: the client then pays nothing for it, as before the answer began.
  await engine
    .recordDelivered(input.attemptId, usage)
    .catch((error) =>
      logger.error({ err: error, task_id: input.taskId, attempt_id: input.attemptId }, 'delivered usage not kept'),
    );
}
