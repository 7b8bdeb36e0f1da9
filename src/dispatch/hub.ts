import crypto from 'node:crypto';
import type WebSocket from 'ws';
import type { Db } from '../db/pool';
import { registerConnection, removeConnection } from '../db/solvers';
import { markAttemptAccepted } from '../db/tasks';
import type { Logger } from '../logger';
import type { AttemptOutcome, CapabilityTaskType } from '../schemas/domain';
import { RESULT_SCHEMAS, SolverFrame, type ServerMessage } from '../schemas/frames';

/**
 * The solver sockets held by this API node, and the attempts running on them.
 * Protocol v1 (docs/solver-protocol.md): the server sends `task` and `cancel`; the solver answers with
 * `accept`, then `chunk`* and `result`, or `error`. Frames about an attempt that is not current are ignored.
 */

export class AttemptFailure extends Error {
  constructor(
    readonly outcome: AttemptOutcome,
    readonly errorType: string,
    message: string,
    readonly retryable = true,
  ) {
    super(message);
  }
}

interface PendingAttempt {
  taskType: CapabilityTaskType;
  accepted: boolean;
  acceptTimer?: NodeJS.Timeout;
  resolve(result: Record<string, unknown>): void;
  reject(failure: AttemptFailure): void;
  onChunk?(delta: Record<string, unknown>): void;
}

interface Session {
  solverId: string;
  connectionId: string;
  socket: WebSocket;
  alive: boolean;
  attempts: Map<string, PendingAttempt>;
  /** The solver_connections row being written; a close must not delete it before it exists. */
  registered: Promise<void>;
  /** No task goes out before `welcome`, the first frame a solver receives. */
  welcomed: boolean;
}

export interface AttemptRequest {
  solverId: string;
  attemptId: string;
  taskId: string;
  taskType: CapabilityTaskType;
  payload: Record<string, unknown>;
  deadline: Date;
  acceptTimeoutMs: number;
  signal?: AbortSignal;
  onChunk?(delta: Record<string, unknown>): void;
}

export class SolverHub {
  private readonly sessions = new Map<string, Session>();
  private readonly pingTimer: NodeJS.Timeout;

  constructor(
    private readonly deps: { db: Db; logger: Logger; nodeId: string; heartbeatIntervalMs: number },
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
    return session !== undefined && session.welcomed && session.socket.readyState === session.socket.OPEN;
  }

  async attach(socket: WebSocket, solverId: string): Promise<void> {
    const previous = this.sessions.get(solverId);
    const session: Session = { solverId, connectionId: crypto.randomUUID(), socket, alive: true, attempts: new Map(), registered: Promise.resolve(), welcomed: false };
    this.sessions.set(solverId, session);
    if (previous) previous.socket.close(4001, 'replaced by a newer connection');
    socket.on('pong', () => {
      session.alive = true;
    });
    socket.on('message', (data, isBinary) => this.onMessage(session, isBinary ? null : data.toString()));
    socket.on('close', () => this.detach(session));
    socket.on('error', (error) => this.deps.logger.debug({ err: error, solver_id: solverId }, 'solver socket error'));
    session.registered = registerConnection(this.deps.db, { solverId, connectionId: session.connectionId, nodeId: this.deps.nodeId });
    await session.registered;
    this.send(session, { type: 'welcome', protocol: 1, solver_id: solverId, heartbeat_interval_ms: this.deps.heartbeatIntervalMs });
    session.welcomed = true;
    this.deps.logger.info({ solver_id: solverId }, 'solver connected');
  }

