import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'slonik';
import { z } from 'zod';
import { auditLedger, getBalance } from '../src/db/ledger';
import { createDb, type Db } from '../src/db/pool';
import { createLogger } from '../src/logger';
import { startLocalSolver, type LocalSolver } from '../src/runtime/local-solver';
import { startCrawlSite, type CrawlSite } from './support/crawl-site';
import { spawnNode, type NodeProcess } from './support/processes';
import { ADMIN_KEY, api, QUIET_TRUST_ENV, registerAccount, testConfig, testEndpoints } from './support/stack';

/** A crawl survives its worker being SIGKILLed mid-way: every page fetched and charged once, none lost. */
describe('a crawl whose worker dies', () => {
  const endpoints = testEndpoints();
  const env = {
    DATABASE_URL: endpoints.databaseUrl,
    TEMPORAL_ADDRESS: endpoints.temporalAddress,
    // A queue of its own, so that no other test's worker takes these workflows.
    TEMPORAL_TASK_QUEUE: `crawl-crash-${crypto.randomBytes(4).toString('hex')}`,
    ADMIN_API_KEY: ADMIN_KEY,
    HOST: '127.0.0.1',
    LOCAL_SOLVER: 'off',
    ALLOW_PRIVATE_NETWORKS: 'true',
    ...QUIET_TRUST_ENV,
    WORKFLOW_BUNDLE_PATH: process.env.WORKFLOW_BUNDLE_PATH ?? '',
    // Workflows run only in the worker process, so that killing it is a real crash of the orchestration.
    API_RUNS_WORKFLOWS: 'false',
  };
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
      spawnNode('worker', env, /temporal worker started/),
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
    const status = async () => (await api(url(), 'GET', `/v2/crawl/${started.json.id}?limit=1000`, { headers: client.auth })).json;
    const waitFor = async (done: (body: any) => boolean, ms: number) => {
      const deadline = Date.now() + ms;
      for (let body = await status(); ; body = await status()) {
        if (done(body)) return body;
        if (Date.now() > deadline) throw new Error(`timed out: ${JSON.stringify({ ...body, data: undefined })}`);
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    };
    await waitFor((body) => body.completed >= 20, 120_000);
    await worker.kill('SIGKILL');
    await new Promise((resolve) => setTimeout(resolve, 1000));
    worker = await spawnNode('worker', env, /temporal worker started/);
    const final = await waitFor((body) => body.status !== 'scraping', 240_000);

    expect(final.status).toBe('completed');
    expect(final.completed).toBe(site.reachable.length);
    expect(new Set(final.data.map((doc: any) => doc.metadata.sourceURL))).toEqual(new Set(site.reachable));
    for (const page of site.reachable) {
      const key = page.replace(site.baseUrl, '');
      expect([key, site.hits.get(key)]).toEqual([key, 1]);
    }
    // One task per page, however often its slice ran.
    const perUrl = await db.any(sql.type(z.object({ url: z.string(), n: z.number() }))`
      SELECT payload->>'url' AS url, count(*)::int AS n FROM tasks
      WHERE account_id = ${client.account_id} GROUP BY 1 HAVING count(*) > 1`);
    expect(perUrl).toEqual([]);
    expect(Number(final.pointsHeld)).toBe(0);
    const after = (await getBalance(db, client.account_id))!.available_points;
    expect(Number(before) - Number(after)).toBeCloseTo(Number(final.pointsCharged), 6);
    expect(await auditLedger(db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  }, 420_000);
});
