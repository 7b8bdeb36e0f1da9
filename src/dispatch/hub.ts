import crypto from 'node:crypto';
import type WebSocket from 'ws';
import type { Db } from '../db/pool';
import type { TrustPolicy } from '../db/reputation';
import { markDraining, registerConnection, removeConnection } from '../db/solvers';
import type { Logger } from '../logger';
import type { Handoff } from '../db/matching';
import { SOLVER_PROTOCOL_VERSION, type CapabilityTaskType } from '../schemas/domain';
import { SolverFrame, type ResultIssueData, type ServerMessage } from '../schemas/frames';
import { CANCEL_REASONS, type CancelReason } from '../contract/lifecycle';
import { AttemptFailure, type AttemptRequest } from './attempt';
import { describeIssues, resultIssues } from './result-check';
import { MAX_TEST_TASKS_PER_CONNECTION, refuseTestTask, runTestTask } from './test-tasks';

/**
 * The solver sockets held by this API node, and the attempts running on them.
 * Protocol v1 (docs/solver-protocol.md): the server sends `task` and `cancel`; the solver answers with
 * `accept`, then `chunk`* and `result`, or `error`. Frames about an attempt that is not current are ignored.
 */

interface PendingAttempt {
  taskType: CapabilityTaskType;
  accepted: boolean;
  test: boolean;
  acceptTimer?: NodeJS.Timeout;
  resolve(result: Record<string, unknown>): void;
  reject(failure: AttemptFailure): void;
  onChunk?(delta: Record<string, unknown>): void;
  onResultRejected?(issues: ResultIssueData[]): void;
}

interface Session {
  solverId: string;
  /** The API key the connection authenticated with: revoking it closes the connection. */
  keyId: string;
  connectionId: string;
  socket: WebSocket;
  alive: boolean;
  attempts: Map<string, PendingAttempt>;
  /** The solver_connections row being written; a close must not delete it before it exists. */
  registered: Promise<void>;
  /** No task goes out before `welcome`, the first frame a solver receives. */
  welcomed: boolean;
  /** The solver sent `drain`: no new attempt goes out on this connection. */
  draining: boolean;
  testTasks: number;
}

/** Close code of a connection whose API key was revoked (docs/solver-protocol.md, "Close codes"). */
export const CLOSE_KEY_REVOKED = 4003;

export class SolverHub {
  private readonly sessions = new Map<string, Session>();
  private readonly pingTimer: NodeJS.Timeout;
  /** This node is shutting down: the sockets it closes end their attempts as the platform's fault. */
  private closing = false;

  constructor(
    private readonly deps: {
      db: Db;
      logger: Logger;
      nodeId: string;
      /** The trust policy a connecting solver's free slots are handed on under (docs/trust.md). */
      trust: TrustPolicy;
      heartbeatIntervalMs: number;
      acceptTimeoutMs: number;
      attemptTimeoutMs: number;
      /** Tells the waiting workflows the slots a connecting solver took (TaskEngine.afterCommit). */
      handedOn: (handoffs: Handoff[]) => void;
      /** Records that the solver accepted an attempt (TaskEngine.markAccepted). */
      accepted: (attemptId: string) => Promise<void>;
    },
  ) {
    // A solver that missed a whole heartbeat interval is gone: its attempts fail and are reassigned.
    this.pingTimer = setInterval(() => this.pingAll(), deps.heartbeatIntervalMs);
    this.pingTimer.unref();
  }

  get connectedCount() {
    return this.sessions.size;
  }

  isConnected(solverId: string) {
    return this.sessions.has(solverId);
  }

  /** True when a task sent to this solver now would go out: its socket is here, open and welcomed. */
  canDispatch(solverId: string): boolean {
    const session = this.sessions.get(solverId);
    return (
      session !== undefined &&
      session.welcomed &&
      !session.draining &&
      session.socket.readyState === session.socket.OPEN
    );
  }

  /** True while this attempt runs on the solver's connection here. */
  isRunning(solverId: string, attemptId: string): boolean {
    return this.sessions.get(solverId)?.attempts.has(attemptId) ?? false;
  }

  async attach(socket: WebSocket, solverId: string, keyId: string): Promise<void> {
    const previous = this.sessions.get(solverId);
    const session: Session = {
      solverId,
      keyId,
      connectionId: crypto.randomUUID(),
      socket,
      alive: true,
      attempts: new Map(),
      registered: Promise.resolve(),
      welcomed: false,
      draining: false,
      testTasks: 0,
    };
    this.sessions.set(solverId, session);
    if (previous) previous.socket.close(4001, 'replaced by a newer connection');
    socket.on('pong', () => {
      session.alive = true;
    });
    socket.on('message', (data, isBinary) => this.onMessage(session, isBinary ? null : data.toString()));
    socket.on('close', () => this.detach(session));
    socket.on('error', (error) => this.deps.logger.debug({ err: error, solver_id: solverId }, 'solver socket error'));
    // Its free slots go to waiting tasks as it registers; their workflows are told once it is welcomed.
    const handed = registerConnection(this.deps.db, this.deps.trust, {
      solverId,
      connectionId: session.connectionId,
      nodeId: this.deps.nodeId,
    });
    session.registered = handed.then(() => undefined);
    const handoffs = await handed;
    this.send(session, {
      type: 'welcome',
      protocol: SOLVER_PROTOCOL_VERSION,
      solver_id: solverId,
      heartbeat_interval_ms: this.deps.heartbeatIntervalMs,
      server_time: new Date().toISOString(),
    });
    session.welcomed = true;
    this.deps.handedOn(handoffs);
    this.deps.logger.info({ solver_id: solverId }, 'solver connected');
  }

