import pg from 'pg';
import type { Logger } from '../logger';
import { Batches } from './batches';
import { PRESENCE_LOCK, presenceKey } from './node-presence';

/**
 * PostgreSQL LISTEN/NOTIFY between API nodes: one dedicated connection per node (the slonik pool
 * hands connections out per query, which LISTEN cannot use), reconnected with back-off when it drops.
 * Channels are plain identifiers; payloads are JSON (NOTIFY limits them to 8000 bytes).
 */

type Handler = (payload: unknown) => void;

const CHANNEL = /^[a-z_][a-z0-9_]{0,62}$/;
const NOTIFY_MAX_BYTES = 8000;

export class NotifyBus {
  private client: pg.Client | undefined;
  private connecting: pg.Client | undefined;
  private readonly handlers = new Map<string, Set<Handler>>();
  private readonly reconnectHandlers = new Set<() => void>();
  private closed = false;
  private reconnectDelayMs = 250;
  private ready: Promise<void> = Promise.resolve();
  // One query at a time on the connection: pg deprecates a query sent while another runs on a client.
  private queue: Promise<unknown> = Promise.resolve();
  // Notifications published while one is being sent go out together, in their order, in one statement.
  private readonly outgoing = new Batches<{ channel: string; payload: string }, void>(async (notes) => {
    await this.serial((client) =>
      client.query('SELECT pg_notify(c, p) FROM unnest($1::text[], $2::text[]) AS n(c, p)', [
        notes.map((note) => note.channel),
        notes.map((note) => note.payload),
      ]),
    );
    return notes.map(() => undefined);
  });

  constructor(
    private readonly databaseUrl: string,
    private readonly logger: Logger,
    /**
     * An API node's id: the connection takes the node's presence (src/db/node-presence.ts) as it connects,
     * each time, waiting for it; a bus that does so carries nothing else.
     */
    private readonly presenceOf?: string,
  ) {}

  async start(): Promise<void> {
    this.ready = this.connect();
    await this.ready;
  }

  /** Subscribes to a channel; resolves once LISTEN is in effect on the current connection. */
  async subscribe(channel: string, handler: Handler): Promise<() => Promise<void>> {
    if (!CHANNEL.test(channel)) throw new Error(`invalid channel name "${channel}"`);
    let set = this.handlers.get(channel);
    if (!set) {
      set = new Set();
      this.handlers.set(channel, set);
      await this.ready;
      await this.serial((client) => client.query(`LISTEN ${channel}`));
    }
    set.add(handler);
    return async () => {
      const current = this.handlers.get(channel);
      current?.delete(handler);
      if (current && current.size === 0) {
        this.handlers.delete(channel);
        await this.serial((client) => client.query(`UNLISTEN ${channel}`)).catch(() => undefined);
      }
    };
  }

  /**
   * Calls `handler` each time the connection is back after a drop: notifications sent while it was down
   * are lost, so a subscriber whose state must not miss one checks it again then.
   */
  onReconnect(handler: () => void): void {
    this.reconnectHandlers.add(handler);
  }

  async publish(channel: string, payload: unknown): Promise<void> {
    if (!CHANNEL.test(channel)) throw new Error(`invalid channel name "${channel}"`);
    await this.ready;
    if (!this.client) throw new Error('notification connection is down');
    const text = JSON.stringify(payload);
    // One PostgreSQL refuses (too long) fails alone rather than with the others of its batch.
    if (Buffer.byteLength(text) >= NOTIFY_MAX_BYTES)
      await this.serial((client) => client.query('SELECT pg_notify($1, $2)', [channel, text]));
    else await this.outgoing.add({ channel, payload: text });
  }

  /** Runs a query on the connection after those sent before it; none when the connection is down. */
  private serial(query: (client: pg.Client) => Promise<unknown>): Promise<unknown> {
    const run = this.queue.then(() => (this.client ? query(this.client) : undefined));
    this.queue = run.catch(() => undefined);
    return run;
  }

  async close(): Promise<void> {
    this.closed = true;
    // Also one still connecting: a presence may be waiting for its lock.
    await Promise.all([this.client, this.connecting].map((client) => client?.end().catch(() => undefined)));
    this.client = undefined;
  }

  private async connect(): Promise<void> {
    const client = new pg.Client({ connectionString: this.databaseUrl });
    this.connecting = client;
    client.on('notification', (message) => {
      const handlers = this.handlers.get(message.channel);
      if (!handlers) return;
      let payload: unknown;
      try {
        payload = message.payload ? JSON.parse(message.payload) : undefined;
      } catch {
        return;
      }
      for (const handler of handlers) handler(payload);
    });
    client.on('error', (error) => this.logger.warn({ err: error }, 'notification connection error'));
    client.on('end', () => {
      if (this.closed || this.client !== client) return;
      this.client = undefined;
      const delay = this.reconnectDelayMs;
      this.reconnectDelayMs = Math.min(delay * 2, 5000);
      setTimeout(() => {
        this.ready = this.connect()
          .then(() => {
            for (const handler of this.reconnectHandlers) handler();
          })
          .catch((error) => this.logger.error({ err: error }, 'notification reconnect failed'));
      }, delay).unref();
    });
    await client.connect();
    if (this.presenceOf !== undefined) await client.query(PRESENCE_LOCK, [presenceKey(this.presenceOf)]);
    for (const channel of this.handlers.keys()) await client.query(`LISTEN ${channel}`);
    this.client = client;
    this.reconnectDelayMs = 250;
  }
}
