import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'slonik';
import { z } from 'zod';
import { auditLedger, getBalance } from '../src/db/ledger';
import { createDb, type Db } from '../src/db/pool';
import { pickPort } from '../src/embedded/ports';
import { createLogger } from '../src/logger';
import { startLocalSolver, type LocalSolver } from '../src/runtime/local-solver';
import { startCrawlSite, type CrawlSite } from './support/crawl-site';
import { spawnNode, type NodeProcess } from './support/processes';
import { ADMIN_KEY, api, QUIET_TRUST_ENV, registerAccount, testConfig, testEndpoints } from './support/stack';

const endpoints = testEndpoints();

/** The processes' settings: a task queue of the test's own, workflows only in the worker process. */
function crashEnv(queue: string) {
  return {
    DATABASE_URL: endpoints.databaseUrl,
    TEMPORAL_ADDRESS: endpoints.temporalAddress,
    // A queue of its own, so that no other test's worker takes these workflows.
    TEMPORAL_TASK_QUEUE: `${queue}-${crypto.randomBytes(4).toString('hex')}`,
    ADMIN_API_KEY: ADMIN_KEY,
    HOST: '127.0.0.1',
    LOCAL_SOLVER: 'off',
    ALLOW_PRIVATE_NETWORKS: 'true',
    ...QUIET_TRUST_ENV,
    WORKFLOW_BUNDLE_PATH: process.env.WORKFLOW_BUNDLE_PATH ?? '',
    // Workflows run only in the worker process, so that killing it is a real crash of the orchestration.
    API_RUNS_WORKFLOWS: 'false',
    // A page's task whose accepted attempt went down with its API node is taken up again once this time
    // and the drill worker's threshold are over; a page takes well under a second here.
    DEFAULT_TASK_TIMEOUT_SECONDS: '10',
  };
}

/** The worker, as `npm run worker` runs it but with its recovery sweeps shortened (test/support/drill-worker.ts). */
const spawnWorker = (env: Record<string, string>) => spawnNode('worker', env, /temporal worker started/, undefined, 'test/support/drill-worker.ts');

type Status = { status: string; completed: number; total: number; data: Array<{ metadata: { sourceURL: string } }>; pointsCharged: string; pointsHeld: string };

