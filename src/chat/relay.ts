import type { NotifyBus } from '../db/notify';
import type { Logger } from '../logger';
import { observeChatFirstToken, observeChatRelay } from '../metrics/metrics';

/**
 * The fast path for chat deltas, from the node holding the solver's socket to the node holding the
 * client's HTTP stream. Same node: an in-process event. Other node: PostgreSQL NOTIFY on the client
 * node's channel. Temporal stays the record of the completion and its billing; per-token events never
 * enter workflow history.
 */

/** Every event names the attempt that sent it, so that a fenced attempt's late events can be dropped. */
export type RelayEvent =
  | { type: 'chunk'; attempt: string; seq: number; delta: Record<string, unknown> }
  | {
      type: 'end';
      attempt: string;
      chunks: number;
      finish_reason: string | null;
      usage: Record<string, unknown> | null;
    };

interface Envelope {
  completionId: string;
  event: RelayEvent;
  /** Wall-clock ms when the sending node published it (the relay figure; nodes' clocks are NTP-close). */
  sentAt?: number;
}

// NOTIFY payloads are limited to 8000 bytes; larger content deltas are split into several chunks.
const MAX_NOTIFY_BYTES = 7000;

export const relayChannel = (nodeId: string) => `chat_${nodeId.toLowerCase().replace(/[^a-z0-9_]/g, '_')}`.slice(0, 63);

/** One client stream served by this node. */
interface Listener {
  handler: (event: RelayEvent) => void;
  /** Deltas handed to the client's response so far. */
  delivered: number;
  /** Attempts whose events are no longer accepted. */
  fenced: Set<string>;
  /** When the client's request began to listen: its first delta's arrival is the time to first token. */
  openedAt: number;
}

export class ChatRelay {
  private readonly listeners = new Map<string, Listener>();

  constructor(private readonly deps: { bus: NotifyBus; nodeId: string; logger: Logger }) {}

  async start(): Promise<void> {
    await this.deps.bus.subscribe(relayChannel(this.deps.nodeId), (payload) => {
      const envelope = payload as Envelope;
      if (envelope?.completionId) this.deliver(envelope.completionId, envelope.event, 'notify', envelope.sentAt);
    });
  }

  /** Receives the events of one completion on this node until the returned function is called. */
  listen(completionId: string, handler: (event: RelayEvent) => void): () => void {
    const listener: Listener = { handler, delivered: 0, fenced: new Set(), openedAt: performance.now() };
    this.listeners.set(completionId, listener);
    return () => {
      if (this.listeners.get(completionId) === listener) this.listeners.delete(completionId);
    };
  }

  /**
   * Stops accepting an attempt's events and says how many deltas this completion's client has been
   * given, or null when this node no longer serves the completion (its client is gone). An attempt
   * whose node stopped answering may still be running; after this, nothing it sends reaches the client,
   * so a count of 0 lets another solver start the answer afresh.
   */
  fence(completionId: string, attemptId: string): number | null {
    const listener = this.listeners.get(completionId);
    if (!listener) return null;
    listener.fenced.add(attemptId);
    return listener.delivered;
  }

  /** True when this node serves the completion's client stream. */
  serves(completionId: string): boolean {
    return this.listeners.has(completionId);
  }

  /** True when the completion's client is served by this node: delivery is then a synchronous event. */
  isLocal(targetNodeId: string): boolean {
    return targetNodeId === this.deps.nodeId;
  }

  /** Sends an event to the node serving the completion's client. */
  async forward(targetNodeId: string, completionId: string, event: RelayEvent): Promise<void> {
    if (targetNodeId === this.deps.nodeId) {
      this.deliver(completionId, event, 'local', Date.now());
      return;
    }
    for (const part of splitForNotify(event)) {
      await this.deps.bus.publish(relayChannel(targetNodeId), {
        completionId,
        event: part,
        sentAt: Date.now(),
      } satisfies Envelope);
    }
  }

  private deliver(completionId: string, event: RelayEvent, path: 'local' | 'notify', sentAt: number | undefined): void {
    const listener = this.listeners.get(completionId);
    if (!listener || listener.fenced.has(event.attempt)) return;
    if (event.type === 'chunk') {
      if (listener.delivered === 0) observeChatFirstToken((performance.now() - listener.openedAt) / 1000);
      if (sentAt !== undefined) observeChatRelay(path, Math.max(0, Date.now() - sentAt) / 1000);
      listener.delivered += 1;
    }
    listener.handler(event);
  }
}

function splitForNotify(event: RelayEvent): RelayEvent[] {
  if (event.type !== 'chunk' || Buffer.byteLength(JSON.stringify(event)) <= MAX_NOTIFY_BYTES) return [event];
  const content = typeof event.delta.content === 'string' ? event.delta.content : undefined;
  if (content === undefined) return [event];
  const { content: _content, ...rest } = event.delta;
  const pieces: RelayEvent[] = [];
  const size = Math.floor(MAX_NOTIFY_BYTES / 4);
  for (let offset = 0; offset < content.length; offset += size) {
    pieces.push({
      type: 'chunk',
      attempt: event.attempt,
      seq: event.seq,
      delta: { ...(offset === 0 ? rest : {}), content: content.slice(offset, offset + size) },
    });
  }
  return pieces;
}
