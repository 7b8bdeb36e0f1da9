import http from 'node:http';
import { EventEmitter } from 'node:events';
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';

/**
 * The marketplace side of protocol v1, as far as a solver can see it: capability registration and the
 * WebSocket. Tests drive it frame by frame.
 */

export type ReceivedFrame = { connection: number; frame: Record<string, unknown> & { type: string; attempt_id?: string } };

export type FakeMarketplaceOptions = {
  apiKey?: string;
  heartbeatIntervalMs?: number;
  /** Ping every heartbeat interval (default true); false simulates a silent, dead link. */
  ping?: boolean;
  capabilitiesStatus?: number;
};

export class FakeMarketplace {
  readonly received: ReceivedFrame[] = [];
  readonly registrations: unknown[] = [];
  readonly closes: Array<{ connection: number; code: number }> = [];
  private readonly events = new EventEmitter();
  private readonly sockets: WebSocket[] = [];
  private server!: http.Server;
  private wss!: WebSocketServer;
  private timers: NodeJS.Timeout[] = [];
  url = '';

  constructor(private readonly options: FakeMarketplaceOptions = {}) {}

  get apiKey(): string {
    return this.options.apiKey ?? 'test-key';
  }

  get connections(): number {
    return this.sockets.length;
  }

  async start(port = 0): Promise<this> {
    this.wss = new WebSocketServer({ noServer: true });
    this.server = http.createServer((req, res) => {
      let raw = '';
      req.on('data', (chunk) => (raw += chunk));
      req.on('end', () => {
        if (req.method === 'POST' && req.url === '/v1/solver/capabilities') {
          if (req.headers.authorization !== `Bearer ${this.apiKey}`) {
            res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":{"type":"invalid_api_key","message":"unknown key"}}');
            return;
          }
          this.registrations.push(JSON.parse(raw));
          this.events.emit('change');
          const status = this.options.capabilitiesStatus ?? 200;
          res.writeHead(status, { 'content-type': 'application/json' }).end('{"ok":true}');
          return;
        }
        res.writeHead(404).end();
      });
    });
    this.server.on('upgrade', (req, socket, head) => {
      if (req.url !== '/v1/solver/connect' || req.headers.authorization !== `Bearer ${this.apiKey}`) {
        socket.end('HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n');
        return;
      }
      this.wss.handleUpgrade(req, socket, head, (ws) => this.accept(ws));
    });
    await new Promise<void>((resolve) => this.server.listen(port, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  private accept(ws: WebSocket): void {
    const connection = this.sockets.push(ws);
    const heartbeat = this.options.heartbeatIntervalMs ?? 15_000;
    ws.on('message', (data) => {
      this.received.push({ connection, frame: JSON.parse(data.toString()) });
      this.events.emit('change');
    });
    ws.on('close', (code) => {
      this.closes.push({ connection, code });
      this.events.emit('change');
    });
    if (this.options.ping !== false) this.timers.push(setInterval(() => ws.readyState === ws.OPEN && ws.ping(), heartbeat));
    ws.send(JSON.stringify({ type: 'welcome', protocol: 1, solver_id: 'solver-1', heartbeat_interval_ms: heartbeat }));
    this.events.emit('change');
  }

  send(frame: Record<string, unknown>, connection = this.sockets.length): void {
    this.sockets[connection - 1]!.send(JSON.stringify(frame));
  }

  sendTask(attemptId: string, taskType: string, payload: Record<string, unknown>, deadline = new Date(Date.now() + 60_000)): void {
    this.send({ type: 'task', attempt_id: attemptId, task_id: `task-${attemptId}`, task_type: taskType, payload, deadline: deadline.toISOString() });
  }

  /** Drops the current connection without a closing handshake, as a crashed node or a cut cable would. */
  drop(connection = this.sockets.length): void {
    this.sockets[connection - 1]!.terminate();
  }

  framesFor(attemptId: string): Array<ReceivedFrame['frame']> {
    return this.received.filter((entry) => entry.frame.attempt_id === attemptId).map((entry) => entry.frame);
  }

  /** Resolves once the predicate holds, re-checking on every frame, registration and connection. */
  waitFor<T>(predicate: () => T | undefined | false, what: string, timeoutMs = 20_000): Promise<T> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const value = predicate();
        if (value) {
          cleanup();
          resolve(value);
        }
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`timed out waiting for ${what}`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.events.off('change', check);
      };
      this.events.on('change', check);
      check();
    });
  }

  waitForFrame(attemptId: string, type: string): Promise<ReceivedFrame['frame']> {
    return this.waitFor(() => this.framesFor(attemptId).find((frame) => frame.type === type), `${type} frame for ${attemptId}`);
  }

  async close(): Promise<void> {
    for (const timer of this.timers) clearInterval(timer);
    for (const socket of this.sockets) socket.terminate();
    this.wss.close();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
