import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { sql } from 'slonik';
import { z } from 'zod';
import { auditLedger, balanceFromEntries, getBalance, PLATFORM_ACCOUNT_ID } from '../src/db/ledger';
import { markLocalVerifier, startLocalSolver, type LocalSolver } from '../src/runtime/local-solver';
import { DEFAULT_SEARCH_INDEX_DIR } from '../src/solver/config';
import { createLocalSearchBackend } from '../src/solver/search/local-index';
import { honestFetch, honestSearch, type Script } from './support/cheats';
import { suiteSolvers, waitFor, type FakeSolver } from './support/fake-solver';
import { ADMIN_KEY, api, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * Honest solvers are left alone (docs/trust.md, "Detection, as tested"): two scripted honest solvers
 * and the bundled solver (the one `npm start` runs, started the same way) serve 1,000 client tasks
 * between them, fetches and one search in ten, with canaries on (probation for every type each offers,
 * then one every 1 to 39 attempts; searches compared with the bundled index) and a fraction of the
 * tasks run again by another solver; none is ever quarantined, every canary passes, and the ledger is
 * exact. Eight client requests at a time: under a minute on an idle 2-core machine.
 */

// Under a minute on an idle machine; a machine shared with other work can take several.
// Under a full parallel suite on 2 cores the 1,000 tasks and their verification runs take up to ten minutes.
jest.setTimeout(1_200_000);

const TASKS = 1000;
const CLIENT_CONCURRENCY = 8;
const CANARY_EVERY_TASKS = 20;
const REDUNDANT_RUN_FRACTION = 0.02;
// One client task in this many is a search.
const SEARCH_EVERY = 10;
const QUERIES = ['solver points', 'ledger holds', 'screenshot viewport', 'chat completions model', 'domain policy', 'api key rotation'];
const admin = { 'X-Admin-API-Key': ADMIN_KEY };

let stack: TestStack;
let site: http.Server;
let siteUrl: string;
let bundled: LocalSolver;
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'trust-honest-'));

const ARTICLE = `<!doctype html><html><head><title>Harbours</title></head><body><main><h1>Harbours of the North Sea</h1>
<p>Rotterdam handles more cargo than any other port in Europe; its quays run for forty kilometres along the Maas.</p>
<p>Hamburg lies a hundred kilometres up the Elbe, and its warehouse district is built on oak piles.</p></main></body></html>`;

beforeAll(async () => {
  site = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(ARTICLE));
  await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
  siteUrl = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
  stack = await startTestStack({
    env: {
      TRUST_PROBATION_CANARIES: '1',
      CANARY_EVERY_TASKS: String(CANARY_EVERY_TASKS),
      REDUNDANT_RUN_FRACTION: String(REDUNDANT_RUN_FRACTION),
      // The service's default: newcomers' client web tasks are verified at half, falling with their record.
      VERIFICATION_START_FRACTION: '0.5',
      // Every canary and run starts on its announcement; the sweeps would only hide a missed one.
      CANARY_SWEEP_SECONDS: '3600',
      REDUNDANT_RUN_SWEEP_SECONDS: '3600',
      // One client sends all 1,000 within seconds.
      RATE_LIMIT_PER_MINUTE: '100000',
      // On a machine busy with other work a task may wait for Temporal longer than the default minute;
      // that is no evidence against a solver, and would fail the request, not the check.
      DEFAULT_TASK_TIMEOUT_SECONDS: '600',
      // Search canaries ask the index the bundled solver searches.
      CANARY_SEARCH_ORACLE: 'bundled',
      // Where the bundled solver keeps its account, as `npm start` does in its data directory.
      DATA_DIR: dataDir,
      SOLVER_MAX_CONCURRENT: '4',
    },
  });
  const funded = await api(stack.url, 'POST', '/v1/admin/deposit', { body: { account_id: PLATFORM_ACCOUNT_ID, amount_points: '10000' }, headers: admin });
  expect(funded.status).toBe(200);
});
afterAll(async () => {
  await bundled?.stop();
  await stack.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
  await new Promise((resolve) => site.close(resolve));
});

const startSolver = suiteSolvers(() => stack.url);

// The scripted solvers search the same shipped pages as the bundled solver, with the same backend.
const index = createLocalSearchBackend(DEFAULT_SEARCH_INDEX_DIR);
const search = honestSearch((query, count) => index.search(query, count, new AbortController().signal));
const honest: Script = (frame, self) => (frame.task_type === 'web_search' ? search(frame, self) : honestFetch(frame, self));

const trustOf = async (solverId: string) => (await api(stack.url, 'GET', `/v1/admin/solvers/${solverId}/trust`, { headers: admin })).json;

