import WebSocket from 'ws';
import { createLogger, type Logger } from '../logger';
import type { CapabilityTaskType } from '../schemas/domain';
import {
  CancelFrame,
  ProtocolErrorFrame,
  RESULT_SCHEMAS,
  ResultRejectedFrame,
  TaskFrame,
  WelcomeFrame,
  type SolverMessage,
  type TaskMessage,
  type WelcomeMessage,
} from '../schemas/frames';
import { sleep } from './abort';
import { reconnectDelay } from './backoff';
import { buildCapabilities, concurrencyOf, registerCapabilities, RegistrationError } from './capabilities';
import type { SolverConfig } from './config';
import { SolverError, abortReason, toSolverError, type SolverErrorType } from './errors';
import { createHandlers, offeredTaskTypes, type HandlerSet, type SolverHandlers } from './handlers';

/**
 * The solver agent: registers its capabilities, keeps one WebSocket to the marketplace (protocol v1,
 * docs/solver-protocol.md), runs the tasks it is sent and answers each with a result or an error.
 */

export type SolverAgentOptions = {
  logger?: Logger;
  /** Replaces or adds handlers (embedding, tests); each offered task type must end up with one. */
  handlers?: SolverHandlers;
};

export type SolverAgentStatus = {
  connected: boolean;
  solverId: string | null;
  inFlight: number;
  stopping: boolean;
};

export type SolverAgent = {
  /**
   * Resolves with the first `welcome`; rejects when the marketplace refuses the key or capabilities, or on
   * stop() before that.
   */
  connected: Promise<WelcomeMessage>;
  /** The task types advertised to the marketplace. */
  taskTypes: CapabilityTaskType[];
  status(): SolverAgentStatus;
  /** Graceful shutdown: refuse new tasks, let running ones finish within the grace period, then close. */
  stop(options?: { graceMs?: number }): Promise<void>;
};

/** A welcome that does not come this long after the upgrade means the server is not speaking protocol v1. */
const WELCOME_TIMEOUT_MS = 10_000;
const HANDSHAKE_TIMEOUT_MS = 10_000;
/** Server pings this many intervals apart count as a dead connection. */
const MISSED_HEARTBEATS = 3;
/** Date headers have a one-second resolution: smaller differences are not skew. */
const CLOCK_SKEW_FLOOR_MS = 2_000;
const SOCKET_CLOSE_WAIT_MS = 2_000;

type Attempt = {
  id: string;
  taskType: CapabilityTaskType;
  controller: AbortController;
  /** Set once a terminal frame was sent, or once nothing more may be sent (cancelled, disconnected). */
  finished: boolean;
  settled: Promise<void>;
};

export async function startSolverAgent(config: SolverConfig, options: SolverAgentOptions = {}): Promise<SolverAgent> {
  const logger = options.logger ?? createLogger(config.logLevel, 'solver');
  const taskTypes = offeredTaskTypes(config, logger);
  const toBuild = taskTypes.filter((type) => !options.handlers?.[type]);
  const handlerSet = createHandlers(config, toBuild, logger);
  const handlers: SolverHandlers = { ...handlerSet.handlers, ...options.handlers };
  const unserved = taskTypes.filter((type) => !handlers[type]);
  if (unserved.length > 0) throw new Error(`no handler for ${unserved.join(', ')}`);
  if (taskTypes.length === 0) throw new Error('this solver has nothing to offer: no task type is configured');

  const runtime = new AgentRuntime(config, logger, handlers, handlerSet, taskTypes);
  runtime.start();
  return {
    connected: runtime.connected,
    taskTypes,
    status: () => runtime.status(),
    stop: (stopOptions) => runtime.stop(stopOptions?.graceMs ?? config.shutdownGraceMs),
  };
}

class AgentRuntime {
  readonly connected: Promise<WelcomeMessage>;
  private resolveConnected!: (welcome: WelcomeMessage) => void;
  private rejectConnected!: (error: Error) => void;
  private everConnected = false;