/** Polls the job's status (through whichever node `base` names now) until `done`. */
async function waitForJob(base: () => string, auth: Record<string, string>, id: string, done: (body: Status) => boolean, ms: number): Promise<Status> {
  const deadline = Date.now() + ms;
  for (;;) {
    const answer = await api(base(), 'GET', `/v2/crawl/${id}?limit=1000`, { headers: auth }).catch(() => null);
    const body = answer?.status === 200 ? (answer.json as Status) : null;
    if (body && done(body)) return body;
    if (Date.now() > deadline) throw new Error(`timed out: ${JSON.stringify({ ...body, data: undefined })}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

/** Every reachable page completed once, one task per page, nothing held, the balance moved by what the job charged, the ledger exact. */
async function expectExact(db: Db, site: CrawlSite, client: { account_id: string }, before: string, final: Status) {
  expect(final.status).toBe('completed');
  const failed = await db.any(sql.type(z.object({ url: z.string(), error: z.any(), task_status: z.string().nullable(), task_error: z.any() }))`
    SELECT p.url, p.error, t.status AS task_status, t.error AS task_error FROM crawl_pages p LEFT JOIN tasks t USING (task_id)
    WHERE p.status <> 'completed' AND p.crawl_id IN (SELECT crawl_id FROM crawls WHERE account_id = ${client.account_id})`);
  expect(failed).toEqual([]);
  expect(final.completed).toBe(site.reachable.length);
  expect(new Set(final.data.map((doc) => doc.metadata.sourceURL))).toEqual(new Set(site.reachable));
  // One completed (and charged) task per page, however often its slice ran; a page whose task failed for
  // want of a solver (its node killed) got another, and its failed one charged nothing.
  const perUrl = await db.any(sql.type(z.object({ url: z.string(), n: z.number() }))`
    SELECT payload->>'url' AS url, count(*)::int AS n FROM tasks
    WHERE account_id = ${client.account_id} GROUP BY 1 HAVING count(*) FILTER (WHERE status = 'completed') <> 1`);
  expect(perUrl).toEqual([]);
  expect(Number(final.pointsHeld)).toBe(0);
  expect(Number(final.pointsCharged)).toBe(site.reachable.length);
  const after = (await getBalance(db, client.account_id))!.available_points;
  expect(Number(before) - Number(after)).toBeCloseTo(Number(final.pointsCharged), 6);
  expect(await auditLedger(db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
}

/** A crawl survives its worker being SIGKILLed mid-way: every page fetched and charged once, none lost. */
describe('a crawl whose worker dies', () => {
  const env = crashEnv('crawl-crash');
  let apiNode: NodeProcess;
  let worker: NodeProcess;
  let db: Db;
  let site: CrawlSite;
  let solver: LocalSolver;
  let dataDir: string;
  const logger = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

  beforeAll(async () => {
    site = await startCrawlSite(120, { pageDelayMs: 150 });
    [apiNode, worker] = await Promise.all([
      spawnNode('api', { ...env, PORT: '0', NODE_ID: `crash-${env.TEMPORAL_TASK_QUEUE}` }, /api listening/),
      spawnWorker(env),
    ]);
    db = await createDb(endpoints.databaseUrl);
    dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'crawl-crash-'));
    solver = await startLocalSolver({ config: testConfig({ DATA_DIR: dataDir, SOLVER_MAX_CONCURRENT: '8' }), apiUrl: url(), logger });
  }, 180_000);

  afterAll(async () => {
    await solver?.stop();
    await Promise.all([apiNode?.kill(), worker?.kill()]);
    await db?.query(sql.unsafe`DELETE FROM api_nodes WHERE node_id LIKE ${`%${env.TEMPORAL_TASK_QUEUE}`}`);
    await db?.end();
    await site?.close();
    if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
  });

  const url = () => JSON.parse(apiNode.output.join('').split('\n').find((line) => line.includes('api listening'))!).url as string;

  test('SIGKILL of the worker mid-crawl, then a new worker: every page once, none lost, the ledger exact', async () => {
    const client = await registerAccount(url(), '10000');
    const before = (await getBalance(db, client.account_id))!.available_points;
    const started = await api(url(), 'POST', '/v2/crawl', { headers: client.auth, body: { url: `${site.baseUrl}/`, limit: 1000, maxConcurrency: 4 } });
    expect(started.status).toBe(200);
    await waitForJob(url, client.auth, started.json.id, (body) => body.completed >= 20, 120_000);
    await worker.kill('SIGKILL');
    await new Promise((resolve) => setTimeout(resolve, 1000));
    worker = await spawnWorker(env);
    const final = await waitForJob(url, client.auth, started.json.id, (body) => body.status !== 'scraping', 240_000);
    await expectExact(db, site, client, before, final);
    for (const page of site.reachable) {
      const key = page.replace(site.baseUrl, '');
      expect([key, site.hits.get(key)]).toEqual([key, 1]);
    }
  }, 420_000);
});

/**
 * A crawl survives its API node being SIGKILLed (the client goes on through the node restarted on its
 * address), and every process of the stack (API, worker, solver) SIGKILLed at once and started again.
 * PostgreSQL and Temporal are the suite's shared servers and stay up.
 */
describe('a crawl whose API node, or whole stack, dies', () => {
  const env = crashEnv('crawl-stack-crash');
  const SOLVER_SLOTS = 8;
  let port: number;
  let apiNode: NodeProcess;
  let worker: NodeProcess;
  let solver: NodeProcess;
  let solverEnv: Record<string, string>;
  let db: Db;
  const base = () => `http://127.0.0.1:${port}`;
  const startApi = () => spawnNode('api', { ...env, PORT: String(port), NODE_ID: `stack-${env.TEMPORAL_TASK_QUEUE}` }, /api listening/);
  const startWorker = () => spawnWorker(env);
  const startSolver = () => spawnNode('solver', solverEnv, /connected to the marketplace/);

  beforeAll(async () => {
    port = await pickPort(undefined);
    [apiNode, worker] = await Promise.all([startApi(), startWorker()]);
    db = await createDb(endpoints.databaseUrl);
    const account = await registerAccount(base());
    solverEnv = { ...env, SOLVER_URL: base(), SOLVER_API_KEY: account.api_key, SOLVER_TASK_TYPES: 'proxy_fetch', SOLVER_MAX_CONCURRENT: String(SOLVER_SLOTS), SOLVER_RECONNECT_MAX_MS: '1000' };
    solver = await startSolver();
  }, 180_000);

  afterAll(async () => {
    await Promise.all([solver?.kill(), apiNode?.kill(), worker?.kill()]);
    await db?.query(sql.unsafe`DELETE FROM api_nodes WHERE node_id LIKE ${`%${env.TEMPORAL_TASK_QUEUE}`}`);
    await db?.end();
  });

  /** Starts a crawl of a fresh site, waits for some pages, runs `crash`, and checks that the crawl ends exact. */
  async function crawlThrough(crash: () => Promise<void>) {
    const site = await startCrawlSite(120, { pageDelayMs: 150 });
    try {
      const client = await registerAccount(base(), '10000');
      const before = (await getBalance(db, client.account_id))!.available_points;
      const started = await api(base(), 'POST', '/v2/crawl', { headers: client.auth, body: { url: `${site.baseUrl}/`, limit: 1000, maxConcurrency: 4 } });
      expect(started.status).toBe(200);
      await waitForJob(base, client.auth, started.json.id, (body) => body.completed >= 20, 120_000);
      await crash();
      const final = await waitForJob(base, client.auth, started.json.id, (body) => body.status !== 'scraping', 300_000);
      await expectExact(db, site, client, before, final);
      // A page whose answer was lost with a killed process is fetched again (its task is the same one);
      // at most the solver's slots were in flight.
      const again = site.reachable.filter((page) => site.hits.get(page.replace(site.baseUrl, ''))! > 1);
      expect(again.length).toBeLessThanOrEqual(SOLVER_SLOTS);
      for (const page of site.reachable) expect(site.hits.get(page.replace(site.baseUrl, ''))).toBeGreaterThanOrEqual(1);
    } finally {
      await site.close();
    }
  }

  test('SIGKILL of the API node mid-crawl, then the node again on its address: every page once, none lost, the ledger exact', async () => {
    await crawlThrough(async () => {
      await apiNode.kill('SIGKILL');
      apiNode = await startApi();
    });
  }, 480_000);

  test('SIGKILL of the API node, the worker and the solver at once, then all again: every page once, none lost, the ledger exact', async () => {
    await crawlThrough(async () => {
      await Promise.all([apiNode.kill('SIGKILL'), worker.kill('SIGKILL'), solver.kill('SIGKILL')]);
      [apiNode, worker] = await Promise.all([startApi(), startWorker()]);
      solver = await startSolver();
    });
  }, 480_000);
});
