import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { sql } from 'slonik';
import { z } from 'zod';
import { auditLedger, balanceFromEntries, getBalance, PLATFORM_ACCOUNT_ID } from '../src/db/ledger';
import { createTemporalClient } from '../src/temporal/connection';
import { AccountIdAttribute, TaskStatusAttribute, TaskTypeAttribute } from '../src/contract/workflows';
import { suiteSolvers, waitFor, type FakeSolver, type TaskFrame } from './support/fake-solver';
import { ADMIN_KEY, api, registerAccount, startTestStack, testEndpoints, type TestStack } from './support/stack';

/**
 * Redundant runs (docs/trust.md): with every client web task sampled and no verifier online, a second
 * solver runs it after the client has its answer, paid by the platform; honest solvers agree, a solver
 * that makes a page up disagrees, and with no third solver the task stays disputed. The client pays
 * once and waits for nothing.
 */

jest.setTimeout(120_000);

const admin = { 'X-Admin-API-Key': ADMIN_KEY };
let stack: TestStack;
let site: http.Server;
let siteUrl: string;

// A page that says the same thing every time it is fetched.
const ARTICLE = `<!doctype html><html><head><title>Rivers</title></head><body><main><h1>Rivers of Europe</h1>
<p>The Danube flows through ten countries before it reaches the Black Sea. Its delta is a protected wetland,
home to hundreds of bird species and a few fishing villages.</p><p>The Rhine rises in the Alps and meets the
North Sea in the Netherlands, after passing Basel, Strasbourg and Cologne.</p></main></body></html>`;

beforeAll(async () => {
  site = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(ARTICLE));
  await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
  siteUrl = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
  // Sweeps once an hour only: each run starts because the transaction that drew it said so.
  stack = await startTestStack({ env: { REDUNDANT_RUN_FRACTION: '1', REDUNDANT_RUN_SWEEP_SECONDS: '3600' } });
  const funded = await api(stack.url, 'POST', '/v1/admin/deposit', { body: { account_id: PLATFORM_ACCOUNT_ID, amount_points: '1000' }, headers: admin });
  expect(funded.status).toBe(200);
});
afterAll(async () => {
  await stack.close();
  await new Promise((resolve) => site.close(resolve));
});

const startSolver = suiteSolvers(() => stack.url);

/** A solver that fetches the page it is given and returns its text, after `delayMs`. */
const honest =
  (delayMs = 0, answered?: (at: number) => void) =>
  async (frame: TaskFrame, self: FakeSolver) => {
    self.send({ type: 'accept', attempt_id: frame.attempt_id });
    const url = String(frame.payload.url);
    const page = await (await fetch(url)).text();
    const content = page.replace(/<[^>]+>/g, ' ').replace(/\s+/g, ' ').trim();
    if (delayMs) await new Promise((resolve) => setTimeout(resolve, delayMs));
    answered?.(Date.now());
    self.send({ type: 'result', attempt_id: frame.attempt_id, result: { url, final_url: url, status_code: 200, content_type: 'markdown', content, title: 'Rivers' } });
  };

const RunRow = z.object({
  status: z.string(),
  first_solver_id: z.string(),
  second_solver_id: z.string().nullable(),
  run_task_id: z.string().nullable(),
  similarity: z.number().nullable(),
  threshold: z.number().nullable(),
  measure: z.string().nullable(),
  evidence: z.record(z.any()).nullable(),
});
const runOf = (taskId: string) => stack.db.maybeOne(sql.type(RunRow)`
  SELECT status, first_solver_id, second_solver_id, run_task_id, similarity, threshold, measure, evidence FROM redundant_runs WHERE task_id = ${taskId}`);
/** The run once judged (or ended without a verdict). */
const judged = (taskId: string) =>
  waitFor(async () => {
    const run = await runOf(taskId);
    return run && run.status !== 'pending' ? run : null;
  }, 45_000);

const trustOf = async (solverId: string) => (await api(stack.url, 'GET', `/v1/admin/solvers/${solverId}/trust`, { headers: admin })).json;

/** A client fetch, answered. */
async function clientFetch(client: { auth: Record<string, string> }) {
  return answered(api(stack.url, 'POST', '/v1/fetch', { body: { url: `${siteUrl}/rivers` }, headers: client.auth }));
}

async function answered(fetching: ReturnType<typeof api>) {
  const fetched = await fetching;
  expect(fetched.status).toBe(200);
  const taskId = fetched.headers.get('x-task-id') ?? fetched.json.task_id;
  expect(taskId).toEqual(expect.any(String));
  return { taskId: String(taskId), fetched };
}