  private socket: WebSocket | null = null;
  private welcome: WelcomeMessage | null = null;
  private watchdog: NodeJS.Timeout | undefined;
  private clockSkewMs = 0;
  private readonly attempts = new Map<string, Attempt>();
  /** Fires when stop() begins: no more registration or reconnection (the open socket stays up for the grace period). */
  private readonly halt = new AbortController();
  private loop: Promise<void> = Promise.resolve();
  private stopping: Promise<void> | null = null;

  constructor(
    private readonly config: SolverConfig,
    private readonly logger: Logger,
    private readonly handlers: SolverHandlers,
    private readonly handlerSet: HandlerSet,
    private readonly taskTypes: CapabilityTaskType[],
  ) {
    this.connected = new Promise((resolve, reject) => {
      this.resolveConnected = resolve;
      this.rejectConnected = reject;
    });
    // Callers that never await `connected` must not see an unhandled rejection when it fails.
    this.connected.catch(() => undefined);
  }

  start(): void {
    void this.handlerSet.warm();
    this.loop = this.run().catch((error) => this.logger.error({ err: String(error) }, 'solver agent loop failed'));
  }

  status(): SolverAgentStatus {
    return {
      connected: this.socket?.readyState === WebSocket.OPEN && this.welcome !== null,
      solverId: this.welcome?.solver_id ?? null,
      inFlight: this.attempts.size,
      stopping: this.stopping !== null,
    };
  }

  private get wsUrl(): string {
    return `${this.config.url.replace(/^http/i, 'ws')}/v1/solver/connect`;
  }

  private async run(): Promise<void> {
    const capabilities = buildCapabilities(this.config, this.taskTypes);
    let failures = 0;
    while (!this.halt.signal.aborted) {
      let welcomed = false;
      try {
        const registration = await registerCapabilities(
          this.config.url,
          this.config.apiKey,
          capabilities,
          this.halt.signal,
        );
        this.clockSkewMs = Math.abs(registration.clockSkewMs) >= CLOCK_SKEW_FLOOR_MS ? registration.clockSkewMs : 0;
        welcomed = await this.session();
      } catch (error) {
        if (this.halt.signal.aborted) break;
        if (error instanceof RegistrationError && error.refused && !this.everConnected) {
          this.logger.error({ status: error.status }, error.message);
          this.rejectConnected(error);
          void this.stop(0);
          break;
        }
        this.logger.warn({ err: (error as Error).message }, 'could not reach the marketplace');
      }
      if (this.halt.signal.aborted) break;
      failures = welcomed ? 0 : failures + 1;
      const delay = reconnectDelay(failures, this.config.reconnectBaseMs, this.config.reconnectMaxMs);
      this.logger.info({ delayMs: delay }, 'reconnecting');
      await sleep(delay, this.halt.signal).catch(() => undefined);
    }
  }