  /** Sends the task to the solver and resolves with its validated result; rejects with an AttemptFailure. */
  runAttempt(request: AttemptRequest): Promise<Record<string, unknown>> {
    const session = this.sessions.get(request.solverId);
    if (!session || !this.canDispatch(request.solverId)) {
      return Promise.reject(new AttemptFailure('disconnected', 'solver_disconnected', 'The solver is not connected to this node.'));
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
        onChunk: request.onChunk,
        resolve: (result) => {
          finish();
          resolve(result);
        },
        reject: (failure) => {
          finish();
          reject(failure);
        },
      };
      const cancel = (reason: string, failure: AttemptFailure) => {
        if (!session.attempts.has(request.attemptId)) return;
        this.send(session, { type: 'cancel', attempt_id: request.attemptId, reason });
        pending.reject(failure);
      };
      const onAbort = () => cancel('cancelled', new AttemptFailure('cancelled', 'cancelled', 'The attempt was cancelled.'));
      pending.acceptTimer = setTimeout(
        () => cancel('accept_timeout', new AttemptFailure('rejected', 'accept_timeout', `The solver did not accept within ${request.acceptTimeoutMs} ms.`)),
        request.acceptTimeoutMs,
      );
      const deadlineTimer = setTimeout(
        () => cancel('deadline', new AttemptFailure('timeout', 'attempt_timeout', 'The solver did not answer before the attempt deadline.')),
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
      });
      if (request.signal?.aborted) onAbort();
    });
  }

  /** Tells a solver to stop an attempt it may still be running (used when the attempt is abandoned elsewhere). */
  cancel(solverId: string, attemptId: string, reason: string) {
    const session = this.sessions.get(solverId);
    const pending = session?.attempts.get(attemptId);
    if (!session || !pending) return;
    this.send(session, { type: 'cancel', attempt_id: attemptId, reason });
    pending.reject(new AttemptFailure('cancelled', 'cancelled', reason));
  }

  async close(): Promise<void> {
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
      const problem = text === null ? 'binary frames are not part of protocol v1' : parsedJson === undefined ? 'the frame is not JSON' : frame.error.issues.map((issue) => `${issue.path.join('.') || 'frame'}: ${issue.message}`).join('; ');
      this.send(session, { type: 'protocol_error', message: `Malformed frame: ${problem}` });
      return;
    }
    const message = frame.data;
    const pending = session.attempts.get(message.attempt_id);
    if (!pending) {
      // Late or stray message about an attempt that is no longer current: ignored, never paid.
      this.deps.logger.debug({ solver_id: session.solverId, attempt_id: message.attempt_id, type: message.type }, 'frame for a non-current attempt ignored');
      return;
    }
    switch (message.type) {
      case 'accept':
        if (!pending.accepted) {
          pending.accepted = true;
          clearTimeout(pending.acceptTimer);
          markAttemptAccepted(this.deps.db, message.attempt_id).catch((error) => this.deps.logger.warn({ err: error }, 'could not record acceptance'));
        }
        return;
      case 'chunk':
        pending.onChunk?.(message.delta);
        return;
      case 'error':
        pending.reject(new AttemptFailure('error', message.error.type, message.error.message, message.retryable));
        return;
      case 'result': {
        const checked = RESULT_SCHEMAS[pending.taskType].safeParse(message.result);
        if (!checked.success) {
          const problem = checked.error.issues.map((issue) => `${issue.path.join('.')}: ${issue.message}`).join('; ');
          pending.reject(new AttemptFailure('invalid_result', 'invalid_result', `The solver's result is malformed: ${problem}`));
          return;
        }
        pending.resolve(message.result);
        return;
      }
    }
  }

  private async detach(session: Session) {
    for (const pending of [...session.attempts.values()]) {
      pending.reject(new AttemptFailure('disconnected', 'solver_disconnected', 'The solver disconnected during the attempt.'));
    }
    if (this.sessions.get(session.solverId) === session) {
      this.sessions.delete(session.solverId);
      // Otherwise a socket closed while its row was being written would leave the solver looking online.
      await session.registered.catch(() => undefined);
      await removeConnection(this.deps.db, { solverId: session.solverId, connectionId: session.connectionId }).catch((error) =>
        this.deps.logger.warn({ err: error }, 'could not remove solver connection'),
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
