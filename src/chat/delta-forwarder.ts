import type { Logger } from '../logger';
import type { ChatRelay } from './relay';

/**
 * Numbers one attempt's chat deltas and forwards them, in order, to the node serving the client's
 * stream. A failed relay is logged, and the client sees the gap at the end.
 */
export class DeltaForwarder {
  private count = 0;
  private relayed: Promise<void> = Promise.resolve();

  constructor(
    private readonly deps: { relay: ChatRelay; logger: Logger },
    private readonly stream: { clientNodeId: string; completionId: string },
    private readonly attemptId: string,
  ) {}

  /** Deltas forwarded so far. */
  get chunks(): number {
    return this.count;
  }

  readonly onChunk = (delta: Record<string, unknown>): void => {
    const { relay, logger } = this.deps;
    const { clientNodeId, completionId } = this.stream;
    const event = { type: 'chunk' as const, attempt: this.attemptId, seq: this.count++, delta };
    if (relay.isLocal(clientNodeId)) {
      // Same node: handed over synchronously, so the order is the call order.
      relay
        .forward(clientNodeId, completionId, event)
        .catch((error) => logger.warn({ err: error, attempt_id: this.attemptId }, 'chat delta not delivered'));
      return;
    }
    this.relayed = this.relayed
      .then(() => relay.forward(clientNodeId, completionId, event))
      .catch((error) => logger.warn({ err: error, attempt_id: this.attemptId }, 'chat delta not relayed'));
  };

  /** Resolves once every delta forwarded so far has been relayed. */
  flushed(): Promise<void> {
    return this.relayed;
  }
}