/**
 * A run's price cap is what the client was charged, so its second solver asks no more than the first:
 * at one price, which of two solvers serves the client is a tie. The first solver is started alone and
 * holds the client's fetch until the second (`startSecond`) is online, which then runs it again.
 */
async function servedThenRunAgain<T>(client: { auth: Record<string, string> }, startSecond: () => Promise<T>, firstBehaviour = honest()) {
  let secondOnline!: () => void;
  const gate = new Promise<void>((resolve) => (secondOnline = resolve));
  const first = await startSolver({
    taskTypes: ['proxy_fetch'],
    price: '1',
    behaviour: async (frame, self) => {
      await gate;
      await firstBehaviour(frame, self);
    },
  });
  const fetching = api(stack.url, 'POST', '/v1/fetch', { body: { url: `${siteUrl}/rivers` }, headers: client.auth });
  await waitFor(() => first.received[0], 30_000);
  const second = await startSecond();
  const startedAt = Date.now();
  secondOnline();
  return { first, second, startedAt, ...(await answered(fetching)) };
}

test('two honest solvers agree: nothing is recorded against them, the platform pays the second run and the client pays once', async () => {
  const client = await registerAccount(stack.url, '100');
  const platformBefore = await getBalance(stack.db, PLATFORM_ACCOUNT_ID);

  const { first, second, taskId } = await servedThenRunAgain(client, () => startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: honest() }));
  const run = await judged(taskId);
  expect(run).toMatchObject({ status: 'agreed', first_solver_id: first.solverId, second_solver_id: second.solverId, measure: 'text_shingles', similarity: 1, threshold: 0.3 });
  expect(first.received).toHaveLength(1);
  expect(second.received).toHaveLength(1);
  // The second solver got the client's payload in an ordinary task frame, under another task id.
  expect(second.received[0].task_id).toBe(run.run_task_id);
  expect(second.received[0].payload).toEqual(first.received[0].payload);
  // The client's task shows it was checked.
  expect((await api(stack.url, 'GET', `/v1/tasks/${taskId}`, { headers: client.auth })).json.verification).toBe('verified');

  for (const solver of [first, second]) {
    const [reputation] = (await trustOf(solver.solverId)).reputation;
    expect(reputation).toMatchObject({ task_type: 'proxy_fetch', redundant_runs: 1, disagreements: 0 });
    expect((await trustOf(solver.solverId)).disagreements).toEqual([]);
  }

  // The client paid the first solver's price once; the platform held what the client was charged and paid the second's price.
  expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: '1', held_points: '0', available_points: '99' });
  const payers = await stack.db.any(sql.type(z.object({ account_id: z.string(), kind: z.string(), amount: z.string() }))`
    SELECT account_id, kind, trim_scale(amount)::text AS amount FROM ledger_entries WHERE hold_id = ${run.run_task_id} AND kind IN ('hold', 'capture') ORDER BY entry_id`);
  expect(payers).toEqual([
    { account_id: PLATFORM_ACCOUNT_ID, kind: 'hold', amount: '1' },
    { account_id: PLATFORM_ACCOUNT_ID, kind: 'capture', amount: '1' },
  ]);
  // The platform spent the second price and earned both fees back: 1 − 0.1 − 0.1.
  const platformAfter = await getBalance(stack.db, PLATFORM_ACCOUNT_ID);
  expect(Number(platformAfter!.available_points) - Number(platformBefore!.available_points)).toBeCloseTo(-1 + 0.1 + 0.1, 6);
  expect(await getBalance(stack.db, second.solverId)).toMatchObject({ lifetime_earned_points: '0.9' });
  expect(await balanceFromEntries(stack.db, PLATFORM_ACCOUNT_ID)).toEqual(platformAfter);
  expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });

  // In the Temporal UI the run is a task workflow of its own, with its own task type.
  const temporal = await createTemporalClient(testEndpoints().temporalAddress, 'default');
  try {
    const description = await temporal.workflow.getHandle(`redundant-${taskId}`).describe();
    expect(description.type).toBe('taskWorkflow');
    expect(description.typedSearchAttributes.get(TaskTypeAttribute)).toBe('redundant_proxy_fetch');
    expect(description.typedSearchAttributes.get(AccountIdAttribute)).toBe(PLATFORM_ACCOUNT_ID);
    expect(description.typedSearchAttributes.get(TaskStatusAttribute)).toBe('completed');
  } finally {
    await temporal.connection.close();
  }
});

