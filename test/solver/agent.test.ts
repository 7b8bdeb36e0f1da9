import { createLogger } from '../../src/logger';
import { startSolverAgent, type SolverAgent } from '../../src/solver/agent';
import type { TaskHandler } from '../../src/solver/handlers/types';
import type { SolverConfig } from '../../src/solver/config';
import { FetchResult, SolverFrame } from '../../src/schemas/frames';
import { SolverCapabilitiesBody } from '../../src/schemas/requests';
import { FakeMarketplace } from './helpers/fake-marketplace';
import { startFixtureServer, type FixtureServer } from './helpers/fixture-server';
import { startFakeUpstream, streamChunks, type FakeUpstream } from './helpers/fake-upstream';
import { testSolverConfig } from './helpers/config';

const logger = createLogger('silent');
const FETCHED = { url: 'http://x', final_url: 'http://x', status_code: 200, content_type: 'markdown', content: 'done', title: null };

let fixtures: FixtureServer;
let marketplace: FakeMarketplace;
let agent: SolverAgent | undefined;

beforeAll(async () => {
  fixtures = await startFixtureServer();
});
afterAll(() => fixtures.close());
beforeEach(async () => {
  marketplace = await new FakeMarketplace().start();
});
afterEach(async () => {
  await agent?.stop({ graceMs: 0 });
  agent = undefined;
  await marketplace.close();
});

function configFor(market: FakeMarketplace, overrides: Partial<SolverConfig> = {}, env: Record<string, string> = {}): SolverConfig {
  return testSolverConfig({ SOLVER_URL: market.url, SOLVER_API_KEY: market.apiKey, SOLVER_TASK_TYPES: 'proxy_fetch', ...env }, { reconnectBaseMs: 20, reconnectMaxMs: 200, ...overrides });
}

/** A handler whose attempts run until the test releases them or the attempt is aborted. */
function controllableHandler() {
  const attempts = new Map<string, { release: () => void; signal: AbortSignal }>();
  let active = 0;
  let maxActive = 0;
  const handler: TaskHandler = (payload, { signal }) => {
    active++;
    maxActive = Math.max(maxActive, active);
    return new Promise<Record<string, unknown>>((resolve, reject) => {
      attempts.set(payload.id as string, { release: () => resolve(FETCHED), signal });
      signal.addEventListener('abort', () => reject(signal.reason));
    }).finally(() => active--);
  };
  return { handler, attempts, maxActive: () => maxActive };
}

async function waitUntil(condition: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 400 && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 25));
  if (!condition()) throw new Error(`timed out waiting for ${what}`);
}

test('registers capabilities, then answers a task with accept and a valid result', async () => {
  agent = await startSolverAgent(configFor(marketplace, {}, { SOLVER_PRICE_POINTS: 'proxy_fetch=2' }), { logger });
  const welcome = await agent.connected;
  expect(welcome).toMatchObject({ type: 'welcome', solver_id: 'solver-1' });
  expect(agent.status()).toMatchObject({ connected: true, solverId: 'solver-1', inFlight: 0 });

  const [records] = marketplace.registrations as unknown[][];
  expect(SolverCapabilitiesBody.parse(records)).toEqual([
    {
      task_type: 'proxy_fetch',
      tier: 'standard',
      billing_type: 'per_request',
      fulfillment_path: 'http',
      provider_name: 'reference-solver',
      model_name: 'http-fetch',
      marginal_cost: '0',
      min_price_points: '2',
      max_concurrent: 4,
    },
  ]);

  marketplace.sendTask('a1', 'proxy_fetch', { url: `${fixtures.baseUrl}/article.html` });
  const result = await marketplace.waitForFrame('a1', 'result');
  const frames = marketplace.framesFor('a1');
  expect(frames.map((frame) => frame.type)).toEqual(['accept', 'result']);
  for (const frame of frames) expect(SolverFrame.safeParse(frame).success).toBe(true);
  expect(FetchResult.parse(result.result)).toMatchObject({ title: 'Fixture Article', status_code: 200 });
});

test('reports handler failures as error frames with retryable', async () => {
  agent = await startSolverAgent(configFor(marketplace), { logger });
  await agent.connected;
  marketplace.sendTask('bad', 'proxy_fetch', { url: 'file:///etc/passwd' });
  const error = await marketplace.waitForFrame('bad', 'error');
  expect(error).toMatchObject({ error: { type: 'target_blocked' }, retryable: false });
  expect(marketplace.framesFor('bad').map((frame) => frame.type)).toEqual(['accept', 'error']);
});

