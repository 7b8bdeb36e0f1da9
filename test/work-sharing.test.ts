import OpenAI from 'openai';
import { sql } from 'slonik';
import { z } from 'zod';
import { EXPLORATION_SHARE, NEWCOMER_EVIDENCE } from '../src/db/matching';
import { FakeSolver, strongChat, suiteSolvers, talker, waitFor } from './support/fake-solver';
import { parsePrometheusText, sampleValue } from './support/prometheus-text';
import { ADMIN_KEY, api, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * Work shared among equal offers (docs/queue.md, "Sharing work"): among the cheapest offers a task fits,
 * a weighted draw by score and free slots, a newcomer's exploration share, and the strict orders a
 * client may ask for with `provider.sort`. Two API nodes, so that solvers held on different nodes share too.
 */
describe('work sharing', () => {
  jest.setTimeout(240_000);
  let stack: TestStack;
  let client: Awaited<ReturnType<typeof registerAccount>>;
  const startSolver = suiteSolvers(() => stack.url);

  beforeAll(async () => {
    // One client sends every test's tasks and polls them: the per-account limit is not what these tests measure.
    stack = await startTestStack({ apiNodes: 2, env: { RATE_LIMIT_PER_MINUTE: '100000' } });
    client = await registerAccount(stack.url, '1000000');
  });
  afterAll(async () => {
    await stack?.close();
  });

  /** Runs `total` calls of `once`, `concurrency` at a time. */
  async function inParallel(total: number, concurrency: number, once: (i: number) => Promise<void>) {
    let next = 0;
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < total) await once(next++);
      }),
    );
  }

  const fetchOnce = async () => {
    const answer = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/share' } });
    expect(answer.status).toBe(200);
  };

  /** A web task created with POST /v1/tasks (with `extra` fields), once it has completed: the solver that served it. */
  async function taskServedBy(extra: Record<string, unknown> = {}) {
    const created = await api(stack.url, 'POST', '/v1/tasks', {
      headers: client.auth,
      body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com/strict' }, max_price_points: 5, ...extra },
    });
    expect(created.status).toBe(200);
    const done = await waitFor(async () => {
      const task = await api(stack.url, 'GET', `/v1/tasks/${created.json.task_id}`, { headers: client.auth });
      return task.json.status === 'completed' && task.json;
    }, 30_000, 25);
    return done.solver_id as string;
  }

  // Solvers connected to the second API node, closed after each test like startSolver's.
  let elsewhere: FakeSolver[] = [];
  afterEach(async () => {
    await Promise.all(elsewhere.map((solver) => solver.close()));
    await Promise.all(elsewhere.map((solver) => solver.offline(stack.url)));
    elsewhere = [];
  });

  /** A fetch solver with `slots` slots at `price`, connected to API node `node`. */
  async function fetcher(price: string, slots: number, node = 0) {
    const options = { price, maxConcurrent: slots, taskTypes: ['proxy_fetch'] };
    if (node === 0) return startSolver(options);
    const solver = await FakeSolver.start(stack.api[node].url, options);
    elsewhere.push(solver);
    return solver;
  }

  /** Gives a solver a record for a task type as if it had served `successes` tasks just now (and a measured latency). */
  async function seedRecord(solver: FakeSolver, taskType: string, successes: number, latencyMs: number | null = null) {
    await stack.db.query(sql.unsafe`
      INSERT INTO solver_reputation (solver_id, task_type, successes, latency_ms) VALUES (${solver.solverId}, ${taskType}, ${successes}, ${latencyMs})
      ON CONFLICT (solver_id, task_type) DO UPDATE SET successes = EXCLUDED.successes, failures = 0, latency_ms = EXCLUDED.latency_ms, decayed_at = now()`);
  }

  const served = (solver: FakeSolver) => solver.received.length;

  test('two equal solvers on two API nodes share the work: each serves at least a quarter of 100 tasks', async () => {
    const a = await fetcher('1', 4, 0);
    const b = await fetcher('1', 4, 1);
    await inParallel(100, 2, fetchOnce);
    expect(served(a) + served(b)).toBe(100);
    expect(served(a)).toBeGreaterThanOrEqual(25);
    expect(served(b)).toBeGreaterThanOrEqual(25);
    // The gauges count every recent attempt of the type (earlier suites' too): only their bounds are sure here.
    const metrics = parsePrometheusText((await api(stack.url, 'GET', '/metrics', { headers: { 'X-Admin-API-Key': ADMIN_KEY } })).text);
    const proxyFetch = { task_type: 'proxy_fetch' };
    expect(sampleValue(metrics, 'marketplace_work_solvers', proxyFetch)).toBeGreaterThanOrEqual(2);
    expect(sampleValue(metrics, 'marketplace_work_fairness_ratio', proxyFetch)).toBeGreaterThan(0);
    expect(sampleValue(metrics, 'marketplace_work_fairness_ratio', proxyFetch)).toBeLessThanOrEqual(1);
    expect(sampleValue(metrics, 'marketplace_work_top_solver_share_ratio', proxyFetch)).toBeLessThan(1);
  });

  test('a newcomer beside an incumbent with a long record and eight times its slots earns its record within 120 tasks', async () => {
    const incumbent = await fetcher('1', 8);
    await seedRecord(incumbent, 'proxy_fetch', 30);
    const newcomer = await fetcher('1', 1);
    // By weight alone (score × free slots) the newcomer would get about 6%; as a newcomer it gets at least
    // EXPLORATION_SHARE until it has NEWCOMER_EVIDENCE tasks of evidence: about 50 tasks on average.
    await inParallel(120, 1, fetchOnce);
    expect(served(newcomer)).toBeGreaterThanOrEqual(NEWCOMER_EVIDENCE);
    expect(served(incumbent)).toBeGreaterThan(served(newcomer));
    expect(EXPLORATION_SHARE).toBe(0.2);
  });

  test('a solver that claims a thousand slots weighs as one with eight: it does not take the market by its claim', async () => {
    const claimer = await fetcher('1', 1000);
    const honest = await fetcher('1', 4);
    // Weighed by every free slot, the claimer would win 1000 draws in 1004; capped, 8 in 12.
    await inParallel(60, 1, fetchOnce);
    expect(served(honest)).toBeGreaterThanOrEqual(8);
    expect(served(claimer) + served(honest)).toBe(60);
  });

  test('a cheaper offer takes every task it has room for, whatever the dearer ones\' record', async () => {
    const cheap = await fetcher('1', 4);
    const dear = await fetcher('2', 4);
    await seedRecord(dear, 'proxy_fetch', 50);
    await inParallel(40, 4, fetchOnce);
    expect(served(cheap)).toBe(40);
    expect(served(dear)).toBe(0);
  });

  test('provider.sort "price" on a web task restores the strict order: the better record takes every task', async () => {
    const incumbent = await fetcher('1', 4);
    await seedRecord(incumbent, 'proxy_fetch', 30);
    const newcomer = await fetcher('1', 4);
    const solvers = new Set<string>();
    await inParallel(30, 2, async () => void solvers.add(await taskServedBy({ provider: { sort: 'price' } })));
    expect([...solvers]).toEqual([incumbent.solverId]);
    expect(served(newcomer)).toBe(0);
  });

  test('provider.sort "latency" takes the lowest measured latency over a lower price; "throughput" the most tasks per second', async () => {
    const cheapSlow = await fetcher('1', 1);
    await seedRecord(cheapSlow, 'proxy_fetch', 30, 5000);
    const dearFast = await fetcher('2', 8);
    await seedRecord(dearFast, 'proxy_fetch', 30, 10);
    const unmeasured = await fetcher('1', 8);
    // 1 slot at 5 s is 0.2 tasks a second; 8 at 10 ms (and then at what this machine measures), hundreds;
    // 8 unmeasured (taken as 1 s each), 8. An unmeasured latency sorts after every measured one.
    for (const sort of ['latency', 'throughput']) {
      for (let i = 0; i < 6; i++) expect(await taskServedBy({ provider: { sort } })).toBe(dearFast.solverId);
    }
    expect(served(unmeasured)).toBe(0);
    // Without a preference the cheaper offers share the work.
    const shared = new Set<string>();
    for (let i = 0; i < 10; i++) shared.add(await taskServedBy());
    expect(shared.has(dearFast.solverId)).toBe(false);
  });

  test('provider.sort is validated: an unknown order or an unknown provider field on a web task is 422', async () => {
    for (const provider of [{ sort: 'cheapest' }, { sort: 'price', order: ['x'] }]) {
      const answer = await api(stack.url, 'POST', '/v1/tasks', {
        headers: client.auth,
        body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com/v' }, provider },
      });
      expect(answer.status).toBe(422);
    }
    const spec = await api(stack.url, 'GET', '/openapi.json');
    expect(spec.json.components.schemas.ProviderPreferences.properties.sort.enum).toEqual(['price', 'latency', 'throughput']);
  });

  test('a chat asking provider.sort "price" through the OpenAI SDK goes to the better record; other provider fields reach the solver', async () => {
    const incumbent = await startSolver({ behaviour: talker(['hi']), capabilities: strongChat() });
    await seedRecord(incumbent, 'chat_completion', 30);
    const newcomer = await startSolver({ behaviour: talker(['hi']), capabilities: strongChat() });
    const openai = new OpenAI({ apiKey: client.api_key, baseURL: `${stack.url}/v1`, maxRetries: 0 });
    for (let i = 0; i < 12; i++) {
      // extra_body in the Python SDK; the JavaScript SDK sends fields it does not know as they are.
      await openai.chat.completions.create({
        model: 'service/strong',
        messages: [{ role: 'user', content: 'hi' }],
        provider: { sort: 'price', data_collection: 'deny' },
      } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
    }
    expect(served(incumbent)).toBe(12);
    expect(served(newcomer)).toBe(0);
    expect(incumbent.received[0].payload.provider).toEqual({ sort: 'price', data_collection: 'deny' });
    const refused = await openai.chat.completions
      .create({ model: 'service/strong', messages: [{ role: 'user', content: 'hi' }], provider: { sort: 'fastest' } } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)
      .catch((error) => error);
    expect(refused).toBeInstanceOf(OpenAI.APIError);
    expect(refused.status).toBe(422);
  });

  test('sharing never reaches a quarantined solver, nor one that already failed the task', async () => {
    const honest = await fetcher('1', 4);
    const quarantined = await fetcher('1', 4);
    await stack.db.query(sql.unsafe`
      INSERT INTO solver_quarantines (solver_id, task_type, reason, evidence) VALUES (${quarantined.solverId}, 'proxy_fetch', 'test', '{}'::jsonb)`);
    const failing = await startSolver({ price: '1', maxConcurrent: 4, taskTypes: ['proxy_fetch'], behaviour: 'error' });
    await inParallel(40, 2, fetchOnce);
    expect(served(quarantined)).toBe(0);
    expect(served(honest)).toBe(40);
    // The failing solver took some first attempts (or none, once its failures put it below the threshold),
    // and never a second attempt of a task it had failed.
    const twice = await stack.db.oneFirst(sql.type(z.object({ n: z.number() }))`
      SELECT count(*)::int AS n FROM (
        SELECT task_id FROM task_attempts WHERE solver_id = ${failing.solverId} GROUP BY task_id HAVING count(*) > 1) x`);
    expect(twice).toBe(0);
    await stack.db.query(sql.unsafe`UPDATE solver_quarantines SET cleared_at = now() WHERE solver_id = ${quarantined.solverId}`);
  });
});