test('a solver that makes the page up disagrees with the honest one: with no third solver the task stays disputed, counted for both with its evidence and a failure for neither', async () => {
  const client = await registerAccount(stack.url, '100');
  // The scripted 'ok' behaviour answers every fetch with "# Hello".
  const { first, second: cheat, taskId } = await servedThenRunAgain(client, () => startSolver({ taskTypes: ['proxy_fetch'], price: '1' }));
  const run = await judged(taskId);
  expect(run).toMatchObject({ status: 'disagreed', first_solver_id: first.solverId, second_solver_id: cheat.solverId, similarity: 0 });
  expect(run.evidence).toMatchObject({
    client_task_id: taskId,
    run_task_id: run.run_task_id,
    first: { solver_id: first.solverId, excerpt: expect.stringContaining('The Danube flows through ten countries') },
    second: { solver_id: cheat.solverId, excerpt: '# Hello' },
  });

  for (const solver of [first, cheat]) {
    const trust = await trustOf(solver.solverId);
    // No failure for either: a disagreement alone does not say which side is wrong. (1 + 1) / (1 + 2).
    expect(trust.reputation[0]).toMatchObject({ task_type: 'proxy_fetch', redundant_runs: 1, disagreements: 1, failures: 0, successes: 1, score: 0.6667, verified_failures: 0 });
    // An admin reads the record from either side; nobody is quarantined by a disagreement alone.
    expect(trust.quarantined).toBe(false);
    expect(trust.disagreements).toEqual([
      expect.objectContaining({ task_id: taskId, status: 'disagreed', measure: 'text_shingles', threshold: 0.3, first_solver_id: first.solverId, second_solver_id: cheat.solverId }),
    ]);
  }
  // The solver does not see which of its tasks were checked: no count of checks in its own view, so
  // reading its stats after each task labels none of them.
  const own = (await api(stack.url, 'GET', '/v1/solver/stats', { headers: { Authorization: `Bearer ${cheat.apiKey}` } })).json;
  expect(Object.keys(own.trust.reputation[0]).sort()).toEqual(['client_work', 'failures', 'latency_ms', 'on_probation', 'score', 'successes', 'task_type']);
  // The client's task is disputed, not refunded: one disagreement does not tell which side is wrong,
  // and no third solver was online to break the tie; the dispute is concluded, nothing left open.
  expect((await api(stack.url, 'GET', `/v1/tasks/${taskId}`, { headers: client.auth })).json.verification).toBe('disputed');
  await waitFor(() => stack.db.oneFirst(sql.type(z.object({ concluded: z.boolean() }))`SELECT concluded_at IS NOT NULL AS concluded FROM redundant_runs WHERE task_id = ${taskId}`));

  expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: '1', held_points: '0' });
  expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
});

test('the client has its answer before the second run answers; a slow second solver does not hold it', async () => {
  let secondAnsweredAt: number | undefined;
  const SECOND_DELAY_MS = 4000;
  const client = await registerAccount(stack.url, '100');

  const { second: slow, taskId, startedAt: started } = await servedThenRunAgain(client, () =>
    startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: honest(SECOND_DELAY_MS, (at) => (secondAnsweredAt = at)) }),
  );
  const answeredAt = Date.now();
  // The client's response came first, well within the slow solver's delay.
  expect(secondAnsweredAt).toBeUndefined();
  expect(answeredAt - started).toBeLessThan(SECOND_DELAY_MS);
  expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: '1', held_points: '0' });

  const run = await judged(taskId);
  expect(run).toMatchObject({ status: 'agreed', second_solver_id: slow.solverId });
  expect(secondAnsweredAt).toBeGreaterThan(answeredAt);
  // The client's balance and task are as they were: charged once.
  expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: '1', held_points: '0', available_points: '99' });
  expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
});

test('a client and a solver priced above what the client paid cannot farm runs: with no other solver at or under the charged price the run is skipped, and the platform pays nothing', async () => {
  const only = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: honest() });
  // The collusion: the client's cap is 10 (the default web price) and its partner asks 9. Paid from the
  // client's cap, each run would cost the platform 9 for a task that cost the client 1.
  const colluder = await startSolver({ taskTypes: ['proxy_fetch'], price: '9', behaviour: honest() });
  const client = await registerAccount(stack.url, '100');
  const platformBefore = await getBalance(stack.db, PLATFORM_ACCOUNT_ID);
  for (let i = 0; i < 3; i++) {
    const { taskId } = await clientFetch(client);
    const run = await judged(taskId);
    expect(run).toMatchObject({ status: 'skipped', first_solver_id: only.solverId, second_solver_id: null });
    expect(run.evidence).toEqual({ reason: 'No other trusted solver within the price cap is online.' });
  }
  expect(only.received).toHaveLength(3);
  expect(colluder.received).toHaveLength(0);
  expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: '3', held_points: '0' });
  // The platform earned the three fees and paid nothing.
  const platformAfter = await getBalance(stack.db, PLATFORM_ACCOUNT_ID);
  expect(Number(platformAfter!.available_points) - Number(platformBefore!.available_points)).toBeCloseTo(3 * 0.1, 6);
  expect(await getBalance(stack.db, colluder.solverId)).toMatchObject({ lifetime_earned_points: '0' });
  expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
});

