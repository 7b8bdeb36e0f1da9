import { DeltaForwarder } from '../chat/delta-forwarder';
import { chatSink, MessageAssembler } from '../chat/openai-format';
import type { ChatRelay } from '../chat/relay';
import { countedChunks, DeliveredTokens, deliveredUsage } from '../chat/usage';
import type { Handoff } from '../db/matching';
import type { Logger } from '../logger';
import { recordEarlyAttempt } from '../metrics/metrics';
import { CHAT_TASK_TYPE, type BilledUsage, type CapabilityTaskType } from '../schemas/domain';
import type { AttemptStops } from './attempt-stops';
import type { SolverHub } from './hub';

/** When an attempt went out early: with its task's creation, or as a freed slot was handed to it. */
export type EarlyOccasion = 'created' | 'handed';

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
  /** Chat: where the deltas go (the node serving the client's stream). */
  stream?: { clientNodeId: string; completionId: string };
  /** Aborted when the client's request ends: an attempt no activity has taken over is then cancelled. */
  clientGone?: AbortSignal;
  occasion: EarlyOccasion;
}

/** A running attempt, as its dispatch activity takes it over. */
export interface EarlyAttempt {
  /** The solver's validated result; rejects with an AttemptFailure. */
  result: Promise<Record<string, unknown>>;
  /** Chat: the deltas relayed so far, and the relay for the rest. */
  deltas?: DeltaForwarder;
  /**
   * Chat: its deltas assembled so far, and the rest as they come; the activity stores the assembled
   * message with the result when there is no client to stream to (a chat audit, docs/trust.md), or
   * hands it on as the client's answer (kept if the chat is sampled for verification).
   */
  assembled?: MessageAssembler;
  /** Chat: the tokens of its prompt and of the deltas it delivered, which bound its billed usage. */
  delivered?: DeliveredTokens;
}

interface Entry extends EarlyAttempt {
  taskId: string;
  controller: AbortController;
  occasion: EarlyOccasion;
  forget(): void;
}

export interface EarlyAttemptsDeps {
  hub: SolverHub;
  relay: ChatRelay;
  logger: Logger;
  nodeId: string;
  stops: AttemptStops;
  acceptTimeoutMs: number;
  /** A web task's attempt deadline (a chat's is its completion's). */
  attemptTimeoutMs: number;
  /** Keeps what a chat attempt abandoned here had delivered (TaskEngine.recordDelivered). */
  keepDelivered?(attemptId: string, usage: BilledUsage): Promise<void>;
}

/**
 * Attempts sent to a solver on this node before their workflow asks for them: a chat completion's first
 * attempt as the completion is created, while its workflow starts, and a waiting task's attempt as this
 * node hands it a freed slot, while its workflow is told. The task then waits for neither the workflow's
 * next task nor the activity's hand-off. The attempt is the workflow's all the same: it was matched and
 * its points held in a committed statement, and the workflow's dispatch activity, on this node, takes
 * the running attempt over (heartbeat, cancellation, result, settlement) instead of sending the task
 * again. Until then the attempt is cancelled if its client's request ends, its task is stopped (a
 * cancel, an admin's completion, a chat client gone), its workflow turns out to be gone or gives it up,
 * or its deadline passes.
 */
export class EarlyAttempts {
  private readonly entries = new Map<string, Entry>();
  /** By task: what abandoned chat attempts had delivered, being kept. */
  private readonly keeping = new Map<string, Promise<void>>();

  constructor(private readonly deps: EarlyAttemptsDeps) {}

  /** Sends the task now if the solver's socket is here; false otherwise (the activity will dispatch it). */
  start(request: EarlyAttemptRequest): boolean {
    const { hub, stops } = this.deps;
    if (request.nodeId !== this.deps.nodeId || !hub.canDispatch(request.solverId) || request.clientGone?.aborted)
      return false;
    // Never twice: an attempt already running here is its activity's, or taken over already.
    if (this.entries.has(request.attemptId) || hub.isRunning(request.solverId, request.attemptId)) return false;
    const deltas = request.stream ? new DeltaForwarder(this.deps, request.stream, request.attemptId) : undefined;
    const assembled = request.taskType === CHAT_TASK_TYPE ? new MessageAssembler() : undefined;
    const delivered = request.taskType === CHAT_TASK_TYPE ? new DeliveredTokens(request.payload) : undefined;
    const controller = new AbortController();
    const result = hub.runAttempt({
      solverId: request.solverId,
      attemptId: request.attemptId,
      taskId: request.taskId,
      taskType: request.taskType,
      payload: request.payload,
      deadline: request.deadline,
      acceptTimeoutMs: request.acceptTimeoutMs,
      signal: controller.signal,
      onChunk: countedChunks(delivered, chatSink(deltas, assembled)),
    });
    // Its failure is the adopting activity's to report; until then it must not count as unhandled.
    result.catch(() => undefined);
    const abandon = () => this.abandon(request.attemptId);
    request.clientGone?.addEventListener('abort', abandon, { once: true });
    const forgetStop = stops.onStop(request.taskId, abandon);
    // Not taken over by its deadline: no workflow is coming for it (the solver's attempt ended then too).
    const expiry = setTimeout(abandon, Math.max(0, request.deadline.getTime() - Date.now()));
    expiry.unref();
    this.entries.set(request.attemptId, {
      taskId: request.taskId,
      result,
      deltas,
      assembled,
      delivered,
      controller,
      occasion: request.occasion,
      forget: () => {
        request.clientGone?.removeEventListener('abort', abandon);
        forgetStop();
        clearTimeout(expiry);
      },
    });
    return true;
  }

