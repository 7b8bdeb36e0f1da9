import { DeltaForwarder } from '../chat/delta-forwarder';
import type { ChatRelay } from '../chat/relay';
import type { Logger } from '../logger';
import type { CapabilityTaskType } from '../schemas/domain';
import type { SolverHub } from './hub';

export interface EarlyAttemptRequest {
  attemptId: string;
  solverId: string;
  /** The node whose task queue the workflow's dispatch activity goes to. */
  nodeId: string;
  taskId: string;
  taskType: CapabilityTaskType;
  payload: Record<string, unknown>;
  deadline: Date;
  acceptTimeoutMs: number;
  stream: { clientNodeId: string; completionId: string };
  /** Aborted when the client's request ends: an attempt no activity has taken over is then cancelled. */
  clientGone: AbortSignal;
}

/** A running attempt, as its dispatch activity takes it over. */
export interface EarlyAttempt {
  /** The solver's validated result; rejects with an AttemptFailure. */
  result: Promise<Record<string, unknown>>;
  deltas: DeltaForwarder;
}

interface Entry extends EarlyAttempt {
  controller: AbortController;
  forgetClient(): void;
}

/**
 * First attempts of chat completions sent to a solver on this node as the completion is created, while
 * its workflow starts: the first token then waits for neither the workflow's first task nor the
 * activity's hand-off. The attempt is the workflow's all the same: it was matched and its points held in
 * the creating statement, and the workflow's dispatch activity, on this node, takes the running attempt
 * over (heartbeat, cancellation, result, settlement) instead of sending the task again. Until then the
 * client's request bounds it: if the request ends, or the workflow gives the attempt up, it is cancelled.
 */
export class EarlyAttempts {
  private readonly entries = new Map<string, Entry>();

  constructor(private readonly deps: { hub: SolverHub; relay: ChatRelay; logger: Logger; nodeId: string }) {}

  /** Sends the task now if the solver's socket is here; false otherwise (the activity will dispatch it). */
  start(request: EarlyAttemptRequest): boolean {
    if (request.nodeId !== this.deps.nodeId || !this.deps.hub.canDispatch(request.solverId) || request.clientGone.aborted) return false;
    const deltas = new DeltaForwarder(this.deps, request.stream, request.attemptId);
    const controller = new AbortController();
    const result = this.deps.hub.runAttempt({
      solverId: request.solverId,
      attemptId: request.attemptId,
      taskId: request.taskId,
      taskType: request.taskType,
      payload: request.payload,
      deadline: request.deadline,
      acceptTimeoutMs: request.acceptTimeoutMs,
      signal: controller.signal,
      onChunk: deltas.onChunk,
    });
    // Its failure is the adopting activity's to report; until then it must not count as unhandled.
    result.catch(() => undefined);
    const onClientGone = () => this.abandon(request.attemptId);
    request.clientGone.addEventListener('abort', onClientGone, { once: true });
    this.entries.set(request.attemptId, {
      result,
      deltas,
      controller,
      forgetClient: () => request.clientGone.removeEventListener('abort', onClientGone),
    });
    return true;
  }

  /**
   * Hands the attempt to its dispatch activity, whose cancellation now cancels it; undefined when it was
   * abandoned meanwhile, or was never started on this node (e.g. before a restart).
   */
  adopt(attemptId: string, cancelled: AbortSignal): EarlyAttempt | undefined {
    const entry = this.take(attemptId);
    if (!entry) return undefined;
    if (cancelled.aborted) entry.controller.abort();
    else cancelled.addEventListener('abort', () => entry.controller.abort(), { once: true });
    return { result: entry.result, deltas: entry.deltas };
  }

  /** Cancels an attempt no activity has taken over: its client went away, or its workflow gave it up. */
  abandon(attemptId: string): void {
    this.take(attemptId)?.controller.abort();
  }

  /** Attempts started here and not yet taken over or abandoned. */
  get size(): number {
    return this.entries.size;
  }

  private take(attemptId: string): Entry | undefined {
    const entry = this.entries.get(attemptId);
    if (!entry) return undefined;
    this.entries.delete(attemptId);
    entry.forgetClient();
    return entry;
  }
}
