import fs from 'node:fs';
import { getBalance } from '../src/db/ledger';
import { solverJsonSchemas } from '../src/schemas/json-schema';
import { SOLVER_SCHEMAS_FILE, solverSchemasText } from '../scripts/solver-schemas';
import { FakeSolver, SAMPLE_RESULTS, waitFor } from './support/fake-solver';
import { api, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * What solver authors get besides tasks: the market description, the protocol's JSON Schema, the
 * `result_rejected` feedback, the solver's own error type kept for the client, `drain`, and test mode.
 */

const FAST = { ACCEPT_TIMEOUT_MS: '800', ATTEMPT_TIMEOUT_SECONDS: '3', HEARTBEAT_INTERVAL_MS: '1000', PLATFORM_FEE_PERCENT: '10', STRONG_MODELS: 'gpt-4o,house-strong' };

let stack: TestStack;
let solvers: FakeSolver[] = [];
const solver = async (options: Parameters<typeof FakeSolver.start>[1] = {}) => {
  const started = await FakeSolver.start(stack.url, options);
  solvers.push(started);
  return started;
};

beforeAll(async () => {
  stack = await startTestStack({ env: FAST });
});
afterEach(async () => {
  await Promise.all(solvers.map((s) => s.close()));
  solvers = [];
});
afterAll(async () => {
  await stack.close();
});

const stats = async (s: FakeSolver) => (await api(stack.url, 'GET', '/v1/solver/stats', { headers: { Authorization: `Bearer ${s.apiKey}` } })).json;

describe('market description and schemas', () => {
  test('GET /v1/solver/market names the allowlist, the fee, the default maximum prices, the protocol, the timeouts and the server time', async () => {
    const account = await registerAccount(stack.url);
    const market = await api(stack.url, 'GET', '/v1/solver/market', { headers: account.auth });
    expect(market.status).toBe(200);
    expect(market.json).toMatchObject({
      protocol_version: 1,
      platform_fee_percent: '10',
      strong_models: ['gpt-4o', 'house-strong'],
      task_types: {
        // No canaries in this stack: no check, so no ceiling on prices.
        proxy_fetch: { default_max_price_points: '10', strong_tier_only: false, check_price_ceiling_points: null },
        web_search: { default_max_price_points: '10', strong_tier_only: false, check_price_ceiling_points: null },
        screenshot: { default_max_price_points: '10', strong_tier_only: false },
        page_snapshot: { default_max_price_points: '10', strong_tier_only: false },
        chat_completion: { default_max_price_points: '100', strong_tier_only: true },
      },
      accept_timeout_ms: 800,
      attempt_timeout_seconds: 3,
      heartbeat_interval_ms: 1000,
      max_task_attempts: 3,
      max_frame_bytes: 32 * 1024 * 1024,
    });
    expect(Math.abs(Date.parse(market.json.server_time) - Date.now())).toBeLessThan(5000);
    const anonymous = await api(stack.url, 'GET', '/v1/solver/market');
    expect(anonymous.status).toBe(401);
    expect(anonymous.json.error.type).toBe('authentication_required');
  });

  test('GET /v1/solver/schemas serves the JSON Schema of every frame and result type, the same as docs/solver-schemas.json', async () => {
    const account = await registerAccount(stack.url);
    const served = await api(stack.url, 'GET', '/v1/solver/schemas', { headers: account.auth });
    expect(served.status).toBe(200);
    expect(served.json).toEqual(solverJsonSchemas());
    expect(Object.keys(served.json.server_frames).sort()).toEqual(['cancel', 'draining', 'protocol_error', 'result_rejected', 'task', 'test_result', 'welcome']);
    expect(Object.keys(served.json.solver_frames).sort()).toEqual(['accept', 'chunk', 'drain', 'error', 'result', 'test_task']);
    expect(Object.keys(served.json.results).sort()).toEqual(['chat_completion', 'page_snapshot', 'proxy_fetch', 'screenshot', 'web_search']);
    expect(served.json.$defs.ProxyFetchResult.required).toEqual(['url', 'final_url', 'status_code', 'content_type', 'content']);
    expect(served.json.$defs.ErrorFrame.required).not.toContain('retryable');
    // Every reference resolves inside the document.
    for (const ref of JSON.stringify(served.json).match(/"\$ref":"[^"]+"/g) ?? []) {
      const name = ref.slice('"$ref":"#/$defs/'.length, -1);
      expect(served.json.$defs[name]).toBeDefined();
    }
    expect(fs.readFileSync(SOLVER_SCHEMAS_FILE, 'utf8')).toBe(solverSchemasText()); // else: npm run schemas
  });

  test('both routes are in the OpenAPI document with the errors they answer', async () => {
    const document = (await api(stack.url, 'GET', '/openapi.json')).json;
    for (const path of ['/v1/solver/market', '/v1/solver/schemas']) {
      expect(Object.keys(document.paths[path].get.responses).sort()).toEqual(['200', '401', '429']);
    }
    expect(document.components.schemas.SolverMarket.required).toEqual(expect.arrayContaining(['strong_models', 'platform_fee_percent', 'task_types', 'server_time']));
  });

  test('welcome carries the server time', async () => {
    const s = await solver({ taskTypes: ['proxy_fetch'] });
    const welcome = s.frames.find((frame) => frame.type === 'welcome')!;
    expect(Math.abs(Date.parse(welcome.server_time) - Date.now())).toBeLessThan(5000);
  });
});

describe('result_rejected and the solver error type', () => {
  test('a result that fails its schema is answered with result_rejected and its issues, and is not paid', async () => {
    const bad = await solver({ taskTypes: ['proxy_fetch'], price: '0.5', behaviour: 'invalid_result' });
    await solver({ taskTypes: ['proxy_fetch'], price: '2' });
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/rejected' } });
    expect(fetched.status).toBe(200);
    const rejected = await bad.nextFrame((frame) => frame.type === 'result_rejected');
    expect(rejected.attempt_id).toBe(bad.received[0].attempt_id);
    expect(rejected.issues).toEqual(expect.arrayContaining([{ type: 'missing', loc: ['result', 'url'], msg: 'Field required' }, expect.objectContaining({ loc: ['result', 'content_type'] })]));
    expect((await getBalance(stack.db, bad.solverId))?.lifetime_earned_points).toBe('0');
  });

  test("a solver's own error type reaches the client as error.solver_error_type, on the task and in the 502", async () => {
    await solver({
      taskTypes: ['proxy_fetch'],
      price: '0.5',
      behaviour: (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        self.send({ type: 'error', attempt_id: frame.attempt_id, error: { type: 'page_not_found', message: 'the page does not exist' }, retryable: false });
      },
    });
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/gone' } });
    expect(fetched.status).toBe(502);
    expect(fetched.json.error).toMatchObject({ type: 'solver_failed', solver_error_type: 'page_not_found', task_id: expect.any(String) });
    const record = (await api(stack.url, 'GET', `/v1/tasks/${fetched.json.error.task_id}`, { headers: client.auth })).json;
    expect(record.error).toMatchObject({ type: 'solver_failed', solver_error_type: 'page_not_found', message: expect.stringContaining('the page does not exist') });
  });

  test('a task whose attempts all failed keeps the last solver error type; failures the solver did not report carry none', async () => {
    await solver({ taskTypes: ['proxy_fetch'], price: '0.5', behaviour: 'never_accept' });
    await solver({ taskTypes: ['proxy_fetch'], price: '0.6', behaviour: 'error' });
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/both-fail' } });
    expect(fetched.status).toBe(502);
    expect(fetched.json.error.solver_error_type).toBe('upstream_failed');

    for (const s of solvers) await s.close();
    solvers = [];
    await solver({ taskTypes: ['proxy_fetch'], price: '0.5', behaviour: 'never_accept' });
    const silent = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/silent' } });
    expect(silent.status).toBe(502);
    expect(silent.json.error.solver_error_type).toBeUndefined();
  });
});

describe('drain', () => {
  test('after drain the solver is offered nothing new, its running attempt still completes and is paid, and a reconnect undrains it', async () => {
    let release: (() => void) | undefined;
    const draining = await solver({
      taskTypes: ['proxy_fetch'],
      price: '0.5',
      behaviour: (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        release = () => self.send({ type: 'result', attempt_id: frame.attempt_id, result: SAMPLE_RESULTS.proxy_fetch(frame.payload) });
      },
    });
    const other = await solver({ taskTypes: ['proxy_fetch'], price: '2' });
    const client = await registerAccount(stack.url, '100');
    const running = api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/running' } });
    await waitFor(() => release);

    const from = draining.frames.length;
    draining.send({ type: 'drain' });
    expect(await draining.nextFrame((frame) => frame.type === 'draining', from)).toEqual({ type: 'draining', running_attempts: 1 });
    expect(await stats(draining)).toMatchObject({ connected: true, draining: true, active_attempts: 1 });

    const next = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/after-drain' } });
    expect(next.status).toBe(200);
    expect(other.received.map((frame) => frame.payload.url)).toEqual(['https://example.com/after-drain']);
    expect(draining.received).toHaveLength(1);

    release!();
    expect((await running).status).toBe(200);
    expect((await getBalance(stack.db, draining.solverId))?.lifetime_earned_points).toBe('0.45');

    await draining.close();
    await draining.connect();
    expect(await stats(draining)).toMatchObject({ connected: true, draining: false });
  });

  test('with only draining solvers online, a convenience call is 503 no_solver_available', async () => {
    const only = await solver({ taskTypes: ['screenshot'], price: '0.5' });
    only.send({ type: 'drain' });
    await only.nextFrame((frame) => frame.type === 'draining');
    const client = await registerAccount(stack.url, '100');
    const shot = await api(stack.url, 'POST', '/v1/screenshot', { headers: client.auth, body: { url: 'https://example.com/' } });
    expect(shot.status).toBe(503);
    expect(shot.json.error.type).toBe('no_solver_available');
  });
});

describe('test mode', () => {
  test('a test task comes marked as a test, with a payload a client could send, and a valid result passes; nothing is stored or paid', async () => {
    const s = await solver({ taskTypes: ['proxy_fetch'] });
    const before = await stats(s);
    for (const taskType of ['proxy_fetch', 'web_search', 'screenshot', 'page_snapshot'] as const) {
      const from = s.frames.length;
      s.send({ type: 'test_task', task_type: taskType });
      const task = await s.nextFrame((frame) => frame.type === 'task', from);
      expect(task).toMatchObject({ test: true, task_type: taskType, task_id: expect.stringMatching(/^test_/), attempt_id: `${task.task_id}.a1` });
      const verdict = await s.nextFrame((frame) => frame.type === 'test_result', from);
      expect(verdict).toEqual({ type: 'test_result', attempt_id: task.attempt_id, task_type: taskType, passed: true, outcome: 'passed' });
    }
    expect(s.received.find((frame) => frame.task_type === 'web_search')?.payload).toEqual({ query: 'task marketplace solver', count: 3 });
    const after = await stats(s);
    expect(after).toMatchObject({ attempts: before.attempts, completed: before.completed, failed: before.failed, lifetime_earned_points: '0' });
    const record = await api(stack.url, 'GET', `/v1/tasks/${s.received[0].task_id}`, { headers: { Authorization: `Bearer ${s.apiKey}` } });
    expect(record.status).toBe(404);
  });

  test('a test task reports an invalid result with its issues, a solver error, a missing accept, and refuses a bad payload', async () => {
    const s = await solver({ taskTypes: ['proxy_fetch'], behaviour: 'invalid_result' });
    let from = s.frames.length;
    s.send({ type: 'test_task', task_type: 'proxy_fetch', payload: { url: 'https://example.org/mine', raw_html: true } });
    const task = await s.nextFrame((frame) => frame.type === 'task', from);
    expect(task.payload).toEqual({ url: 'https://example.org/mine', raw_html: true });
    const rejected = await s.nextFrame((frame) => frame.type === 'result_rejected', from);
    const invalid = await s.nextFrame((frame) => frame.type === 'test_result', from);
    expect(invalid).toMatchObject({ passed: false, outcome: 'invalid_result', issues: rejected.issues, error: { type: 'invalid_result' } });
    expect(invalid.issues).toContainEqual({ type: 'missing', loc: ['result', 'final_url'], msg: 'Field required' });

    s.behaviour = 'error';
    from = s.frames.length;
    s.send({ type: 'test_task', task_type: 'web_search' });
    expect(await s.nextFrame((frame) => frame.type === 'test_result', from)).toMatchObject({
      passed: false,
      outcome: 'error',
      error: { type: 'upstream_failed', message: 'scripted failure' },
      retryable: true,
    });

    s.behaviour = 'never_accept';
    from = s.frames.length;
    s.send({ type: 'test_task', task_type: 'screenshot' });
    const cancel = await s.nextFrame((frame) => frame.type === 'cancel', from);
    expect(cancel.reason).toBe('accept_timeout');
    expect(await s.nextFrame((frame) => frame.type === 'test_result', from)).toMatchObject({ passed: false, outcome: 'accept_timeout', error: { type: 'accept_timeout' } });

    from = s.frames.length;
    s.send({ type: 'test_task', task_type: 'web_search', payload: { query: '', count: 50 } });
    const refused = await s.nextFrame((frame) => frame.type === 'test_result', from);
    expect(refused).toMatchObject({ attempt_id: null, passed: false, outcome: 'refused', error: { type: 'invalid_payload' } });
    expect(refused.error.message).toContain('payload.count');

    s.sendUnchecked({ type: 'test_task', task_type: 'telepathy' });
    await waitFor(() => s.protocolErrors.some((message) => message.includes('task_type')));
    expect(await stats(s)).toMatchObject({ attempts: 0, failed: 0 });
  });

  test('a chat test task counts the chunks streamed before the result', async () => {
    const s = await solver({ taskTypes: ['proxy_fetch'] });
    s.behaviour = (frame, self) => {
      self.send({ type: 'accept', attempt_id: frame.attempt_id });
      for (const word of ['Hello', ' there']) self.send({ type: 'chunk', attempt_id: frame.attempt_id, delta: { content: word } });
      self.send({ type: 'result', attempt_id: frame.attempt_id, result: { finish_reason: 'stop', usage: { prompt_tokens: 3, completion_tokens: 2 } } });
    };
    s.send({ type: 'test_task', task_type: 'chat_completion' });
    const task = await s.nextFrame((frame) => frame.type === 'task');
    expect(task.payload).toMatchObject({ model: 'service/strong', messages: [{ role: 'user', content: expect.any(String) }] });
    expect(await s.nextFrame((frame) => frame.type === 'test_result')).toMatchObject({ passed: true, outcome: 'passed', chunks: 2 });
  });

  test('a draining connection refuses test tasks', async () => {
    const s = await solver({ taskTypes: ['proxy_fetch'] });
    s.send({ type: 'drain' });
    await s.nextFrame((frame) => frame.type === 'draining');
    s.send({ type: 'test_task', task_type: 'proxy_fetch' });
    expect(await s.nextFrame((frame) => frame.type === 'test_result')).toMatchObject({ passed: false, outcome: 'refused', error: { type: 'solver_draining' } });
    expect(s.received).toHaveLength(0);
  });
});