  /** Sends the task to the solver and resolves with its validated result; rejects with an AttemptFailure. */
  runAttempt(request: AttemptRequest): Promise<Record<string, unknown>> {
    const session = this.sessions.get(request.solverId);
    // Matched in the moment before its drain was recorded: never sent, and not held against the solver.
    if (session?.draining)
      return Promise.reject(AttemptFailure.of('solver_draining', 'The solver is draining: it takes no new task.'));
    if (!session || !this.canDispatch(request.solverId)) {
      return Promise.reject(AttemptFailure.of('solver_disconnected', 'The solver is not connected to this node.'));
    }
    return new Promise<Record<string, unknown>>((resolve, reject) => {
      const finish = () => {
        clearTimeout(pending.acceptTimer);
        clearTimeout(deadlineTimer);
        request.signal?.removeEventListener('abort', onAbort);
        session.attempts.delete(request.attemptId);
      };
      const pending: PendingAttempt = {
        taskType: request.taskType,
        accepted: false,
        test: request.test === true,
        onChunk: request.onChunk,
        onResultRejected: request.onResultRejected,
        resolve: (result) => {
          finish();
          resolve(result);
        },
        reject: (failure) => {
          finish();
          reject(failure);
        },
      };
      const cancel = (reason: CancelReason, failure: AttemptFailure) => {
        if (!session.attempts.has(request.attemptId)) return;
        this.send(session, { type: 'cancel', attempt_id: request.attemptId, reason: CANCEL_REASONS[reason] });
        pending.reject(failure);
      };
      const onAbort = () => cancel('cancelled', AttemptFailure.of('cancelled', 'The attempt was cancelled.'));
      pending.acceptTimer = setTimeout(
        () =>
          cancel(
            'accept_timeout',
            AttemptFailure.of('accept_timeout', `The solver did not accept within ${request.acceptTimeoutMs} ms.`),
          ),
        request.acceptTimeoutMs,
      );
      const deadlineTimer = setTimeout(
        () =>
          cancel(
            'deadline',
            AttemptFailure.of('attempt_timeout', 'The solver did not answer before the attempt deadline.'),
          ),
        Math.max(0, request.deadline.getTime() - Date.now()),
      );
      request.signal?.addEventListener('abort', onAbort);
      session.attempts.set(request.attemptId, pending);
      this.send(session, {
        type: 'task',
        attempt_id: request.attemptId,
        task_id: request.taskId,
        task_type: request.taskType,
        payload: request.payload,
        deadline: request.deadline.toISOString(),
        ...(request.test ? { test: true } : {}),
      });
      if (request.signal?.aborted) onAbort();
    });
  }

  /**
   * Closes the connections opened with a revoked key (code 4003). The session is detached at once, so no
   * task goes out on it while the closing handshake runs and matching forgets the solver here.
   */
  closeKey(keyId: string): void {
    for (const session of [...this.sessions.values()]) {
      if (session.keyId !== keyId) continue;
      this.deps.logger.info(
        { solver_id: session.solverId, key_id: keyId },
        'solver connection closed: its API key was revoked',
      );
      session.socket.close(CLOSE_KEY_REVOKED, 'API key revoked');
      void this.detach(session);
    }
  }

