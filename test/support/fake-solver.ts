import type { z } from 'zod';
import WebSocket from 'ws';
import type { SolverFrame, TaskMessage } from '../../src/schemas/frames';
import { api, registerAccount } from './stack';

/** A solver frame as sent (before the server's defaults apply). */
export type SolverFrameInput = z.input<typeof SolverFrame>;

/**
 * A real WebSocket solver speaking protocol v1, with scripted behaviour, for tests. (The reference
 * solver agent does real work; this one answers instantly or misbehaves on purpose.)
 */

export type Behaviour =
  | 'ok'
  | 'error'
  | 'never_accept'
  | 'accept_then_silent'
  | 'disconnect_after_accept'
  | 'invalid_result'
  | ((frame: TaskFrame, solver: FakeSolver) => void | Promise<void>);

export type TaskFrame = TaskMessage;

export const SAMPLE_RESULTS: Record<string, (payload: Record<string, any>) => Record<string, unknown>> = {
  proxy_fetch: (payload) => ({ url: payload.url, final_url: payload.url, status_code: 200, content_type: payload.raw_html ? 'html' : 'markdown', content: '# Hello', title: 'Hello' }),
  web_search: (payload) => ({ results: Array.from({ length: 10 }, (_, i) => ({ title: `Result ${i}`, url: `https://example.com/${i}`, snippet: `about ${payload.query}` })) }),
  // 1x1 transparent PNG
  screenshot: () => ({
    mime_type: 'image/png',
    image_base64: 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==',
    width: 1,
    height: 1,
  }),
  page_snapshot: (payload) => ({ url: payload.url, snapshot: '- heading "Hello" [level=1]', snapshot_format: payload.mode ?? 'markdown', title: 'Hello' }),
};

/**
 * Starts solvers for a suite's tests against the stack at `url()`, each closed after the test that
 * started it.
 */
export function suiteSolvers(url: () => string) {
  let started: FakeSolver[] = [];
  afterEach(async () => {
    await Promise.all(started.map((solver) => solver.close()));
    // The server forgets a socket a moment after it closes: the next test must not find it online.
    await Promise.all(started.map((solver) => solver.offline(url())));
    started = [];
  });
  return async (options: Parameters<typeof FakeSolver.start>[1] = {}) => {
    const solver = await FakeSolver.start(url(), options);
    started.push(solver);
    return solver;
  };
}

export class FakeSolver {
  socket!: WebSocket;
  solverId!: string;
  apiKey!: string;
  readonly received: TaskFrame[] = [];
  readonly cancels: { attempt_id: string; reason: string }[] = [];
  readonly protocolErrors: string[] = [];
  /** Every frame the server sent, in order. */
  readonly frames: Record<string, any>[] = [];
  private welcomed!: Promise<void>;

  constructor(
    private readonly url: string,
    public behaviour: Behaviour = 'ok',
  ) {}

  static async start(
    url: string,
    options: { behaviour?: Behaviour; taskTypes?: string[]; price?: string; maxConcurrent?: number; capabilities?: Record<string, unknown>[] } = {},
  ) {
    const solver = new FakeSolver(url, options.behaviour ?? 'ok');
    const account = await registerAccount(url);
    solver.solverId = account.account_id;
    solver.apiKey = account.api_key;
    const capabilities = options.capabilities ?? (options.taskTypes ?? ['proxy_fetch', 'web_search', 'screenshot', 'page_snapshot']).map((taskType) => ({
      task_type: taskType,
      tier: 'standard',
      billing_type: 'per_request',
      fulfillment_path: 'http',
      provider_name: 'fake',
      model_name: 'fake',
      marginal_cost: 0,
      min_price_points: options.price ?? '1',
      max_concurrent: options.maxConcurrent ?? 8,
    }));
    const registered = await api(url, 'POST', '/v1/solver/capabilities', { body: capabilities, headers: { Authorization: `Bearer ${account.api_key}` } });
    if (registered.status !== 200) throw new Error(`capabilities refused: ${registered.text}`);
    await solver.connect();
    return solver;
  }