test('never runs more than max_concurrent attempts and answers the excess with busy', async () => {
  const control = controllableHandler();
  agent = await startSolverAgent(configFor(marketplace, { maxConcurrent: 2 }), { logger, handlers: { proxy_fetch: control.handler } });
  await agent.connected;
  for (const id of ['c1', 'c2', 'c3']) marketplace.sendTask(id, 'proxy_fetch', { url: 'http://example.com', id });

  const busy = await marketplace.waitForFrame('c3', 'error');
  expect(busy).toMatchObject({ error: { type: 'busy' }, retryable: true });
  expect(marketplace.framesFor('c3').map((frame) => frame.type)).toEqual(['error']);
  await marketplace.waitForFrame('c2', 'accept');
  expect(control.maxActive()).toBe(2);

  control.attempts.get('c1')!.release();
  await marketplace.waitForFrame('c1', 'result');
  marketplace.sendTask('c4', 'proxy_fetch', { url: 'http://example.com', id: 'c4' });
  await marketplace.waitForFrame('c4', 'accept');
  control.attempts.get('c2')!.release();
  control.attempts.get('c4')!.release();
  await marketplace.waitForFrame('c4', 'result');
  expect(control.maxActive()).toBe(2);
});

test('cancel aborts the attempt and nothing more is sent for it', async () => {
  const control = controllableHandler();
  agent = await startSolverAgent(configFor(marketplace), { logger, handlers: { proxy_fetch: control.handler } });
  await agent.connected;
  marketplace.sendTask('x1', 'proxy_fetch', { url: 'http://example.com', id: 'x1' });
  await marketplace.waitForFrame('x1', 'accept');
  const { signal } = control.attempts.get('x1')!;
  marketplace.send({ type: 'cancel', attempt_id: 'x1', reason: 'reassigned' });
  await waitUntil(() => signal.aborted, 'the attempt signal to fire');
  expect(signal.reason).toMatchObject({ type: 'cancelled' });

  // A later attempt completes end to end: by then anything sent for x1 would have arrived.
  marketplace.sendTask('x2', 'proxy_fetch', { url: 'http://example.com', id: 'x2' });
  await marketplace.waitForFrame('x2', 'accept');
  control.attempts.get('x2')!.release();
  await marketplace.waitForFrame('x2', 'result');
  expect(marketplace.framesFor('x1').map((frame) => frame.type)).toEqual(['accept']);
  await waitUntil(() => agent!.status().inFlight === 0, 'the slot to be freed');
});

test('reconnects after the server drops the socket, abandoning the attempts of the lost connection', async () => {
  const control = controllableHandler();
  agent = await startSolverAgent(configFor(marketplace), { logger, handlers: { proxy_fetch: control.handler } });
  await agent.connected;
  marketplace.sendTask('r1', 'proxy_fetch', { url: 'http://example.com', id: 'r1' });
  await marketplace.waitForFrame('r1', 'accept');

  marketplace.drop();
  await marketplace.waitFor(() => marketplace.connections === 2, 'a second connection');
  expect(control.attempts.get('r1')!.signal.reason).toMatchObject({ type: 'disconnected' });
  expect(marketplace.registrations).toHaveLength(2);

  marketplace.sendTask('r2', 'proxy_fetch', { url: 'http://example.com', id: 'r2' });
  await marketplace.waitForFrame('r2', 'accept');
  control.attempts.get('r2')!.release();
  const result = await marketplace.waitForFrame('r2', 'result');
  expect(marketplace.received.find((entry) => entry.frame === result)!.connection).toBe(2);
  expect(marketplace.framesFor('r1').map((frame) => frame.type)).toEqual(['accept']);
});

test('treats a connection without pings as dead and reconnects', async () => {
  await marketplace.close();
  marketplace = await new FakeMarketplace({ heartbeatIntervalMs: 100, ping: false }).start();
  agent = await startSolverAgent(configFor(marketplace), { logger });
  await agent.connected;
  await marketplace.waitFor(() => marketplace.connections >= 2, 'a reconnection after missed heartbeats');
});

