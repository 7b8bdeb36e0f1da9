import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { sql } from 'slonik';
import { z } from 'zod';
import { auditLedger, balanceFromEntries, getBalance, PLATFORM_ACCOUNT_ID } from '../src/db/ledger';
import { suiteSolvers, waitFor, type FakeSolver, type TaskFrame } from './support/fake-solver';
import { ADMIN_KEY, api, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * Honest solvers are left alone (docs/trust.md, "Detection, as tested"): two honest solvers serve 1,000
 * client fetches between them, with canaries on (probation, then one every 1 to 39 attempts) and a
 * fraction of the tasks run again by the other solver; neither is ever quarantined, every canary passes,
 * and the ledger is exact. Eight client requests at a time: about half a minute on an idle 2-core machine.
 */

jest.setTimeout(300_000);

const TASKS = 1000;
const CLIENT_CONCURRENCY = 8;
const CANARY_EVERY_TASKS = 20;
const REDUNDANT_RUN_FRACTION = 0.02;
const admin = { 'X-Admin-API-Key': ADMIN_KEY };

let stack: TestStack;
let site: http.Server;
let siteUrl: string;

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
      // Every canary and run starts on its announcement; the sweeps would only hide a missed one.
      CANARY_SWEEP_SECONDS: '3600',
      REDUNDANT_RUN_SWEEP_SECONDS: '3600',
      // One client sends all 1,000 within seconds.
      RATE_LIMIT_PER_MINUTE: '100000',
      // On a machine busy with other work a task may wait for Temporal longer than the default minute;
      // that is no evidence against a solver, and would fail the request, not the check.
      DEFAULT_TASK_TIMEOUT_SECONDS: '600',
    },
  });
  const funded = await api(stack.url, 'POST', '/v1/admin/deposit', { body: { account_id: PLATFORM_ACCOUNT_ID, amount_points: '10000' }, headers: admin });
  expect(funded.status).toBe(200);
});
afterAll(async () => {
  await stack.close();
  await new Promise((resolve) => site.close(resolve));
});

const startSolver = suiteSolvers(() => stack.url);

/** A solver that fetches the page it is given and returns its text. */
async function honest(frame: TaskFrame, self: FakeSolver) {
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  const url = String(frame.payload.url);
  const page = await (await fetch(url)).text();
  const content = page.replace(/<[^>]+>/g, ' ').replace(/\s+/g, ' ').trim();
  self.send({ type: 'result', attempt_id: frame.attempt_id, result: { url, final_url: url, status_code: 200, content_type: 'markdown', content, title: 'Page' } });
}

const trustOf = async (solverId: string) => (await api(stack.url, 'GET', `/v1/admin/solvers/${solverId}/trust`, { headers: admin })).json;

test(`honest solvers doing ${TASKS} client tasks with canaries and redundant runs are never quarantined, and the ledger is exact`, async () => {
  const solvers = [
    await startSolver({ taskTypes: ['proxy_fetch'], price: '1', maxConcurrent: CLIENT_CONCURRENCY, behaviour: honest }),
    await startSolver({ taskTypes: ['proxy_fetch'], price: '1', maxConcurrent: CLIENT_CONCURRENCY, behaviour: honest }),
  ];
  // Each is on probation until its first canary passes.
  for (const solver of solvers) await waitFor(async () => (await trustOf(solver.solverId)).reputation[0]?.client_work === true, 60_000);
  // Each task holds its cap (10) while it runs: room for every request at once beside the price of all.
  const client = await registerAccount(stack.url, String(TASKS + 10 * CLIENT_CONCURRENCY));

  const started = Date.now();
  let next = 0;
  const statuses: number[] = [];
  await Promise.all(
    Array.from({ length: CLIENT_CONCURRENCY }, async () => {
      while (next < TASKS) {
        const i = next++;
        const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${siteUrl}/harbours?i=${i}` }, headers: client.auth });
        statuses.push(fetched.status);
      }
    }),
  );
  const seconds = (Date.now() - started) / 1000;
  expect(statuses.filter((status) => status !== 200)).toEqual([]);

  // Every canary and every run has ended.
  await waitFor(
    () =>
      stack.db.oneFirst(sql.type(z.object({ settled: z.boolean() }))`
        SELECT NOT EXISTS (SELECT 1 FROM canaries WHERE verdict IS NULL) AND NOT EXISTS (SELECT 1 FROM redundant_runs WHERE status = 'pending') AS settled`),
    60_000,
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
      FROM redundant_runs r LEFT JOIN tasks t ON t.task_id = r.run_task_id WHERE r.status = 'pending'`);
    console.log(JSON.stringify(dump));
    throw error;
  });
  const runs = await stack.db.any(sql.type(z.object({ status: z.string(), count: z.number() }))`SELECT status, count(*)::int AS count FROM redundant_runs GROUP BY status`);
  const canaryPasses: number[] = [];
  for (const solver of solvers) {
    const trust = await trustOf(solver.solverId);
    expect(trust.quarantined).toBe(false);
    expect(trust.held_points).toBe('0');
    expect(trust.reputation[0]).toMatchObject({ canary_failures: 0, disagreements: 0, client_work: true });
    canaryPasses.push(trust.reputation[0].canary_passes);
  }
  // Attempts made while a canary was on its way count towards none, so canaries come less often than
  // one per 2N − 1 = 39 attempts when the solver is busy: one per 100 client tasks is the documented floor
  // (about one per 20 to 30 is usual), beside the probation canary of each.
  const clientTasksOf = (solver: FakeSolver) => solver.received.filter((frame) => !String(frame.payload.url).includes('/canary/')).length;
  const total = canaryPasses.reduce((sum, passes) => sum + passes, 0);
  expect(total).toBeGreaterThanOrEqual(solvers.length + Math.floor(TASKS / 100));
  // The one ledger: the client paid its 1,000 tasks once; canaries and runs came from the platform's account.
  expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: String(TASKS), held_points: '0' });
  expect(await balanceFromEntries(stack.db, PLATFORM_ACCOUNT_ID)).toEqual(await getBalance(stack.db, PLATFORM_ACCOUNT_ID));
  expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  console.log(
    `${TASKS} client tasks in ${seconds.toFixed(1)} s; tasks per solver ${solvers.map(clientTasksOf).join(', ')}; canaries passed ${canaryPasses.join(', ')}; redundant runs ${JSON.stringify(runs)}`,
  );
});