  /** The keys of the connections held here. */
  connectedKeys(): string[] {
    return [...new Set([...this.sessions.values()].map((session) => session.keyId))];
  }

  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.pingTimer);
    for (const session of this.sessions.values()) session.socket.close(1001, 'server shutting down');
    await Promise.all([...this.sessions.values()].map((session) => this.detach(session)));
  }

  private send(session: Session, frame: ServerMessage) {
    if (session.socket.readyState === session.socket.OPEN) session.socket.send(JSON.stringify(frame));
  }

  private onMessage(session: Session, text: string | null) {
    let parsedJson: unknown;
    try {
      parsedJson = text === null ? undefined : JSON.parse(text);
    } catch {
      parsedJson = undefined;
    }
    // Chat deltas are the hot path: a well-formed chunk frame skips the schema walk.
    const candidate = parsedJson as { type?: unknown; attempt_id?: unknown; delta?: unknown } | undefined;
    if (
      candidate?.type === 'chunk' &&
      typeof candidate.attempt_id === 'string' &&
      candidate.attempt_id.length > 0 &&
      typeof candidate.delta === 'object' &&
      candidate.delta !== null &&
      !Array.isArray(candidate.delta)
    ) {
      session.attempts.get(candidate.attempt_id)?.onChunk?.(candidate.delta as Record<string, unknown>);
      return;
    }
    const frame = SolverFrame.safeParse(parsedJson);
    if (!frame.success) {
      const problem =
        text === null
          ? 'binary frames are not part of protocol v1'
          : parsedJson === undefined
            ? 'the frame is not JSON'
            : frame.error.issues.map((issue) => `${issue.path.join('.') || 'frame'}: ${issue.message}`).join('; ');
      this.send(session, { type: 'protocol_error', message: `Malformed frame: ${problem}` });
      return;
    }
    const message = frame.data;
    if (message.type === 'drain') return void this.drain(session);
    if (message.type === 'test_task') return this.startTestTask(session, message.task_type, message.payload);
    const pending = session.attempts.get(message.attempt_id);
    if (!pending) {
      // Late or stray message about an attempt that is no longer current: ignored, never paid.
      this.deps.logger.debug(
        { solver_id: session.solverId, attempt_id: message.attempt_id, type: message.type },
        'frame for a non-current attempt ignored',
      );
      return;
    }
    switch (message.type) {
      case 'accept':
        if (!pending.accepted) {
          pending.accepted = true;
          clearTimeout(pending.acceptTimer);
          if (!pending.test)
            this.deps
              .accepted(message.attempt_id)
              .catch((error) => this.deps.logger.warn({ err: error }, 'could not record acceptance'));
        }
        return;
      case 'chunk':
        pending.onChunk?.(message.delta);
        return;
      case 'error':
        pending.reject(AttemptFailure.reported(message.error, message.retryable));
        return;
      case 'result': {
        const issues = resultIssues(pending.taskType, message.result);
        if (issues) {
          this.send(session, { type: 'result_rejected', attempt_id: message.attempt_id, issues });
          pending.onResultRejected?.(issues);
          pending.reject(
            AttemptFailure.of('invalid_result', `The solver's result is malformed: ${describeIssues(issues)}`),
          );
          return;
        }
        pending.resolve(message.result);
        return;
      }
    }
  }

  /** `drain`: matching offers this connection nothing more (recorded before the answer); running attempts go on. */
  private async drain(session: Session) {
    if (!session.draining) {
      session.draining = true;
      await session.registered.catch(() => undefined);
      await markDraining(this.deps.db, { solverId: session.solverId, connectionId: session.connectionId }).catch(
        (error) => this.deps.logger.warn({ err: error, solver_id: session.solverId }, 'could not record a drain'),
      );
      this.deps.logger.info({ solver_id: session.solverId, running: session.attempts.size }, 'solver draining');
    }
    this.send(session, { type: 'draining', running_attempts: session.attempts.size });
  }

  /** `test_task` (test mode): a synthetic attempt on this connection, answered with `test_result`. */
  private startTestTask(session: Session, taskType: CapabilityTaskType, payload: Record<string, unknown> | undefined) {
    if (session.draining)
      return this.send(
        session,
        refuseTestTask(
          taskType,
          'solver_draining',
          'This connection is draining: it takes no new task, test tasks included.',
        ),
      );
    if (session.testTasks >= MAX_TEST_TASKS_PER_CONNECTION) {
      return this.send(
        session,
        refuseTestTask(
          taskType,
          'too_many_test_tasks',
          `At most ${MAX_TEST_TASKS_PER_CONNECTION} test tasks run at once on a connection.`,
        ),
      );
    }
    session.testTasks += 1;
    const { acceptTimeoutMs, attemptTimeoutMs } = this.deps;
    runTestTask((request) => this.runAttempt(request), {
      solverId: session.solverId,
      taskType,
      payload,
      acceptTimeoutMs,
      attemptTimeoutMs,
    })
      .then((verdict) => this.send(session, verdict))
      .catch((error) => this.deps.logger.warn({ err: error, solver_id: session.solverId }, 'test task failed'))
      .finally(() => {
        session.testTasks -= 1;
      });
  }

  private async detach(session: Session) {
    // Only this node's own shutdown makes a closed socket the platform's fault; the solver cannot cause it.
    const failure = this.closing
      ? AttemptFailure.of('node_shutdown', "The node holding the solver's connection shut down during the attempt.")
      : AttemptFailure.of('solver_disconnected', 'The solver disconnected during the attempt.');
    for (const pending of [...session.attempts.values()]) pending.reject(failure);
    if (this.sessions.get(session.solverId) === session) {
      this.sessions.delete(session.solverId);
      // Otherwise a socket closed while its row was being written would leave the solver looking online.
      await session.registered.catch(() => undefined);
      await removeConnection(this.deps.db, { solverId: session.solverId, connectionId: session.connectionId }).catch(
        (error) => this.deps.logger.warn({ err: error }, 'could not remove solver connection'),
      );
      this.deps.logger.info({ solver_id: session.solverId }, 'solver disconnected');
    }
  }

  private pingAll() {
    for (const session of this.sessions.values()) {
      if (!session.alive) {
        this.deps.logger.info({ solver_id: session.solverId }, 'solver missed its heartbeat');
        session.socket.terminate();
        continue;
      }
      session.alive = false;
      session.socket.ping();
    }
  }
}