test('stays connected while the server pings', async () => {
  await marketplace.close();
  marketplace = await new FakeMarketplace({ heartbeatIntervalMs: 100 }).start();
  agent = await startSolverAgent(configFor(marketplace), { logger });
  await agent.connected;
  // Well past three heartbeat intervals, answered by a round trip instead of a sleep.
  for (let i = 0; i < 6; i++) {
    marketplace.sendTask(`p${i}`, 'proxy_fetch', { url: `${fixtures.baseUrl}/notes.txt` });
    await marketplace.waitForFrame(`p${i}`, 'result');
    await new Promise((resolve) => setTimeout(resolve, 80));
  }
  expect(marketplace.connections).toBe(1);
});

test('graceful stop: drains first, refuses new tasks, finishes running ones, then closes', async () => {
  const control = controllableHandler();
  agent = await startSolverAgent(configFor(marketplace), { logger, handlers: { proxy_fetch: control.handler } });
  await agent.connected;
  marketplace.sendTask('g1', 'proxy_fetch', { url: 'http://example.com', id: 'g1' });
  await marketplace.waitForFrame('g1', 'accept');

  const stopped = agent.stop({ graceMs: 20_000 });
  await waitUntil(() => agent!.status().stopping, 'stopping');
  await marketplace.waitFor(() => marketplace.received.find((entry) => entry.frame.type === 'drain'), 'a drain frame');
  marketplace.sendTask('g2', 'proxy_fetch', { url: 'http://example.com', id: 'g2' });
  const refused = await marketplace.waitForFrame('g2', 'error');
  expect(refused).toMatchObject({ error: { type: 'shutting_down' }, retryable: true });

  control.attempts.get('g1')!.release();
  await stopped;
  expect(marketplace.framesFor('g1').map((frame) => frame.type)).toEqual(['accept', 'result']);
  await marketplace.waitFor(() => marketplace.closes.find((close) => close.connection === 1), 'the socket to close');
  expect(marketplace.closes[0]!.code).toBe(1000);
  expect(marketplace.connections).toBe(1);
  agent = undefined;
});

test('graceful stop: attempts still running after the grace period get a retryable error', async () => {
  const control = controllableHandler();
  agent = await startSolverAgent(configFor(marketplace), { logger, handlers: { proxy_fetch: control.handler } });
  await agent.connected;
  marketplace.sendTask('s1', 'proxy_fetch', { url: 'http://example.com', id: 's1' });
  await marketplace.waitForFrame('s1', 'accept');
  await agent.stop({ graceMs: 50 });
  expect(marketplace.framesFor('s1')).toEqual([
    { type: 'accept', attempt_id: 's1' },
    { type: 'error', attempt_id: 's1', error: { type: 'shutting_down', message: expect.any(String) }, retryable: true },
  ]);
  expect(control.attempts.get('s1')!.signal.aborted).toBe(true);
  agent = undefined;
});

test('an attempt past its deadline is aborted and reported', async () => {
  const control = controllableHandler();
  agent = await startSolverAgent(configFor(marketplace), { logger, handlers: { proxy_fetch: control.handler } });
  await agent.connected;
  marketplace.sendTask('d1', 'proxy_fetch', { url: 'http://example.com', id: 'd1' }, new Date(Date.now() + 100));
  const error = await marketplace.waitForFrame('d1', 'error');
  expect(error).toMatchObject({ error: { type: 'deadline_exceeded' }, retryable: true });
});

test('a handler is told its attempt\'s deadline (a browser task ends its settle wait before it)', async () => {
  let seen: number | undefined;
  const handler: TaskHandler = async (_payload, { deadline }) => {
    seen = deadline;
    return FETCHED;
  };
  agent = await startSolverAgent(configFor(marketplace), { logger, handlers: { proxy_fetch: handler } });
  await agent.connected;
  const deadline = new Date(Date.now() + 30_000);
  marketplace.sendTask('dl', 'proxy_fetch', { url: 'http://example.com' }, deadline);
  await marketplace.waitForFrame('dl', 'result');
  expect(seen).toBe(deadline.getTime());
});