  /** One WebSocket connection, from upgrade to close. Resolves with whether a welcome was received. */
  private session(): Promise<boolean> {
    return new Promise((resolve) => {
      let welcomed = false;
      const socket = new WebSocket(this.wsUrl, {
        headers: { authorization: `Bearer ${this.config.apiKey}` },
        handshakeTimeout: HANDSHAKE_TIMEOUT_MS,
      });
      this.socket = socket;
      const welcomeTimer = setTimeout(() => {
        this.logger.warn('no welcome frame from the marketplace; reconnecting');
        socket.terminate();
      }, WELCOME_TIMEOUT_MS);

      socket.on('message', (data, isBinary) => {
        this.armWatchdog(socket);
        if (isBinary) return this.logger.warn('ignoring a binary frame');
        const frame = this.parse(data.toString());
        if (frame === undefined) return;
        if (frame.type === 'welcome') {
          const welcome = WelcomeFrame.safeParse(frame);
          if (!welcome.success) {
            this.logger.error({ frame }, 'malformed welcome frame; reconnecting');
            return socket.terminate();
          }
          clearTimeout(welcomeTimer);
          welcomed = true;
          this.onWelcome(socket, welcome.data);
          return;
        }
        if (!welcomed) return this.logger.warn({ type: frame.type }, 'frame before welcome ignored');
        this.onFrame(frame);
      });
      socket.on('ping', () => this.armWatchdog(socket));
      socket.on('error', (error) => this.logger.warn({ err: error.message }, 'marketplace connection error'));
      socket.on('close', (code, reason) => {
        clearTimeout(welcomeTimer);
        clearTimeout(this.watchdog);
        if (this.socket === socket) this.socket = null;
        this.welcome = null;
        // Our own stop() closing the socket is expected; anything else is worth a warning.
        if (welcomed)
          this.logger[this.halt.signal.aborted ? 'info' : 'warn'](
            { code, reason: reason.toString() },
            'disconnected from the marketplace',
          );
        this.abandonAttempts();
        resolve(welcomed);
      });
    });
  }

  private parse(text: string): ({ type?: unknown } & Record<string, unknown>) | undefined {
    try {
      const frame = JSON.parse(text) as unknown;
      if (frame && typeof frame === 'object' && !Array.isArray(frame)) return frame as Record<string, unknown>;
    } catch {
      // fall through
    }
    this.logger.warn({ frame: text.slice(0, 200) }, 'ignoring a frame that is not a JSON object');
    return undefined;
  }

  private onWelcome(socket: WebSocket, welcome: WelcomeMessage): void {
    this.welcome = welcome;
    this.everConnected = true;
    this.armWatchdog(socket);
    this.logger.info(
      { solverId: welcome.solver_id, taskTypes: this.taskTypes, heartbeatIntervalMs: welcome.heartbeat_interval_ms },
      'connected to the marketplace',
    );
    this.resolveConnected(welcome);
  }

  /** The server pings every heartbeat_interval_ms; silence for several intervals means the link is dead. */
  private armWatchdog(socket: WebSocket): void {
    const interval = this.welcome?.heartbeat_interval_ms ?? 0;
    if (interval <= 0) return;
    clearTimeout(this.watchdog);
    this.watchdog = setTimeout(() => {
      this.logger.warn({ silentMs: interval * MISSED_HEARTBEATS }, 'no heartbeat from the marketplace; reconnecting');
      socket.terminate();
    }, interval * MISSED_HEARTBEATS);
    this.watchdog.unref();
  }

  private onFrame(frame: { type?: unknown } & Record<string, unknown>): void {
    switch (frame.type) {
      case 'task': {
        const task = TaskFrame.safeParse(frame);
        if (task.success) return this.onTask(task.data);
        if (typeof frame.attempt_id === 'string' && frame.attempt_id !== '') {
          const unknownType =
            typeof frame.task_type === 'string' && !this.taskTypes.includes(frame.task_type as CapabilityTaskType);
          this.sendError(
            frame.attempt_id,
            unknownType
              ? new SolverError('unsupported_task_type', `this solver does not do ${String(frame.task_type)} tasks`)
              : new SolverError(
                  'invalid_payload',
                  `malformed task frame: ${task.error.issues.map((issue) => issue.path.join('.')).join(', ')}`,
                ),
          );
        }
        return this.logger.warn({ issues: task.error.issues }, 'malformed task frame');
      }
      case 'cancel': {
        const cancel = CancelFrame.safeParse(frame);
        if (cancel.success) this.cancelAttempt(cancel.data.attempt_id, cancel.data.reason);
        else this.logger.warn({ frame }, 'malformed cancel frame');
        return;
      }
      case 'protocol_error': {
        const problem = ProtocolErrorFrame.safeParse(frame);
        return this.logger.warn(
          { message: problem.success ? problem.data.message : frame },
          'the marketplace reported a protocol error',
        );
      }
      case 'result_rejected': {
        // Results are checked before they are sent, so this means the two schemas disagree: worth an error.
        const rejected = ResultRejectedFrame.safeParse(frame);
        return this.logger.error(
          { attemptId: frame.attempt_id, issues: rejected.success ? rejected.data.issues : frame },
          'the marketplace rejected a result',
        );
      }
      case 'draining':
        return this.logger.info(
          { running: frame.running_attempts },
          'the marketplace sends no new task; finishing the running ones',
        );
      default:
        return this.logger.debug({ type: frame.type }, 'ignoring an unknown frame type');
    }
  }