test(`honest solvers, the bundled one among them, doing ${TASKS} client tasks with canaries and redundant runs are never quarantined, and the ledger is exact`, async () => {
  // The best record takes every task its slots can: two slots each for the scripted solvers and the
  // bundled solver's four (SOLVER_MAX_CONCURRENT) make room for the eight requests, so each serves a share.
  const scripted = [
    await startSolver({ taskTypes: ['proxy_fetch', 'web_search'], price: '1', maxConcurrent: 2, behaviour: honest }),
    await startSolver({ taskTypes: ['proxy_fetch', 'web_search'], price: '1', maxConcurrent: 2, behaviour: honest }),
  ];
  bundled = await startLocalSolver({ config: stack.config, apiUrl: stack.url, logger: pino({ level: 'warn' }) });
  // As `npm start` does: the bundled solver verifies the scripted solvers' sampled client tasks.
  await markLocalVerifier(stack.db, bundled.solverId, pino({ level: 'warn' }));
  expect(bundled.taskTypes).toEqual(expect.arrayContaining(['proxy_fetch', 'web_search']));
  const solverIds = [...scripted.map((solver) => solver.solverId), bundled.solverId];
  // Each is on probation until its first canary of the type passes.
  const clientWork = async (solverId: string) =>
    (await trustOf(solverId)).reputation.filter((row: { task_type: string; client_work: boolean }) => ['proxy_fetch', 'web_search'].includes(row.task_type) && row.client_work).length === 2;
  for (const solverId of solverIds) await waitFor(() => clientWork(solverId), 90_000);
  // Each task holds its cap (10) while it runs: room for every request at once beside the price of all.
  const client = await registerAccount(stack.url, String(TASKS + 10 * CLIENT_CONCURRENCY));

  const started = Date.now();
  let next = 0;
  const statuses: number[] = [];
  await Promise.all(
    Array.from({ length: CLIENT_CONCURRENCY }, async () => {
      while (next < TASKS) {
        const i = next++;
        const answered =
          i % SEARCH_EVERY === SEARCH_EVERY - 1
            ? await api(stack.url, 'POST', '/v1/search', { body: { query: QUERIES[i % QUERIES.length] }, headers: client.auth })
            : await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${siteUrl}/harbours?i=${i}` }, headers: client.auth });
        statuses.push(answered.status);
      }
    }),
  );
  const seconds = (Date.now() - started) / 1000;
  expect(statuses.filter((status) => status !== 200)).toEqual([]);

  // Every canary and every run has ended.
  await waitFor(
    () =>
      stack.db.oneFirst(sql.type(z.object({ settled: z.boolean() }))`
        SELECT NOT EXISTS (SELECT 1 FROM canaries WHERE verdict IS NULL) AND NOT EXISTS (SELECT 1 FROM redundant_runs WHERE concluded_at IS NULL) AS settled`),
    // Verification runs wait behind client tasks for the bundled solver's slots.
    120_000,
  ).catch(async (error) => {
    // What is still open, for the failure's report.
    const dump = await stack.db.any(sql.unsafe`
      SELECT 'canary' AS kind, k.task_id, t.status, t.created_at::text, (SELECT row_to_json(q) FROM task_queue q WHERE q.task_id = k.task_id) AS queued,
             (SELECT json_agg(a) FROM task_attempts a WHERE a.task_id = k.task_id) AS attempts
      FROM canaries k JOIN tasks t USING (task_id) WHERE k.verdict IS NULL
      UNION ALL
      SELECT 'run', r.task_id || ' ' || COALESCE(r.run_task_id, '-') || ' ' || COALESCE(r.workflow_started_at::text, 'unstarted'), t.status, t.created_at::text,
             (SELECT row_to_json(q) FROM task_queue q WHERE q.task_id = r.run_task_id),
             (SELECT json_agg(a) FROM task_attempts a WHERE a.task_id = r.run_task_id)
      FROM redundant_runs r LEFT JOIN tasks t ON t.task_id = r.run_task_id WHERE r.concluded_at IS NULL`);
    console.log(JSON.stringify(dump));
    throw error;
  });
  const runs = await stack.db.any(sql.type(z.object({ status: z.string(), count: z.number() }))`SELECT status, count(*)::int AS count FROM redundant_runs GROUP BY status`);
  const canaryPasses: Record<string, number>[] = [];
  let probations = 0;
  for (const solverId of solverIds) {
    const trust = await trustOf(solverId);
    expect(trust.quarantined).toBe(false);
    expect(trust.held_points).toBe('0');
    const passes: Record<string, number> = {};
    for (const row of trust.reputation) {
      // The bundled solver offers screenshots and snapshots too: it passed their probation canaries.
      expect(row).toMatchObject({ canary_failures: 0, disagreements: 0, verified_failures: 0, client_work: true });
      passes[row.task_type] = row.canary_passes;
      probations += 1;
    }
    canaryPasses.push(passes);
  }
  // Attempts made while a canary was on its way count towards none, so canaries come less often than
  // one per 2N − 1 = 39 attempts when the solver is busy: one per 100 client tasks is the documented floor
  // (about one per 20 to 30 is usual), beside the probation canary of each type of each solver.
  const total = canaryPasses.reduce((sum, passes) => sum + Object.values(passes).reduce((a, b) => a + b, 0), 0);
  expect(total).toBeGreaterThanOrEqual(probations + Math.floor(TASKS / 100));
  // Each solver, the bundled one included, served a share of the client tasks.
  const served = await stack.db.any(sql.type(z.object({ solver_id: z.string(), task_type: z.string(), count: z.number() }))`
    SELECT solver_id, task_type, count(*)::int AS count FROM tasks
    WHERE account_id = ${client.account_id} AND status = 'completed' GROUP BY solver_id, task_type ORDER BY solver_id, task_type`);
  for (const solverId of solverIds) expect(served.filter((row) => row.solver_id === solverId && row.task_type === 'proxy_fetch').length).toBe(1);
  // The one ledger: the client paid its 1,000 tasks once; canaries and runs came from the platform's account.
  expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: String(TASKS), held_points: '0' });
  expect(await balanceFromEntries(stack.db, PLATFORM_ACCOUNT_ID)).toEqual(await getBalance(stack.db, PLATFORM_ACCOUNT_ID));
  expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  console.log(
    `${TASKS} client tasks in ${seconds.toFixed(1)} s; tasks per solver (the bundled one last) ${solverIds
      .map((solverId) => served.filter((row) => row.solver_id === solverId).map((row) => `${row.task_type} ${row.count}`).join(' + '))
      .join('; ')}; canaries passed ${JSON.stringify(canaryPasses)}; redundant runs ${JSON.stringify(runs)}`,
  );
});