test('unknown task types, malformed frames and protocol errors do not break the connection', async () => {
  agent = await startSolverAgent(configFor(marketplace), { logger });
  await agent.connected;
  marketplace.sendTask('u1', 'screenshot', { url: 'http://example.com' });
  expect(await marketplace.waitForFrame('u1', 'error')).toMatchObject({ error: { type: 'unsupported_task_type' }, retryable: true });
  marketplace.send({ type: 'task', attempt_id: 'u2', task_type: 'teleport' });
  expect(await marketplace.waitForFrame('u2', 'error')).toMatchObject({ error: { type: 'unsupported_task_type' } });
  marketplace.send({ type: 'protocol_error', message: 'unknown attempt' });
  marketplace.send({ type: 'something_new' });
  marketplace.sendTask('u3', 'proxy_fetch', { url: `${fixtures.baseUrl}/notes.txt` });
  await marketplace.waitForFrame('u3', 'result');
  expect(marketplace.connections).toBe(1);
});

test('a handler result that breaks the result schema is sent as an error, never as a result', async () => {
  agent = await startSolverAgent(configFor(marketplace), { logger, handlers: { proxy_fetch: async () => ({ content: 42 }) } });
  await agent.connected;
  marketplace.sendTask('i1', 'proxy_fetch', { url: 'http://example.com' });
  expect(await marketplace.waitForFrame('i1', 'error')).toMatchObject({ error: { type: 'invalid_result' } });
  expect(marketplace.framesFor('i1').map((frame) => frame.type)).toEqual(['accept', 'error']);
});

test('a refused API key rejects `connected` without retrying forever', async () => {
  agent = await startSolverAgent(testSolverConfig({ SOLVER_URL: marketplace.url, SOLVER_API_KEY: 'wrong', SOLVER_TASK_TYPES: 'proxy_fetch' }), { logger });
  await expect(agent.connected).rejects.toThrow(/401/);
  expect(marketplace.connections).toBe(0);
});

test('keeps retrying while the marketplace is unreachable, then connects', async () => {
  const port = Number(new URL(marketplace.url).port);
  await marketplace.close();
  agent = await startSolverAgent(configFor(marketplace, { url: `http://127.0.0.1:${port}` }), { logger });
  await new Promise((resolve) => setTimeout(resolve, 150));
  expect(agent.status().connected).toBe(false);
  marketplace = await new FakeMarketplace().start(port);
  await agent.connected;
  expect(agent.status().connected).toBe(true);
});

describe('chat_completion', () => {
  let upstream: FakeUpstream;
  beforeAll(async () => {
    upstream = await startFakeUpstream((_body, res) =>
      streamChunks(res, [
        { id: 'c', model: 'm-1', choices: [{ index: 0, delta: { role: 'assistant', content: 'Hi' }, finish_reason: null }] },
        { id: 'c', model: 'm-1', choices: [{ index: 0, delta: { tool_calls: [{ index: 0, id: 't1', function: { name: 'f', arguments: '{}' } }] }, finish_reason: null }] },
        { id: 'c', model: 'm-1', choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] },
        { id: 'c', model: 'm-1', choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } },
      ]),
    );
  });
  afterAll(() => upstream.close());

  test('streams chunk frames before the result and advertises a strong per-token capability', async () => {
    const config = configFor(marketplace, {}, { SOLVER_TASK_TYPES: 'chat_completion', CHAT_UPSTREAM_URL: upstream.baseUrl, CHAT_MODELS: 'm-1', CHAT_POINTS_PER_1K_TOKENS: '0.5' });
    agent = await startSolverAgent(config, { logger });
    await agent.connected;
    expect(marketplace.registrations[0]).toEqual([
      expect.objectContaining({ task_type: 'chat_completion', tier: 'strong', billing_type: 'per_token', fulfillment_path: 'provider_api', model_name: 'm-1', marginal_cost: '0.5' }),
    ]);
    marketplace.sendTask('chat1', 'chat_completion', { model: 'service/strong', messages: [{ role: 'user', content: 'hello' }] });
    await marketplace.waitForFrame('chat1', 'result');
    expect(marketplace.framesFor('chat1')).toEqual([
      { type: 'accept', attempt_id: 'chat1' },
      { type: 'chunk', attempt_id: 'chat1', delta: { role: 'assistant', content: 'Hi' } },
      { type: 'chunk', attempt_id: 'chat1', delta: { tool_calls: [{ index: 0, id: 't1', function: { name: 'f', arguments: '{}' } }] } },
      { type: 'result', attempt_id: 'chat1', result: { finish_reason: 'tool_calls', usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 }, model: 'm-1' } },
    ]);
  });
});
