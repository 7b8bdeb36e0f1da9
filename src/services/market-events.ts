import type { NotifyBus } from '../db/notify';
import type { Db } from '../db/pool';
import { queueStatus } from '../db/status';
import { TASK_FINISHED_CHANNEL } from '../db/tasks/finish';
import type { Logger } from '../logger';

/**
 * The live feed of GET /v1/admin/events: a snapshot of the queues every STATUS_INTERVAL_MS (the chart's
 * points) and at once after a task ends (the announcement every ending makes), and each ending itself.
 * It samples only while a console listens, so an idle node runs no query for it; what it sampled in the
 * last hour is kept and sent to a new listener first.
 */

export type QueueSnapshot = Awaited<ReturnType<typeof queueStatus>>;
export interface StatusSample {
  at: string;
  queues: QueueSnapshot;
}
export type MarketEvent =
  | { event: 'history'; data: { samples: StatusSample[] } }
  | { event: 'status'; data: StatusSample }
  | { event: 'task_finished'; data: { task_id: string; status: string } };

/** The chart's resolution: 720 points make an hour, a few hundred bytes each. */
export const STATUS_INTERVAL_MS = 5000;
/** How far back the chart reaches. */
const HISTORY_MS = 60 * 60 * 1000;
/** Endings in a burst share one snapshot: at most one per this interval beyond the regular ones. */
const ENDING_SNAPSHOT_DELAY_MS = 500;

type Listener = (event: MarketEvent) => void;

export class MarketEvents {
  private readonly listeners = new Map<Listener, () => void>();
  private readonly samples: StatusSample[] = [];
  private timer: NodeJS.Timeout | undefined;
  private pendingSnapshot: NodeJS.Timeout | undefined;
  private unlisten: Promise<() => Promise<void>> | undefined;
  private closed = false;

  constructor(private readonly deps: { db: Db; bus: NotifyBus; logger: Logger }) {}

  /** Adds a listener, which gets the last hour's samples first; `end` closes its stream. Returns its removal. */
  listen(listener: Listener, end: () => void): () => void {
    if (this.closed) {
      end();
      return () => undefined;
    }
    this.listeners.set(listener, end);
    listener({ event: 'history', data: { samples: this.history() } });
    if (this.listeners.size === 1) this.start();
    return () => {
      this.listeners.delete(listener);
      if (this.listeners.size === 0) this.stop();
    };
  }

  /** Ends every stream (the node is shutting down): a console reconnects to another node. */
  close(): void {
    this.closed = true;
    const ends = [...this.listeners.values()];
    this.listeners.clear();
    for (const end of ends) end();
    this.stop();
  }

  get listening(): number {
    return this.listeners.size;
  }

  private start(): void {
    this.sample();
    this.timer = setInterval(() => this.sample(), STATUS_INTERVAL_MS);
    this.unlisten = this.deps.bus.subscribe(TASK_FINISHED_CHANNEL, (payload) => {
      const { task_id: taskId, status } = payload as { task_id: string; status: string };
      this.emit({ event: 'task_finished', data: { task_id: taskId, status } });
      this.pendingSnapshot ??= setTimeout(() => {
        this.pendingSnapshot = undefined;
        this.sample();
      }, ENDING_SNAPSHOT_DELAY_MS);
    });
  }

  private stop(): void {
    clearInterval(this.timer);
    clearTimeout(this.pendingSnapshot);
    this.timer = this.pendingSnapshot = undefined;
    const unlisten = this.unlisten;
    this.unlisten = undefined;
    void unlisten?.then((stop) => stop()).catch(() => undefined);
  }

  private sample(): void {
    queueStatus(this.deps.db)
      .then((queues) => {
        if (this.listeners.size === 0) return;
        const sample = { at: new Date().toISOString(), queues };
        this.samples.push(sample);
        this.history();
        this.emit({ event: 'status', data: sample });
      })
      .catch((error) => this.deps.logger.warn({ err: error }, 'queue snapshot for the console failed'));
  }

  /** The samples of the last hour, oldest first. */
  history(): StatusSample[] {
    const since = new Date(Date.now() - HISTORY_MS).toISOString();
    while (this.samples.length && this.samples[0].at < since) this.samples.shift();
    return [...this.samples];
  }

  private emit(event: MarketEvent): void {
    for (const listener of this.listeners.keys()) listener(event);
  }
}
