import { EventEmitter } from 'node:events';
import type { NotifyBus } from '../db/notify';
import type { Logger } from '../logger';

/**
 * The fast path for chat deltas, from the node holding the solver's socket to the node holding the
 * client's HTTP stream. Same node: an in-process event. Other node: PostgreSQL NOTIFY on the client
 * node's channel. Temporal stays the record of the completion and its billing; per-token events never
 * enter workflow history.
 */

export type RelayEvent =
  | { type: 'chunk'; seq: number; delta: Record<string, unknown> }
  | { type: 'end'; chunks: number; finish_reason: string | null; usage: Record<string, unknown> | null }
  | { type: 'reset'; reason: string };

interface Envelope {
  completionId: string;
  event: RelayEvent;
}

// NOTIFY payloads are limited to 8000 bytes; larger content deltas are split into several chunks.
const MAX_NOTIFY_BYTES = 7000;

export const relayChannel = (nodeId: string) => `chat_${nodeId.toLowerCase().replace(/[^a-z0-9_]/g, '_')}`.slice(0, 63);

export class ChatRelay {
  private readonly local = new EventEmitter();

  constructor(
    private readonly deps: { bus: NotifyBus; nodeId: string; logger: Logger },
  ) {
    this.local.setMaxListeners(0);
  }

  async start(): Promise<void> {
    await this.deps.bus.subscribe(relayChannel(this.deps.nodeId), (payload) => {
      const envelope = payload as Envelope;
      if (envelope?.completionId) this.local.emit(envelope.completionId, envelope.event);
    });
  }

  /** Receives the events of one completion on this node until the returned function is called. */
  listen(completionId: string, handler: (event: RelayEvent) => void): () => void {
    this.local.on(completionId, handler);
    return () => this.local.off(completionId, handler);
  }

  /** True when the completion's client is served by this node: delivery is then a synchronous event. */
  isLocal(targetNodeId: string): boolean {
    return targetNodeId === this.deps.nodeId;
  }

  /** Sends an event to the node serving the completion's client. */
  async forward(targetNodeId: string, completionId: string, event: RelayEvent): Promise<void> {
    if (targetNodeId === this.deps.nodeId) {
      this.local.emit(completionId, event);
      return;
    }
    for (const part of splitForNotify(event)) {
      await this.deps.bus.publish(relayChannel(targetNodeId), { completionId, event: part } satisfies Envelope);
    }
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
    pieces.push({ type: 'chunk', seq: event.seq, delta: { ...(offset === 0 ? rest : {}), content: content.slice(offset, offset + size) } });
  }
  return pieces;
}