  private onTask(task: TaskMessage): void {
    if (this.attempts.has(task.attempt_id))
      return this.logger.warn({ attemptId: task.attempt_id }, 'duplicate task frame ignored');
    if (this.stopping)
      return this.sendError(task.attempt_id, new SolverError('shutting_down', 'this solver is shutting down'));
    const handler = this.handlers[task.task_type];
    if (!handler || !this.taskTypes.includes(task.task_type)) {
      return this.sendError(
        task.attempt_id,
        new SolverError('unsupported_task_type', `this solver does not do ${task.task_type} tasks`),
      );
    }
    const limit = concurrencyOf(this.config, task.task_type);
    if (this.running(task.task_type) >= limit) {
      return this.sendError(
        task.attempt_id,
        new SolverError('busy', `this solver is already running ${limit} ${task.task_type} tasks`),
      );
    }
    this.send({ type: 'accept', attempt_id: task.attempt_id });
    this.runAttempt(task, handler);
  }

  /** Attempts of this task type in flight (each type has its own limit, as registered). */
  private running(taskType: CapabilityTaskType): number {
    let count = 0;
    for (const attempt of this.attempts.values()) if (attempt.taskType === taskType) count += 1;
    return count;
  }

  private runAttempt(task: TaskMessage, handler: NonNullable<SolverHandlers[CapabilityTaskType]>): void {
    const controller = new AbortController();
    const attempt: Attempt = {
      id: task.attempt_id,
      taskType: task.task_type,
      controller,
      finished: false,
      settled: Promise.resolve(),
    };
    this.attempts.set(attempt.id, attempt);
    const deadlineTimer = this.deadlineTimer(task, controller);
    const started = Date.now();
    this.logger.debug({ attemptId: attempt.id, taskId: task.task_id, taskType: task.task_type }, 'task accepted');

    attempt.settled = (async () => {
      try {
        const result = await handler(task.payload, {
          signal: controller.signal,
          ...(Number.isFinite(Date.parse(task.deadline))
            ? { deadline: Date.parse(task.deadline) - this.clockSkewMs }
            : {}),
          emitChunk: (delta) => {
            if (!attempt.finished) this.send({ type: 'chunk', attempt_id: attempt.id, delta });
          },
        });
        const checked = RESULT_SCHEMAS[task.task_type].safeParse(result);
        if (!checked.success) {
          const fields = checked.error.issues.map((issue) => issue.path.join('.') || 'result').join(', ');
          throw new SolverError(
            'invalid_result',
            `the ${task.task_type} handler produced an invalid result (${fields})`,
          );
        }
        this.finish(attempt, { type: 'result', attempt_id: attempt.id, result });
        this.logger.info(
          { attemptId: attempt.id, taskType: task.task_type, ms: Date.now() - started },
          'task completed',
        );
      } catch (error) {
        const failure = toSolverError(error, controller.signal);
        if (!attempt.finished) {
          this.logger.info(
            { attemptId: attempt.id, taskType: task.task_type, type: failure.type, message: failure.message },
            'task failed',
          );
        }
        this.sendError(attempt.id, failure, attempt);
      } finally {
        clearTimeout(deadlineTimer);
        this.attempts.delete(attempt.id);
      }
    })();
  }