  async connect(url = this.url) {
    this.socket = new WebSocket(`${url.replace(/^http/, 'ws')}/v1/solver/connect`, { headers: { Authorization: `Bearer ${this.apiKey}` } });
    this.welcomed = new Promise((resolve, reject) => {
      this.socket.once('error', reject);
      this.socket.on('message', (data) => {
        const frame = JSON.parse(data.toString());
        this.frames.push(frame);
        if (frame.type === 'welcome') resolve();
        else if (frame.type === 'task') void this.onTask(frame);
        else if (frame.type === 'cancel') this.cancels.push(frame);
        else if (frame.type === 'protocol_error') this.protocolErrors.push(frame.message);
      });
    });
    await this.welcomed;
  }

  /** The first frame the server sent (from `from` on) that matches. */
  async nextFrame(match: (frame: Record<string, any>) => boolean, from = 0, timeoutMs = 20_000): Promise<Record<string, any>> {
    return waitFor(() => this.frames.slice(from).find(match), timeoutMs, 20);
  }

  /** Sends a frame of the protocol (src/schemas/frames.ts), as a solver writes it. */
  send(frame: SolverFrameInput) {
    this.sendUnchecked(frame);
  }

  /** Sends anything as a frame: for tests of how the server answers frames outside the protocol. */
  sendUnchecked(frame: unknown) {
    if (this.socket.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify(frame));
  }

  private async onTask(frame: TaskFrame) {
    this.received.push(frame);
    const behaviour = this.behaviour;
    if (typeof behaviour === 'function') return behaviour(frame, this);
    if (behaviour === 'never_accept') return;
    this.send({ type: 'accept', attempt_id: frame.attempt_id });
    switch (behaviour) {
      case 'ok':
        this.send({ type: 'result', attempt_id: frame.attempt_id, result: SAMPLE_RESULTS[frame.task_type](frame.payload) });
        return;
      case 'error':
        this.send({ type: 'error', attempt_id: frame.attempt_id, error: { type: 'upstream_failed', message: 'scripted failure' }, retryable: true });
        return;
      case 'invalid_result':
        this.send({ type: 'result', attempt_id: frame.attempt_id, result: { nonsense: true } });
        return;
      case 'disconnect_after_accept':
        setTimeout(() => this.socket.terminate(), 50);
        return;
      case 'accept_then_silent':
        return;
    }
  }

  /** Resolves once the service no longer counts this solver as connected. */
  async offline(url = this.url) {
    await waitFor(async () => {
      const stats = await api(url, 'GET', '/v1/solver/stats', { headers: { Authorization: `Bearer ${this.apiKey}` } });
      return stats.status === 200 && stats.json.connected === false;
    }, 10_000, 50);
  }

  async close() {
    if (this.socket.readyState === WebSocket.OPEN || this.socket.readyState === WebSocket.CONNECTING) {
      await new Promise<void>((resolve) => {
        this.socket.once('close', () => resolve());
        this.socket.close();
      });
    }
  }
}

export async function waitFor<T>(probe: () => Promise<T | undefined | null | false> | T | undefined | null | false, timeoutMs = 20_000, everyMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** Capabilities of a strong-tier chat solver. */
export const strongChat = (options: { billing?: 'per_token' | 'per_request'; min?: string; marginal?: string; model?: string } = {}) => [
  {
    task_type: 'chat_completion',
    tier: 'strong',
    billing_type: options.billing ?? 'per_token',
    fulfillment_path: 'provider_api',
    provider_name: 'fake',
    model_name: options.model ?? 'gpt-4o',
    marginal_cost: options.marginal ?? '2',
    min_price_points: options.min ?? '1',
    max_concurrent: 4,
  },
];

/** A scripted strong-tier chat solver: streams `words` as deltas, then reports usage. */
export function talker(words: string[], usage = { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }) {
  return (frame: TaskFrame, self: FakeSolver) => {
    self.send({ type: 'accept', attempt_id: frame.attempt_id });
    words.forEach((word) => self.send({ type: 'chunk', attempt_id: frame.attempt_id, delta: { content: word } }));
    self.send({ type: 'result', attempt_id: frame.attempt_id, result: { finish_reason: 'stop', usage } });
  };
}