/** A behaviour that holds each task until the test releases it (or, once opened, answers at once). */
function gated() {
  const held = new Map<string, () => void>();
  let open = false;
  const behaviour = async (frame: TaskFrame, self: FakeSolver) => {
    if (!open) await new Promise<void>((resolve) => held.set(frame.task_id, resolve));
    await honest()(frame, self);
  };
  return {
    behaviour,
    release: (taskId: string) => held.get(taskId)!(),
    open: () => {
      open = true;
      for (const release of held.values()) release();
    },
  };
}

test('a run waits in the queue behind every client task: a freed slot goes to a client task waiting since after it, and the run is handed the next', async () => {
  const gateA = gated();
  const gateB = gated();
  const a = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', maxConcurrent: 1, behaviour: gateA.behaviour });
  let b!: FakeSolver;
  const client = await registerAccount(stack.url, '100');
  const fetchPage = (i: number) => api(stack.url, 'POST', '/v1/fetch', { body: { url: `${siteUrl}/rivers?i=${i}` }, headers: client.auth });
  const frameOf = (solver: FakeSolver, i: number) => waitFor(() => solver.received.find((frame) => frame.payload.url === `${siteUrl}/rivers?i=${i}`), 30_000);
  const queued = () => stack.db.anyFirst(sql.type(z.object({ task_id: z.string() }))`SELECT task_id FROM task_queue WHERE task_type = 'proxy_fetch' ORDER BY arrival, task_id`);
  const runTaskOf = (clientTaskId: string) =>
    waitFor(() => stack.db.maybeOneFirst(sql.type(z.object({ run_task_id: z.string() }))`SELECT run_task_id FROM redundant_runs WHERE task_id = ${clientTaskId} AND run_task_id IS NOT NULL`), 30_000);

  try {
    // C1 is served by A (B, at the same price, comes online once A has it); its run takes B's only
    // slot and is held there.
    const c1 = fetchPage(1);
    const frame1 = await frameOf(a, 1);
    b = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', maxConcurrent: 1, behaviour: gateB.behaviour });
    gateA.release(frame1.task_id);
    expect((await c1).status).toBe(200);
    const run1 = await waitFor(() => b.received[0], 30_000);
    // C2 holds A; C3 waits for a slot.
    const c2 = fetchPage(2);
    const frame2 = await frameOf(a, 2);
    const c3 = fetchPage(3);
    await waitFor(async () => (await queued()).length === 1);
    // C2 ends: A's slot goes to C3, and C2's run (A excluded, B busy) waits behind client tasks.
    gateA.release(frame2.task_id);
    expect((await c2).status).toBe(200);
    await frameOf(a, 3);
    const run2 = await runTaskOf(frame2.task_id);
    await waitFor(async () => (await queued()).includes(run2));
    // C4 arrives after the run and waits too.
    const c4 = fetchPage(4);
    await waitFor(async () => (await queued()).length === 2);
    const [c4Task] = (await queued()).filter((taskId) => taskId !== run2);
    expect(await queued()).toEqual([c4Task, run2]);
    // What clients and operators see counts client tasks only: C4 is first in line, one task waits.
    const seen = await api(stack.url, 'GET', `/v1/tasks/${c4Task}`, { headers: client.auth });
    expect(seen.json).toMatchObject({ status: 'queued', queue: { position: 1 } });
    const status = await api(stack.url, 'GET', '/v1/admin/status', { headers: admin });
    expect(status.json.queues.proxy_fetch).toMatchObject({ queued: 1, free_slots: 0 });

    // B's slot frees: it goes to C4, though the run has waited longer.
    gateB.release(run1.task_id);
    const next = await waitFor(() => b.received[1], 30_000);
    expect(next.task_id).toBe(c4Task);
    expect(await queued()).toEqual([run2]);
    // No client task waits when C4's slot frees: the run is handed it.
    gateB.release(c4Task!);
    expect((await c4).status).toBe(200);
    const third = await waitFor(() => b.received[2], 30_000);
    expect(third.task_id).toBe(run2);

    gateA.open();
    gateB.open();
    expect((await c3).status).toBe(200);
    const clientTasks = [(await frameOf(a, 1)).task_id, frame2.task_id, (await frameOf(a, 3)).task_id, c4Task!];
    for (const taskId of clientTasks) expect((await judged(taskId)).status).toBe('agreed');
  } finally {
    gateA.open();
    gateB.open();
  }
  // C1 to C4 at 1 each: runs cost the client nothing.
  expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: '4', held_points: '0' });
  expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
});