  /** Work past the task's deadline is wasted: the marketplace has already moved on. */
  private deadlineTimer(task: TaskMessage, controller: AbortController): NodeJS.Timeout | undefined {
    const deadline = Date.parse(task.deadline);
    if (!Number.isFinite(deadline)) return undefined;
    const remaining = deadline - (Date.now() + this.clockSkewMs);
    const timer = setTimeout(
      () => controller.abort(abortReason('deadline_exceeded', `the task deadline ${task.deadline} has passed`)),
      Math.max(remaining, 0),
    );
    timer.unref();
    return timer;
  }

  private cancelAttempt(attemptId: string, reason: string): void {
    const attempt = this.attempts.get(attemptId);
    if (!attempt) return;
    this.logger.info({ attemptId, reason }, 'attempt cancelled by the marketplace');
    attempt.finished = true;
    attempt.controller.abort(abortReason('cancelled', `cancelled by the marketplace: ${reason}`));
  }

  /** The marketplace reassigns the attempts of a dropped connection, so finishing them is wasted work. */
  private abandonAttempts(): void {
    for (const attempt of this.attempts.values()) {
      attempt.finished = true;
      attempt.controller.abort(abortReason('disconnected', 'the connection to the marketplace was lost'));
    }
  }

  private finish(attempt: Attempt, frame: SolverMessage): void {
    if (attempt.finished) return;
    attempt.finished = true;
    this.send(frame);
  }

  private sendError(attemptId: string, error: SolverError, attempt?: Attempt): void {
    const frame: SolverMessage = {
      type: 'error',
      attempt_id: attemptId,
      error: { type: error.type satisfies SolverErrorType, message: error.message },
      retryable: error.retryable,
    };
    if (attempt) this.finish(attempt, frame);
    else this.send(frame);
  }

  private send(frame: SolverMessage): void {
    const socket = this.socket;
    if (!socket || socket.readyState !== WebSocket.OPEN) {
      this.logger.debug({ type: frame.type }, 'not connected; frame dropped');
      return;
    }
    socket.send(JSON.stringify(frame));
  }

  stop(graceMs: number): Promise<void> {
    this.stopping ??= this.shutdown(graceMs);
    return this.stopping;
  }

  private async shutdown(graceMs: number): Promise<void> {
    this.logger.info({ inFlight: this.attempts.size, graceMs }, 'solver stopping');
    this.halt.abort();
    // `drain` first: the marketplace stops matching this solver while the running attempts finish.
    this.send({ type: 'drain' });
    const inFlight = () => Promise.allSettled([...this.attempts.values()].map((attempt) => attempt.settled));
    if (this.attempts.size > 0) await waitAtMost(inFlight(), graceMs);
    for (const attempt of this.attempts.values()) {
      this.sendError(
        attempt.id,
        new SolverError('shutting_down', 'this solver shut down before the task finished'),
        attempt,
      );
      attempt.controller.abort(abortReason('shutting_down', 'the solver is shutting down'));
    }
    await inFlight();
    await this.closeSocket();
    await this.loop;
    await this.handlerSet.close();
    this.rejectConnected(new Error('the solver agent stopped before it connected'));
    this.logger.info('solver stopped');
  }

  private async closeSocket(): Promise<void> {
    const socket = this.socket;
    if (!socket || socket.readyState === WebSocket.CLOSED) return;
    const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
    if (socket.readyState === WebSocket.CONNECTING) socket.terminate();
    else socket.close(1000, 'solver shutting down');
    await waitAtMost(closed, SOCKET_CLOSE_WAIT_MS);
    if ((socket.readyState as number) !== WebSocket.CLOSED) socket.terminate();
  }
}

/** Waits for the promise, but no longer than `ms` (without keeping the process alive afterwards). */
async function waitAtMost(promise: Promise<unknown>, ms: number): Promise<void> {
  const timeout = new AbortController();
  await Promise.race([promise, sleep(ms, timeout.signal).catch(() => undefined)]);
  timeout.abort();
}
