import type { Db } from '../db/pool';
import { pingDatabase } from '../db/status';
import type { Logger } from '../logger';

/**
 * Whether this process can serve (GET /ready): each part it depends on is asked, each within
 * READINESS_TIMEOUT_MS, so a paused PostgreSQL or Temporal makes the answer 503 in seconds rather than
 * a probe that hangs. The answer names each part's state in a word (it is served without
 * authentication: the error itself is logged, once per change of state, not sent).
 */

/** How long one part may take to answer: well inside a load balancer's or compose's probe timeout (5 s). */
export const READINESS_TIMEOUT_MS = 2000;

/** One part's check: resolves with its state word when it can serve (`ok`, `polling`), rejects otherwise. */
export type ReadinessCheck = () => Promise<string>;

export type ReadinessStatus = 'ready' | 'not_ready' | 'draining';

export interface ReadinessReport {
  ready: boolean;
  /**
   * `status`, then each part's state: its word when it serves, `timed_out` or `failed` (a worker: its run state)
   * otherwise.
   */
  body: Record<string, string>;
}

class NotServing extends Error {
  constructor(
    readonly state: string,
    message: string,
  ) {
    super(message);
  }
}

export class Readiness {
  /**
   * A check still running is joined by the next probe, not started again: a hung database holds one connection,
   * not one per probe.
   */
  private readonly inFlight = new Map<string, Promise<string>>();
  private readonly lastState = new Map<string, string>();
  private draining = false;

  constructor(
    private readonly checks: Record<string, ReadinessCheck>,
    private readonly options: { logger: Logger; timeoutMs?: number; extra?: Record<string, string> },
  ) {}

  /** From now on the node answers 503 `draining`: it is stopping and takes no new work. */
  drain(): void {
    this.draining = true;
  }

  async report(): Promise<ReadinessReport> {
    const parts = await Promise.all(
      Object.entries(this.checks).map(async ([name, check]) => [name, await this.state(name, check)] as const),
    );
    const failing = parts.filter(([, outcome]) => !outcome.ok);
    const status: ReadinessStatus = this.draining ? 'draining' : failing.length > 0 ? 'not_ready' : 'ready';
    const body: Record<string, string> = {
      status,
      ...Object.fromEntries(parts.map(([name, outcome]) => [name, outcome.state])),
      ...this.options.extra,
    };
    return { ready: status === 'ready', body };
  }

  private async state(name: string, check: ReadinessCheck): Promise<{ ok: boolean; state: string }> {
    const timeoutMs = this.options.timeoutMs ?? READINESS_TIMEOUT_MS;
    let running = this.inFlight.get(name);
    if (!running) {
      const started = Promise.resolve().then(check);
      running = started;
      this.inFlight.set(name, started);
      started.then(
        () => this.inFlight.delete(name),
        () => this.inFlight.delete(name),
      );
    }
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => reject(new NotServing('timed_out', `no answer within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      const state = await Promise.race([running, timedOut]);
      this.changed(name, state);
      return { ok: true, state };
    } catch (error) {
      const state = error instanceof NotServing ? error.state : 'failed';
      this.changed(name, state, error as Error);
      return { ok: false, state };
    } finally {
      clearTimeout(timer);
    }
  }

  /** Logs a part's state when it changes (probes come every few seconds; the log says each change once). */
  private changed(name: string, state: string, error?: Error): void {
    const before = this.lastState.get(name);
    this.lastState.set(name, state);
    if (before === state) return;
    if (error) this.options.logger.warn({ part: name, state, err: error }, `not ready: ${name} ${state}`);
    else if (before !== undefined) this.options.logger.info({ part: name, state }, `ready again: ${name} ${state}`);
  }
}

/** PostgreSQL answers a statement. */
export const postgresCheck =
  (db: Db): ReadinessCheck =>
  () =>
    pingDatabase(db).then(() => 'ok');

/**
 * The Temporal frontend answers, asked through `connection` (a client's or a worker's). The call's own
 * deadline comes just after the probe's timeout: the probe says `timed_out`, and the call does not linger.
 */
export const temporalCheck =
  (
    connection: {
      withDeadline<T>(deadline: number, fn: () => Promise<T>): Promise<T>;
      workflowService: { getSystemInfo(request: object): Promise<unknown> };
    },
    timeoutMs = READINESS_TIMEOUT_MS,
  ): ReadinessCheck =>
  () =>
    connection
      .withDeadline(Date.now() + timeoutMs + 500, () => connection.workflowService.getSystemInfo({}))
      .then(() => 'ok');

/** A Temporal worker runs and none of its pollers has failed (it polls its task queue). */
export const workerCheck =
  (worker: {
    getStatus(): { runState: string; workflowPollerState: string; activityPollerState: string };
  }): ReadinessCheck =>
  async () => {
    const status = worker.getStatus();
    if (status.runState !== 'RUNNING')
      throw new NotServing(status.runState.toLowerCase(), `the Temporal worker is ${status.runState.toLowerCase()}`);
    if (status.workflowPollerState === 'FAILED' || status.activityPollerState === 'FAILED')
      throw new NotServing('failed', 'a poller of the Temporal worker failed');
    return 'polling';
  };

/** Several workers as one part: each must poll. */
export const workersCheck =
  (checks: ReadinessCheck[]): ReadinessCheck =>
  async () => {
    for (const check of checks) await check();
    return 'polling';
  };
