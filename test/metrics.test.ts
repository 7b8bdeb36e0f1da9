import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import { sql } from 'slonik';
import { createDb, type Db } from '../src/db/pool';
import { z } from 'zod';
import { FakeSolver, strongChat, talker, waitFor, type TaskFrame } from './support/fake-solver';
import { spawnNode, type NodeProcess } from './support/processes';
import { parsePrometheusText, sampleValue, type Exposition } from './support/prometheus-text';
import { ADMIN_KEY, api, QUIET_TRUST_ENV, registerAccount, startTestStack, testEndpoints } from './support/stack';

const METRICS_TOKEN = 'metrics-token-for-tests';

/** Two API processes and a worker process, each serving its own /metrics, as Prometheus scrapes them. */
describe('Prometheus metrics of a deployment of several processes', () => {
  const endpoints = testEndpoints();
  const env = {
    DATABASE_URL: endpoints.databaseUrl,
    TEMPORAL_ADDRESS: endpoints.temporalAddress,
    // A queue of its own, so that no other test's worker takes these workflows.
    TEMPORAL_TASK_QUEUE: `metrics-${crypto.randomBytes(4).toString('hex')}`,
    ADMIN_API_KEY: ADMIN_KEY,
    METRICS_TOKEN,
    WORKER_METRICS_PORT: '0',
    HEARTBEAT_INTERVAL_MS: '1000',
    ACCEPT_TIMEOUT_MS: '2000',
    HOST: '127.0.0.1',
    LOCAL_SOLVER: 'off',
    ...QUIET_TRUST_ENV,
    // Solvers that fail stay eligible: these tests count what their failures cause.
    TRUST_MIN_SCORE: '0',
    WORKFLOW_BUNDLE_PATH: process.env.WORKFLOW_BUNDLE_PATH ?? '',
    API_RUNS_WORKFLOWS: 'false',
  };
  let apiA: NodeProcess;
  let apiB: NodeProcess;
  let worker: NodeProcess;
  let db: Db;
  const solvers: FakeSolver[] = [];
  const logged = (node: NodeProcess, message: string) => {
    const line = node.output.join('').split('\n').find((entry) => entry.includes(`"msg":"${message}"`));
    return JSON.parse(line!) as { url: string };
  };
  const urlA = () => logged(apiA, 'api listening').url;
  const urlB = () => logged(apiB, 'api listening').url;
  const workerMetrics = () => logged(worker, 'worker metrics listening').url;
  const scrape = async (url: string): Promise<Exposition> => {
    const response = await fetch(url, { headers: { Authorization: `Bearer ${METRICS_TOKEN}` } });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toContain('text/plain');
    return parsePrometheusText(await response.text());
  };
  const scrapeAll = () => Promise.all([scrape(`${urlA()}/metrics`), scrape(`${urlB()}/metrics`), scrape(workerMetrics())]);
  /** A counter summed over every process, as `sum(...)` in Prometheus. */
  const total = (expositions: Exposition[], name: string, labels: Record<string, string>) => expositions.reduce((sum, exposition) => sum + sampleValue(exposition, name, labels), 0);

  beforeAll(async () => {
    [apiA, apiB, worker] = await Promise.all([
      spawnNode('api', { ...env, PORT: '0', NODE_ID: `node-a-${env.TEMPORAL_TASK_QUEUE}` }, /api listening/),
      spawnNode('api', { ...env, PORT: '0', NODE_ID: `node-b-${env.TEMPORAL_TASK_QUEUE}` }, /api listening/),
      spawnNode('worker', env, /temporal worker started/),
    ]);
    db = await createDb(endpoints.databaseUrl);
  }, 120_000);

  afterAll(async () => {
    await Promise.all(solvers.map((solver) => solver.close()));
    await Promise.all([apiA?.kill(), apiB?.kill(), worker?.kill()]);
    await db?.query(sql.unsafe`DELETE FROM api_nodes WHERE node_id LIKE ${`%${env.TEMPORAL_TASK_QUEUE}`}`);
    await db?.end();
  });

  test('counters summed over every process move by exactly the tasks run; requests, solvers and chat timings are reported', async () => {
    const good = await FakeSolver.start(urlA(), { taskTypes: ['proxy_fetch'], price: '2' });
    solvers.push(good);
    const client = await registerAccount(urlB(), '500');
    const before = await scrapeAll();
    const fetchVia = (url: string, path = 'page') => api(url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: `https://example.com/${path}` } });

    // Five tasks through either node, all done by the one solver (on node A).
    for (const url of [urlB(), urlB(), urlB(), urlA(), urlA()]) expect((await fetchVia(url)).status).toBe(200);
    // A cheaper solver that fails: the next task goes to it first, then is reassigned to the good one.
    const flaky = await FakeSolver.start(urlA(), { taskTypes: ['proxy_fetch'], price: '1', behaviour: 'error' });
    solvers.push(flaky);
    const reassigned = await fetchVia(urlA());
    expect(reassigned.status).toBe(200);
    expect(flaky.received).toHaveLength(1);
    // Then it refuses a task outright (not retryable): the task fails without another attempt.
    flaky.behaviour = (frame: TaskFrame, self: FakeSolver) => {
      self.send({ type: 'accept', attempt_id: frame.attempt_id });
      self.send({ type: 'error', attempt_id: frame.attempt_id, error: { type: 'target_refused', message: 'scripted refusal' }, retryable: false });
    };
    expect((await fetchVia(urlA(), 'refused')).status).toBe(502);
    const polled = await api(urlA(), 'GET', `/v1/tasks/${reassigned.json.task_id}`, { headers: client.auth });
    expect(polled.json.attempts).toHaveLength(2);

    // A streamed chat: its solver on node A, its client on node B, so every delta crosses the NOTIFY relay.
    const chatter = await FakeSolver.start(urlA(), { behaviour: talker(['one ', 'two ', 'three']), capabilities: strongChat() });
    solvers.push(chatter);
    const chat = await fetch(`${urlB()}/v1/chat/completions`, {
      method: 'POST',
      headers: { ...client.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'service/strong', messages: [{ role: 'user', content: 'count' }], stream: true }),
    });
    expect(await chat.text()).toContain('data: [DONE]');

    const after = await scrapeAll();
    const moved = (name: string, labels: Record<string, string>) => total(after, name, labels) - total(before, name, labels);
    expect(moved('marketplace_tasks_created_total', { task_type: 'proxy_fetch' })).toBe(7);
    expect(moved('marketplace_tasks_finished_total', { task_type: 'proxy_fetch', status: 'completed' })).toBe(6);
    expect(moved('marketplace_tasks_finished_total', { task_type: 'proxy_fetch', status: 'failed' })).toBe(1);
    expect(moved('marketplace_tasks_finished_total', { task_type: 'proxy_fetch', status: 'timed_out' })).toBe(0);
    expect(moved('marketplace_attempts_reassigned_total', { task_type: 'proxy_fetch' })).toBe(1);
    expect(moved('marketplace_tasks_created_total', { task_type: 'chat_completion' })).toBe(1);
    expect(moved('marketplace_tasks_finished_total', { task_type: 'chat_completion', status: 'completed' })).toBe(1);

    const [a, b, workerFigures] = after;
    // Requests by route pattern and status, on the node that answered them.
    const requests = (exposition: Exposition, labels: Record<string, string>) => sampleValue(exposition, 'marketplace_http_requests_total', labels);
    expect(requests(b, { method: 'POST', route: '/v1/fetch', status: '200' })).toBe(3);
    expect(requests(a, { method: 'POST', route: '/v1/fetch', status: '200' })).toBe(3);
    expect(requests(a, { method: 'POST', route: '/v1/fetch', status: '502' })).toBe(1);
    expect(requests(a, { method: 'GET', route: '/v1/tasks/:task_id', status: '200' })).toBe(1);
    expect(sampleValue(a, 'marketplace_http_request_duration_seconds_count', { method: 'POST', route: '/v1/fetch', status: '200' })).toBe(3);
    expect(a.types.get('marketplace_http_request_duration_seconds')).toBe('histogram');
    // No id ever becomes a label.
    for (const exposition of after) for (const sample of exposition.samples) for (const value of Object.values(sample.labels)) expect(value).not.toMatch(/(task|chat|acct)_[0-9a-f]{8}/);

    // Sockets are counted where they are held; the queue figures are the database's, the same everywhere.
    expect(sampleValue(a, 'marketplace_solvers_connected')).toBe(3);
    expect(sampleValue(b, 'marketplace_solvers_connected')).toBe(0);
    // The database is shared with other suites, whose tasks may still wait and come and go while this
    // reads: the gauge is the database's count at the moment of the scrape, between a count just before
    // and one just after it.
    // (Unfinished tasks are those with an open hold: other suites also write task rows of their own.)
    const queued = () =>
      db.oneFirst(sql.type(z.object({ n: z.number() }))`
        SELECT count(*)::int AS n FROM tasks t JOIN holds h ON h.hold_id = t.task_id AND h.status = 'open' WHERE t.task_type = 'proxy_fetch' AND t.status = 'queued'`);
    const waiting = async () => {
      const before = await queued();
      const figure = sampleValue(await scrape(`${urlA()}/metrics`), 'marketplace_tasks_waiting', { task_type: 'proxy_fetch' });
      const after = await queued();
      return figure >= Math.min(before, after) && figure <= Math.max(before, after);
    };
    expect(await waitFor(waiting, 30_000)).toBe(true);
    expect(sampleValue(a, 'marketplace_solver_free_slots', { task_type: 'proxy_fetch' })).toBeGreaterThanOrEqual(16);
    expect(sampleValue(workerFigures, 'marketplace_solver_free_slots', { task_type: 'chat_completion' })).toBe(sampleValue(a, 'marketplace_solver_free_slots', { task_type: 'chat_completion' }));

    // The chat's time to first token and its deltas' relay are measured on the client's node.
    expect(sampleValue(b, 'marketplace_chat_time_to_first_token_seconds_count') - sampleValue(before[1], 'marketplace_chat_time_to_first_token_seconds_count')).toBe(1);
    expect(sampleValue(b, 'marketplace_chat_relay_seconds_count', { path: 'notify' })).toBeGreaterThanOrEqual(3);
    // Process figures come with every scrape.
    expect(workerFigures.types.get('process_cpu_seconds_total')).toBe('counter');
  });

  test('every process\'s /metrics passes `promtool check metrics`, as a deployment gating on it runs it', async () => {
    for (const url of [`${urlA()}/metrics`, workerMetrics()]) {
      const response = await fetch(url, { headers: { Authorization: `Bearer ${METRICS_TOKEN}` } });
      const text = await response.text();
      expect(text).toContain('nodejs_active_handles');
      const check = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
      if (check.error) throw new Error(`promtool did not run (${check.error.message}): \`npm test\` installs it (Debian package prometheus)`);
      expect({ status: check.status, output: check.stdout + check.stderr }).toEqual({ status: 0, output: '' });
    }
  });

  test('a task whose only solver fails is not counted as reassigned: the counter moves only when another solver takes the task', async () => {
    // The only screenshot solver, failing as it would on a target that cannot be reached.
    const lonely = await FakeSolver.start(urlA(), { taskTypes: ['screenshot'], behaviour: 'error' });
    solvers.push(lonely);
    const client = await registerAccount(urlB(), '100');
    const before = await scrapeAll();
    for (let index = 0; index < 3; index += 1) {
      const shot = await api(urlB(), 'POST', '/v1/screenshot', { headers: client.auth, body: { url: `https://unreachable.example/${index}` } });
      expect(shot.status).toBe(502);
      const polled = await api(urlB(), 'GET', `/v1/tasks/${shot.json.error.task_id}`, { headers: client.auth });
      expect(polled.json.attempts).toHaveLength(1);
    }
    expect(lonely.received).toHaveLength(3);
    const after = await scrapeAll();
    const moved = (name: string, labels: Record<string, string>) => total(after, name, labels) - total(before, name, labels);
    expect(moved('marketplace_tasks_finished_total', { task_type: 'screenshot', status: 'failed' })).toBe(3);
    expect(moved('marketplace_attempts_reassigned_total', { task_type: 'screenshot' })).toBe(0);
  });

  test('/metrics refuses without the metrics token or the admin key, on API nodes and on the worker', async () => {
    for (const url of [`${urlA()}/metrics`, workerMetrics()]) {
      const anonymous = await api(url, 'GET', '');
      expect(anonymous.status).toBe(401);
      expect(anonymous.json).toEqual({ error: { type: 'metrics_authentication_required', message: expect.stringContaining('METRICS_TOKEN') } });
      const wrong = await api(url, 'GET', '', { headers: { Authorization: 'Bearer not-the-token' } });
      expect(wrong.status).toBe(401);
      expect(wrong.json.error.type).toBe('invalid_metrics_token');
      const admin = await api(url, 'GET', '', { headers: { 'X-Admin-API-Key': ADMIN_KEY } });
      expect(admin.status).toBe(200);
      expect(admin.text).toContain('# TYPE marketplace_tasks_finished_total counter');
    }
    const elsewhere = await api(workerMetrics().replace(/\/metrics$/, '/v1/tasks'), 'GET', '', { headers: { Authorization: `Bearer ${METRICS_TOKEN}` } });
    expect(elsewhere.status).toBe(404);
  });
});

test('/metrics is off (403 metrics_disabled) where neither METRICS_TOKEN nor ADMIN_API_KEY is set', async () => {
  const stack = await startTestStack({ worker: false, env: { ADMIN_API_KEY: '', METRICS_TOKEN: '' } });
  try {
    const response = await api(stack.url, 'GET', '/metrics', { headers: { Authorization: 'Bearer anything' } });
    expect(response.status).toBe(403);
    expect(response.json.error.type).toBe('metrics_disabled');
  } finally {
    await stack.close();
  }
});