  /**
   * Sends the task of a slot this process just handed on, before its workflow is told; false when it
   * does not go from here (the solver's socket is elsewhere, the handoff came back from the outbox, or a
   * chat's client is served by another node, which only the workflow knows), and the activity sends it.
   */
  startHanded(handoff: Handoff): boolean {
    const task = handoff.task;
    if (!task) return false;
    // A client's chat streams to its client; a chat audit (a canary) has none: its deltas are assembled here.
    const chat = task.taskType === CHAT_TASK_TYPE && task.canaryFor === undefined;
    // A completion's id is its workflow's; its client's stream is known here only if this node serves it.
    if (chat && !this.deps.relay.serves(handoff.workflowId)) return false;
    // As the workflow bounds it: a chat attempt (a client's or an audit) by the task's deadline, a web attempt
    // or a page canary by ATTEMPT_TIMEOUT_SECONDS too.
    const deadlineMs =
      task.taskType === CHAT_TASK_TYPE
        ? task.deadlineMs
        : Math.min(task.deadlineMs, Date.now() + this.deps.attemptTimeoutMs);
    return this.start({
      ...handoff.assignment,
      taskId: handoff.taskId,
      taskType: task.taskType as CapabilityTaskType,
      payload: task.payload,
      deadline: new Date(deadlineMs),
      acceptTimeoutMs: this.deps.acceptTimeoutMs,
      ...(chat ? { stream: { clientNodeId: this.deps.nodeId, completionId: handoff.workflowId } } : {}),
      occasion: 'handed',
    });
  }

  /**
   * Hands the attempt to its dispatch activity, whose cancellation now cancels it; undefined when it was
   * abandoned meanwhile, or was never started on this node (e.g. before a restart).
   */
  adopt(attemptId: string, cancelled: AbortSignal): EarlyAttempt | undefined {
    const entry = this.take(attemptId);
    if (!entry) return undefined;
    recordEarlyAttempt(entry.occasion, 'taken_over');
    if (cancelled.aborted) entry.controller.abort();
    else cancelled.addEventListener('abort', () => entry.controller.abort(), { once: true });
    return { result: entry.result, deltas: entry.deltas, assembled: entry.assembled, delivered: entry.delivered };
  }

  /**
   * Cancels an attempt no activity has taken over: its client went away, or its workflow gave it up or is
   * gone. What a chat attempt had delivered is kept, which an ending by its client bills (`delivered`).
   */
  abandon(attemptId: string): void {
    const entry = this.take(attemptId);
    if (!entry) return;
    recordEarlyAttempt(entry.occasion, 'abandoned');
    entry.controller.abort();
    if (entry.delivered && this.deps.keepDelivered) this.keep(entry.taskId, attemptId, entry.delivered);
  }

  /**
   * Resolves once what the task's attempts abandoned here had delivered is kept: its client's going away
   * ends the task after that (TaskEngine.clientGone), so the ending finds it.
   */
  async delivered(taskId: string): Promise<void> {
    await this.keeping.get(taskId);
  }

  private keep(taskId: string, attemptId: string, delivered: DeliveredTokens): void {
    const kept = (async () => {
      const usage = deliveredUsage(await delivered.counted());
      if (usage) await this.deps.keepDelivered!(attemptId, usage);
    })().catch((error) =>
      this.deps.logger.error({ err: error, task_id: taskId, attempt_id: attemptId }, 'delivered usage not kept'),
    );
    this.keeping.set(taskId, kept);
    void kept.finally(() => {
      if (this.keeping.get(taskId) === kept) this.keeping.delete(taskId);
    });
  }

  /** Attempts started here and not yet taken over or abandoned. */
  get size(): number {
    return this.entries.size;
  }

  private take(attemptId: string): Entry | undefined {
    const entry = this.entries.get(attemptId);
    if (!entry) return undefined;
    this.entries.delete(attemptId);
    entry.forget();
    return entry;
  }
}
