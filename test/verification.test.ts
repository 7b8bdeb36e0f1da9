import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { sql } from 'slonik';
import { z } from 'zod';
import { auditLedger, getBalance, PLATFORM_ACCOUNT_ID } from '../src/db/ledger';
import pino from 'pino';
import { startLocalSolver } from '../src/runtime/local-solver';
import { vestEarnings } from '../src/trust/escrow';
import { blankScreenshot, fabricatedFetch, fabricatesOneIn, fetchesSuspectedChecks, honestFetch, pageLikeScreenshot, suspectsCheck, type Script } from './support/cheats';
import { suiteSolvers, waitFor, type FakeSolver, type TaskFrame } from './support/fake-solver';
import { canariesSettled } from './support/trust';
import { encodeGrayPng } from '../src/trust/png';
import { ADMIN_KEY, api, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * Verified client tasks (docs/trust.md, "Verified client tasks"): a sampled client task is run again
 * by a verifier, or by two other solvers in turn; a result proven wrong is refunded at once and counts
 * against its solver only, in a sequential test that quarantines a cheat. The cheats are written as a
 * dishonest solver author would write them against checks that look like client work.
 */

jest.setTimeout(300_000);

let stack: TestStack;
let site: http.Server;
let siteUrl: string;
const admin = { 'X-Admin-API-Key': ADMIN_KEY };
const AUDIT_EXACT = { accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 };

// A client's website: every path is a page of its own.
const pageAt = (path: string) => `<!doctype html><html><head><title>${path}</title></head><body><main><h1>Notes on ${path}</h1>
<p>This page at ${path} describes the harbour, the lighthouse keeper and the ferry timetable of a small island town.</p>
<p>Visitors to ${path} read about tides, the fish market on Thursdays and the walk along the northern cliffs.</p></main></body></html>`;

// A page under /changing/ is another on every request (a client's own server, changing what it serves).
let changingServed = 0;
const WORDS = ['harbour', 'ferry', 'lantern', 'granite', 'orchard', 'velvet', 'compass', 'meadow', 'thunder', 'pepper', 'saddle', 'willow', 'quartz', 'biscuit', 'falcon', 'marble'];
const changingPage = () => {
  changingServed += 1;
  const text = Array.from({ length: 60 }, () => WORDS[Math.floor(Math.random() * WORDS.length)]).join(' ');
  return `<!doctype html><html><head><title>Edition ${changingServed}</title></head><body><main><p>${text}</p></main></body></html>`;
};

// A page under /once/ serves its first request one text and every later request another: the solver
// that serves the client gets the first, the verifier's two fetches the second.
const onceServed = new Set<string>();
const oncePage = (path: string) => {
  const first = !onceServed.has(path);
  onceServed.add(path);
  return first
    ? pageAt(path)
    : `<!doctype html><html><head><title>Moved</title></head><body><main><h1>Closed for the season</h1>
<p>The orchard cafe and its velvet armchairs are closed until spring; granite benches remain by the meadow gate.</p>
<p>Thunder storms flooded the saddle path, and the falcon display moved to the quartz quarry behind the biscuit works.</p></main></body></html>`;
};

beforeAll(async () => {
  site = http.createServer((req, res) => {
    const path = req.url ?? '/';
    res.writeHead(200, { 'content-type': 'text/html' }).end(path.startsWith('/changing/') ? changingPage() : path.startsWith('/once/') ? oncePage(path) : pageAt(path));
  });
  await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
  siteUrl = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => site.close(resolve));
});

/** A stack with this trust policy for the tests of one describe block (the policy is per process). */
function stackWith(env: Record<string, string>) {
  beforeAll(async () => {
    // The suites send hundreds of client tasks a minute from one key; the per-key limit is not what they test.
    stack = await startTestStack({ env: { CANARY_SWEEP_SECONDS: '3600', REDUNDANT_RUN_SWEEP_SECONDS: '3600', RATE_LIMIT_PER_MINUTE: '100000', ...env } });
    const funded = await api(stack.url, 'POST', '/v1/admin/deposit', { body: { account_id: PLATFORM_ACCOUNT_ID, amount_points: '100000' }, headers: admin });
    expect(funded.status).toBe(200);
  });
  afterAll(async () => {
    await stack.close();
  });
  return suiteSolvers(() => stack.url);
}

const trustOf = async (solverId: string) => (await api(stack.url, 'GET', `/v1/admin/solvers/${solverId}/trust`, { headers: admin })).json;
const verificationOf = async (taskId: string, auth: Record<string, string>) => (await api(stack.url, 'GET', `/v1/tasks/${taskId}`, { headers: auth })).json.verification;
const markVerifier = async (solver: FakeSolver) => {
  const marked = await api(stack.url, 'POST', `/v1/admin/solvers/${solver.solverId}/verifier`, { body: { verifier: true }, headers: admin });
  expect(marked.json).toEqual({ solver_id: solver.solverId, verifier: true });
};

const RunRow = z.object({
  task_id: z.string(),
  status: z.string(),
  concluded: z.boolean(),
  first_solver_id: z.string(),
  second_solver_id: z.string().nullable(),
  third_solver_id: z.string().nullable(),
  wrong_solver_id: z.string().nullable(),
  by_verifier: z.boolean(),
  run_task_id: z.string().nullable(),
  third_run_task_id: z.string().nullable(),
  evidence: z.record(z.any()).nullable(),
});
const RUN_COLUMNS = sql.fragment`task_id, status, concluded_at IS NOT NULL AS concluded, first_solver_id, second_solver_id, third_solver_id, wrong_solver_id,
  by_verifier, run_task_id, third_run_task_id, evidence`;
/** A client task's run once every check of it has ended. */
const concluded = (taskId: string) =>
  waitFor(async () => {
    const run = await stack.db.maybeOne(sql.type(RunRow)`SELECT ${RUN_COLUMNS} FROM redundant_runs WHERE task_id = ${taskId}`);
    return run?.concluded ? run : null;
  }, 60_000);
/** Waits until no run is left open, and returns those of these client tasks. */
async function runsOf(taskIds: string[]) {
  await waitFor(async () => (await stack.db.oneFirst(sql.type(z.object({ open: z.number() }))`SELECT count(*)::int AS open FROM redundant_runs WHERE concluded_at IS NULL`)) === 0, 90_000);
  return stack.db.any(sql.type(RunRow)`SELECT ${RUN_COLUMNS} FROM redundant_runs WHERE task_id = ANY(${sql.array(taskIds, 'text')})`);
}

/** A client fetch (or screenshot) of a page of the client's site; the task id, or null when no solver could take it. */
async function clientFetch(client: { auth: Record<string, string> }, path: string, route = '/v1/fetch'): Promise<{ taskId: string; solverId: string } | null> {
  const fetched = await api(stack.url, 'POST', route, { body: { url: `${siteUrl}${path}` }, headers: client.auth });
  if (fetched.status === 503) return null;
  expect({ status: fetched.status, error: fetched.json?.error }).toEqual({ status: 200, error: undefined });
  const taskId = String(fetched.headers.get('x-task-id'));
  const solverId = await stack.db.oneFirst(sql.type(z.object({ solver_id: z.string() }))`SELECT solver_id FROM tasks WHERE task_id = ${taskId}`);
  return { taskId, solverId };
}

const suspect = (frame: TaskFrame) => suspectsCheck(frame, stack.url);
const fetchesSuspectsOnly: Script = (frame, self) => fetchesSuspectedChecks(stack.url)(frame, self);

/** Answers what it suspects is a check honestly, and fails every other task: a verifier or third solver whose runs crash. */
const failsClientWork: Script = (frame, self) => {
  if (suspect(frame as TaskFrame)) return honestFetch(frame, self);
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  self.send({ type: 'error', attempt_id: frame.attempt_id, error: { type: 'fetch_failed', message: 'worker crashed' }, retryable: false });
};

/** A behaviour that holds each task until `open` is called, then behaves as `script`. */
function held(script: Script) {
  let open!: () => void;
  const gate = new Promise<void>((resolve) => (open = resolve));
  const behaviour = async (frame: TaskFrame, self: FakeSolver) => {
    await gate;
    await script(frame, self);
  };
  return { behaviour, open };
}

describe('every client task verified, escrow on, no probation', () => {
  // No score threshold: the sequential test alone decides (the failures would exclude the cheat first).
  const startSolver = stackWith({ REDUNDANT_RUN_FRACTION: '1', EARNINGS_VESTING_SECONDS: '3600', EARNINGS_VESTING_CHECKS: '0', TRUST_MIN_SCORE: '0' });

  test('an admin marks and unmarks a verifier; an unknown solver is 404, a bad body 422', async () => {
    const solver = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: honestFetch });
    await markVerifier(solver);
    expect((await trustOf(solver.solverId)).verifier).toBe(true);
    const unmarked = await api(stack.url, 'POST', `/v1/admin/solvers/${solver.solverId}/verifier`, { body: { verifier: false }, headers: admin });
    expect(unmarked.json).toEqual({ solver_id: solver.solverId, verifier: false });
    expect((await trustOf(solver.solverId)).verifier).toBe(false);
    expect((await api(stack.url, 'POST', '/v1/admin/solvers/nobody/verifier', { body: { verifier: true }, headers: admin })).status).toBe(404);
    expect((await api(stack.url, 'POST', `/v1/admin/solvers/${solver.solverId}/verifier`, { body: { verifier: 'yes' }, headers: admin })).status).toBe(422);
    expect((await api(stack.url, 'POST', `/v1/admin/solvers/${solver.solverId}/verifier`, { body: { verifier: true } })).status).toBe(401);
  });

  test('a verifier dearer than the cheat re-runs its client tasks: each wrong one is refunded at once, the cheat alone takes the failure, and the third quarantines it', async () => {
    const verifier = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: honestFetch });
    await markVerifier(verifier);
    const cheat = await startSolver({ taskTypes: ['proxy_fetch'], price: '0.5', behaviour: fetchesSuspectsOnly });
    // Three clients: proofs from one client's tasks count once a day ("Verified client tasks").
    const clients = [await registerAccount(stack.url, '100'), await registerAccount(stack.url, '100'), await registerAccount(stack.url, '100')];
    const client = clients[0]!;
    const served: string[] = [];
    for (let i = 0; i < 3; i++) {
      const task = await clientFetch(clients[i]!, `/refuted/${i}`);
      expect(task?.solverId).toBe(cheat.solverId);
      served.push(task!.taskId);
      const run = await concluded(task!.taskId);
      expect(run).toMatchObject({ status: 'refuted', by_verifier: true, second_solver_id: verifier.solverId, wrong_solver_id: cheat.solverId });
      expect(run.evidence).toMatchObject({ by_verifier: true, first: { solver_id: cheat.solverId, excerpt: '# Hello' }, second: { solver_id: verifier.solverId } });
      expect(await verificationOf(task!.taskId, clients[i]!.auth)).toBe('refunded');
    }
    // Every charge came back: the cheat's pay and the platform's fee.
    for (const each of clients) expect(await getBalance(stack.db, each.account_id)).toMatchObject({ available_points: '100', held_points: '0', lifetime_spent_points: '0' });
    const trust = await trustOf(cheat.solverId);
    expect(trust.quarantined).toBe(true);
    expect(trust.quarantines[0]).toMatchObject({ reason: 'verification_failed', task_type: 'proxy_fetch' });
    expect(trust.quarantines[0].evidence.sprt).toMatchObject({ verified_failures: 3, verified_passes: 0 });
    expect(trust.reputation[0]).toMatchObject({ verified_failures: 3 });
    expect(trust.disagreements.map((run: { task_id: string }) => run.task_id).sort()).toEqual([...served].sort());
    // The verifier took nothing against it, and its own client work is not re-run.
    const verifierTrust = await trustOf(verifier.solverId);
    expect(verifierTrust).toMatchObject({ quarantined: false, verifier: true });
    expect(verifierTrust.reputation[0]).toMatchObject({ verified_failures: 0, failures: 0 });
    const next = await clientFetch(client, '/refuted/after');
    expect(next?.solverId).toBe(verifier.solverId);
    expect(await runsOf([next!.taskId])).toEqual([]);
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });

  test('a run meant for a verifier goes to the verifier only: a colluding partner that comes online cheaper while it waits never gets it, and the cheat is proven wrong', async () => {
    // The verifier's one slot is busy with a client task, so the run waits in the queue.
    const verifierGate = held(honestFetch);
    const verifier = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', maxConcurrent: 1, behaviour: verifierGate.behaviour });
    await markVerifier(verifier);
    const client = await registerAccount(stack.url, '100');
    const busy = clientFetch(client, '/collusion/busy');
    await waitFor(() => verifier.received[0], 30_000);
    const cheat = await startSolver({ taskTypes: ['proxy_fetch'], price: '0.5', behaviour: fabricatedFetch });
    const task = (await clientFetch(client, '/collusion/served'))!;
    expect(task.solverId).toBe(cheat.solverId);
    const waiting = await waitFor(async () => {
      const run = await stack.db.maybeOne(sql.type(RunRow)`SELECT ${RUN_COLUMNS} FROM redundant_runs WHERE task_id = ${task.taskId}`);
      if (!run?.run_task_id) return null;
      const queued = await stack.db.exists(sql.unsafe`SELECT 1 FROM task_queue WHERE task_id = ${run.run_task_id}`);
      return queued ? run : null;
    }, 30_000);
    expect(waiting).toMatchObject({ by_verifier: true, status: 'pending' });
    // The partner answers as the cheat does: were it sent the run, the two would agree.
    const partner = await startSolver({ taskTypes: ['proxy_fetch'], price: '0.4', behaviour: fabricatedFetch });
    await new Promise((resolve) => setTimeout(resolve, 2000));
    verifierGate.open();
    await busy;
    const run = await concluded(task.taskId);
    expect(run).toMatchObject({ status: 'refuted', by_verifier: true, second_solver_id: verifier.solverId, wrong_solver_id: cheat.solverId });
    expect(partner.received.map((frame) => frame.task_id)).not.toContain(run.run_task_id);
    expect(await verificationOf(task.taskId, client.auth)).toBe('refunded');
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });

  test('client screenshots re-rendered by a verifier: a blank image and one drawn to look like a simple page are proven wrong and refunded', async () => {
    // The bundled solver renders with Chromium, as on `npm start`, and verifies.
    const bundled = await startLocalSolver({ config: stack.config, apiUrl: stack.url, logger: pino({ level: 'warn' }) });
    try {
      expect(bundled.taskTypes).toContain('screenshot');
      await markVerifier({ solverId: bundled.solverId } as FakeSolver);
      const similarityOf = (taskId: string) => stack.db.oneFirst(sql.type(z.object({ similarity: z.number() }))`SELECT similarity FROM redundant_runs WHERE task_id = ${taskId}`);
      const shots = async (cheat: FakeSolver, name: string) => {
        const runs = [];
        for (const page of ['first', 'second']) {
          // A client per page: proofs from one client's tasks count once a day.
          const client = await registerAccount(stack.url, '100');
          const task = (await clientFetch(client, `/shots/${name}/${page}`, '/v1/screenshot'))!;
          expect(task.solverId).toBe(cheat.solverId);
          const run = await concluded(task.taskId);
          const similarity = await similarityOf(task.taskId);
          console.log(`${name} screenshot of /shots/${name}/${page}: ${run.status}, similarity ${similarity}, ${JSON.stringify(run.evidence?.first)}`);
          expect(run).toMatchObject({ by_verifier: true, second_solver_id: bundled.solverId, first_solver_id: cheat.solverId });
          runs.push({ ...run, similarity, verification: await verificationOf(task.taskId, client.auth) });
        }
        return runs;
      };
      const blank = await startSolver({ taskTypes: ['screenshot'], price: '0.5', behaviour: blankScreenshot });
      for (const run of await shots(blank, 'blank')) expect(run).toMatchObject({ status: 'refuted', wrong_solver_id: blank.solverId, verification: 'refunded' });
      // Cheaper, so it takes the next screenshots. Its drawing passes the 8 × 8 average hash; the ink grid sees bars where the page has two lines of text.
      const pageLike = await startSolver({ taskTypes: ['screenshot'], price: '0.4', behaviour: pageLikeScreenshot });
      for (const run of await shots(pageLike, 'page-like')) {
        expect(run).toMatchObject({ status: 'refuted', wrong_solver_id: pageLike.solverId, verification: 'refunded' });
        expect(run.evidence?.first.average_hash_similarity).toBeGreaterThanOrEqual(0.8);
        expect(run.similarity).toBeLessThan(0.63);
      }
      expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
    } finally {
      await bundled.stop();
    }
  });

  test('with no verifier, two solvers that disagree are decided by a third: the odd one out is proven wrong, the client refunded when it was the client\'s', async () => {
    // The cheat serves the client; the honest solvers come online once it has the task.
    const cheatGate = held(fabricatedFetch);
    const cheat = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: cheatGate.behaviour });
    const client = await registerAccount(stack.url, '100');
    const fetching = clientFetch(client, '/majority/refuted');
    await waitFor(() => cheat.received[0], 30_000);
    const honestA = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: honestFetch });
    const honestB = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: honestFetch });
    cheatGate.open();
    const refuted = (await fetching)!;
    const run = await concluded(refuted.taskId);
    expect(run).toMatchObject({ status: 'refuted', by_verifier: false, first_solver_id: cheat.solverId, wrong_solver_id: cheat.solverId });
    expect([run.second_solver_id, run.third_solver_id].sort()).toEqual([honestA.solverId, honestB.solverId].sort());
    expect(run.evidence).toMatchObject({ third: { similarity_to_first: 0, similarity_to_second: 1 } });
    expect(await verificationOf(refuted.taskId, client.auth)).toBe('refunded');
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '100', lifetime_spent_points: '0' });
    expect((await trustOf(cheat.solverId)).reputation[0]).toMatchObject({ verified_failures: 1 });
    for (const honest of [honestA, honestB]) expect((await trustOf(honest.solverId)).reputation[0]).toMatchObject({ verified_failures: 0, failures: 0 });
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });

  /**
   * An honest solver serves the client; the cheat (the only other solver then) makes up the second run;
   * a third solver behaving as `third` comes online before the cheat answers, and takes the third run.
   */
  async function disputedWithThird(path: string, third: Script) {
    const firstGate = held(honestFetch);
    const first = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: firstGate.behaviour });
    const client = await registerAccount(stack.url, '100');
    const fetching = clientFetch(client, path);
    await waitFor(() => first.received[0], 30_000);
    const cheatGate = held(fabricatedFetch);
    const cheat = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: cheatGate.behaviour });
    firstGate.open();
    const task = (await fetching)!;
    await waitFor(() => cheat.received[0], 30_000);
    const thirdSolver = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: third });
    cheatGate.open();
    return { first, cheat, third: thirdSolver, client, task, run: await concluded(task.taskId) };
  }

  test('when the second run is the odd one out, the client\'s result is upheld and the second solver takes the failure', async () => {
    const { first, cheat, third, client, task: upheld, run } = await disputedWithThird('/majority/upheld', honestFetch);
    expect(run).toMatchObject({ status: 'upheld', second_solver_id: cheat.solverId, third_solver_id: third.solverId, wrong_solver_id: cheat.solverId });
    expect(await verificationOf(upheld.taskId, client.auth)).toBe('verified');
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: '1' });
    expect((await trustOf(cheat.solverId)).reputation[0]).toMatchObject({ verified_failures: 1 });
    expect((await trustOf(first.solverId)).reputation[0]).toMatchObject({ verified_failures: 0, verified_passes: 1 });
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });

  test('a verifier whose run crashes leaves nothing open: the run ends unanswered, its hold released, the task unchecked and its pay free to vest', async () => {
    const verifier = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: failsClientWork });
    await markVerifier(verifier);
    const cheat = await startSolver({ taskTypes: ['proxy_fetch'], price: '0.5', behaviour: fabricatedFetch });
    const client = await registerAccount(stack.url, '100');
    const task = (await clientFetch(client, '/crash/verifier'))!;
    expect(task.solverId).toBe(cheat.solverId);
    const run = await concluded(task.taskId);
    expect(run).toMatchObject({ status: 'unanswered', by_verifier: true, wrong_solver_id: null });
    const runTask = await stack.db.one(sql.type(z.object({ status: z.string(), open_holds: z.number() }))`
      SELECT status, (SELECT count(*)::int FROM holds WHERE hold_id = ${run.run_task_id} AND status = 'open') AS open_holds FROM tasks WHERE task_id = ${run.run_task_id}`);
    expect(runTask).toEqual({ status: 'failed', open_holds: 0 });
    expect(await verificationOf(task.taskId, client.auth)).toBe('unchecked');
    expect((await trustOf(cheat.solverId)).reputation[0]).toMatchObject({ verified_failures: 0 });
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });

  /** A verifier at 1 and an honest newcomer at 0.5; one client's seven fetches under `path`, each served by the newcomer. */
  async function newcomerServesSeven(path: string, afterEach: (taskId: string) => Promise<unknown> = async () => undefined) {
    const verifier = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: honestFetch });
    await markVerifier(verifier);
    const newcomer = await startSolver({ taskTypes: ['proxy_fetch'], price: '0.5', behaviour: honestFetch });
    const client = await registerAccount(stack.url, '100');
    const served: string[] = [];
    for (let i = 0; i < 7; i++) {
      const task = (await clientFetch(client, `${path}/${i}`))!;
      expect(task.solverId).toBe(newcomer.solverId);
      served.push(task.taskId);
      await afterEach(task.taskId);
    }
    return { verifier, newcomer, client, served };
  }

  test('pages that change on every request, served by an honest newcomer: the verifier\'s two fetches differ, so each run is incomparable: no refund, no failure, no quarantine', async () => {
    const { verifier, newcomer, client, served } = await newcomerServesSeven('/changing');
    for (const run of await runsOf(served)) {
      // The verifier fetched twice (the stability check) and its two fetches disagreed: the page is not stable.
      expect(run).toMatchObject({ status: 'incomparable', by_verifier: true, second_solver_id: verifier.solverId, third_solver_id: verifier.solverId, wrong_solver_id: null });
      expect(run.evidence).toMatchObject({ stability: { stable: false } });
      expect(run.evidence!.stability.checks_similarity).toBeLessThan(0.3);
      expect(await verificationOf(run.task_id, client.auth)).toBe('unchecked');
    }
    // The client paid for the seven pages it got; the honest newcomer keeps its record.
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: '3.5' });
    const trust = await trustOf(newcomer.solverId);
    expect(trust.quarantined).toBe(false);
    expect(trust.reputation[0]).toMatchObject({ verified_failures: 0, failures: 0 });
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });

  test('pages that change after their first request, served by an honest newcomer: the verifier\'s two fetches agree with each other and not with the newcomer, yet one client\'s proofs count once a day: one refund, one failure, no quarantine', async () => {
    // One at a time, as a client reading its own site would: each proof judged before the next fetch.
    const { verifier, newcomer, client, served } = await newcomerServesSeven('/once', concluded);
    const runs = await runsOf(served);
    // The page is stable to the verifier (its two fetches agree), so each run proves the newcomer wrong.
    for (const run of runs) {
      expect(run).toMatchObject({ status: 'refuted', by_verifier: true, wrong_solver_id: newcomer.solverId, third_solver_id: verifier.solverId });
      expect(run.evidence).toMatchObject({ stability: { stable: true } });
    }
    const counted = runs.filter((run) => !run.evidence!.correlated_with);
    const verifications = await Promise.all(served.map((taskId) => verificationOf(taskId, client.auth)));
    console.log(`pages changed after their first request: ${runs.length} runs refuted, ${counted.length} counted; verifications ${JSON.stringify(verifications)}`);
    // The first counts: one failure observation and one refund. The other six are correlated with it: disputed, their pay held.
    expect(counted.map((run) => run.task_id)).toEqual([served[0]]);
    for (const run of runs.filter((each) => each.evidence!.correlated_with)) expect(run.evidence!.correlated_with).toBe(served[0]);
    expect(verifications).toEqual(['refunded', ...Array(6).fill('disputed')]);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: '3' });
    const trust = await trustOf(newcomer.solverId);
    expect(trust.quarantined).toBe(false);
    expect(trust.reputation[0]).toMatchObject({ verified_failures: 1 });
    const held = await stack.db.oneFirst(sql.type(z.object({ held: z.number() }))`
      SELECT count(*)::int AS held FROM holds WHERE account_id = ${newcomer.solverId} AND status = 'open' AND hold_id = ANY(${sql.array(served.slice(1).map((taskId) => `held:${taskId}`), 'text')})`);
    expect(held).toBe(6);
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });

  test('a verifier whose search finds nothing proves nothing: the honest solver\'s results stand; a solver that answers nothing where the verifier finds results is proven wrong', async () => {
    const hits = (query: string) => [1, 2, 3].map((i) => ({ title: `${query} ${i}`, url: `https://docs.example.org/${encodeURIComponent(query)}/${i}`, snippet: 'A result.' }));
    const answers = (results: (query: string) => unknown[]): Script => (frame, self) => {
      self.send({ type: 'accept', attempt_id: frame.attempt_id });
      self.send({ type: 'result', attempt_id: frame.attempt_id, result: { results: results(String(frame.payload.query)) } });
    };
    const search = async (query: string) => {
      const searched = await api(stack.url, 'POST', '/v1/search', { body: { query, count: 3 }, headers: client.auth });
      expect(searched.status).toBe(200);
      return String(searched.headers.get('x-task-id'));
    };
    // The verifier's index has nothing for these queries (another backend than the solver's).
    const verifier = await startSolver({ taskTypes: ['web_search'], price: '1', behaviour: answers(() => []) });
    await markVerifier(verifier);
    const honest = await startSolver({ taskTypes: ['web_search'], price: '0.5', behaviour: answers(hits) });
    const client = await registerAccount(stack.url, '100');
    const served: string[] = [];
    for (let i = 0; i < 4; i++) served.push(await search(`tide tables ${i}`));
    for (const run of await runsOf(served)) {
      expect(run).toMatchObject({ status: 'incomparable', by_verifier: true, first_solver_id: honest.solverId, wrong_solver_id: null });
      expect(run.evidence).toMatchObject({ incomparable: 'check_empty' });
      expect(await verificationOf(run.task_id, client.auth)).toBe('unchecked');
    }
    expect((await trustOf(honest.solverId)).reputation[0]).toMatchObject({ verified_failures: 0, failures: 0 });
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: '2' });
    await honest.close();
    await honest.offline(stack.url);
    // The cheat: always empty, hoping every check of it ends incomparable. The verifier now finds results.
    const finder = await startSolver({ taskTypes: ['web_search'], price: '1', behaviour: answers(hits) });
    await markVerifier(finder);
    await api(stack.url, 'POST', `/v1/admin/solvers/${verifier.solverId}/verifier`, { body: { verifier: false }, headers: admin });
    await verifier.close();
    await verifier.offline(stack.url);
    const empty = await startSolver({ taskTypes: ['web_search'], price: '0.5', behaviour: answers(() => []) });
    const cheated = await search('ferry timetable');
    const run = await concluded(cheated);
    expect(run).toMatchObject({ status: 'refuted', first_solver_id: empty.solverId, wrong_solver_id: empty.solverId, second_solver_id: finder.solverId });
    expect(await verificationOf(cheated, client.auth)).toBe('refunded');
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });

  test('searches are compared on what the client was shown: made-up results first and the real ones after are proven wrong and refunded; an honest solver listing more than `count` is not', async () => {
    const real = (query: string) => [1, 2, 3, 4, 5].map((i) => ({ title: `${query} ${i}`, url: `https://docs.example.org/${encodeURIComponent(query)}/${i}`, snippet: 'A result.' }));
    const madeUp = (query: string) => [1, 2, 3, 4, 5].map((i) => ({ title: `${query} ${i}`, url: `https://ads.example.net/${encodeURIComponent(query)}/${i}`, snippet: 'An advert.' }));
    const answers = (results: (query: string) => unknown[]): Script => (frame, self) => {
      self.send({ type: 'accept', attempt_id: frame.attempt_id });
      self.send({ type: 'result', attempt_id: frame.attempt_id, result: { results: results(String(frame.payload.query)) } });
    };
    const client = await registerAccount(stack.url, '100');
    const search = async (query: string, solver: FakeSolver) => {
      const searched = await api(stack.url, 'POST', '/v1/search', { body: { query, count: 5 }, headers: client.auth });
      expect(searched.status).toBe(200);
      const taskId = String(searched.headers.get('x-task-id'));
      return { taskId, shown: searched.json.results.map((hit: { url: string }) => hit.url), run: await concluded(taskId), solverId: solver.solverId };
    };
    const verifier = await startSolver({ taskTypes: ['web_search'], price: '1', behaviour: answers(real) });
    await markVerifier(verifier);
    // The cheat shows its `count` made-up results and lists the real ones after them.
    const cheat = await startSolver({ taskTypes: ['web_search'], price: '0.5', behaviour: answers((query) => [...madeUp(query), ...real(query)]) });
    const cheated = await search('lighthouse keeper', cheat);
    expect(cheated.shown.every((url: string) => url.startsWith('https://ads.example.net/'))).toBe(true);
    expect(cheated.run).toMatchObject({ status: 'refuted', by_verifier: true, first_solver_id: cheat.solverId, wrong_solver_id: cheat.solverId });
    expect(await stack.db.oneFirst(sql.type(z.object({ similarity: z.number() }))`SELECT similarity FROM redundant_runs WHERE task_id = ${cheated.taskId}`)).toBe(0);
    expect(await verificationOf(cheated.taskId, client.auth)).toBe('refunded');
    await cheat.close();
    await cheat.offline(stack.url);
    // An honest solver on a deeper index: its first five are the verifier's, then more.
    const honest = await startSolver({ taskTypes: ['web_search'], price: '0.5', behaviour: answers((query) => [...real(query), ...madeUp(query)]) });
    const listed = await search('ferry timetable', honest);
    expect(listed.run).toMatchObject({ status: 'agreed', first_solver_id: honest.solverId, wrong_solver_id: null });
    expect(await verificationOf(listed.taskId, client.auth)).toBe('verified');
    expect((await trustOf(honest.solverId)).reputation[0]).toMatchObject({ verified_failures: 0, failures: 0 });
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });

  test('screenshots: an interlaced PNG is read and agrees; a verifier\'s image it cannot read proves nothing; a client\'s image no decoder reads is proven wrong', async () => {
    const shade = (x: number, y: number) => (y < 200 && x < 600 ? 20 : 250);
    const plain = encodeGrayPng(1280, 800, shade).toString('base64');
    const interlaced = encodeGrayPng(1280, 800, shade, { interlaced: true }).toString('base64');
    const corrupt = Buffer.concat([Buffer.from(plain, 'base64').subarray(0, 60), Buffer.alloc(40, 7)]).toString('base64');
    const shows = (image: string): Script => (frame, self) => {
      self.send({ type: 'accept', attempt_id: frame.attempt_id });
      self.send({ type: 'result', attempt_id: frame.attempt_id, result: { mime_type: 'image/png', image_base64: image, width: 1280, height: 800 } });
    };
    const client = await registerAccount(stack.url, '100');
    const shot = async (solver: FakeSolver, path: string) => {
      const task = (await clientFetch(client, path, '/v1/screenshot'))!;
      expect(task.solverId).toBe(solver.solverId);
      return concluded(task.taskId);
    };
    const verifier = await startSolver({ taskTypes: ['screenshot'], price: '1', behaviour: shows(plain) });
    await markVerifier(verifier);
    const interlacing = await startSolver({ taskTypes: ['screenshot'], price: '0.5', behaviour: shows(interlaced) });
    expect(await shot(interlacing, '/shots/interlaced')).toMatchObject({ status: 'agreed', by_verifier: true });
    await interlacing.close();
    await interlacing.offline(stack.url);
    const corrupting = await startSolver({ taskTypes: ['screenshot'], price: '0.5', behaviour: shows(corrupt) });
    const wrong = await shot(corrupting, '/shots/corrupt');
    expect(wrong).toMatchObject({ status: 'refuted', wrong_solver_id: corrupting.solverId });
    expect(wrong.evidence!.first.unreadable).toBeDefined();
    expect(await verificationOf(wrong.task_id, client.auth)).toBe('refunded');
    await corrupting.close();
    await corrupting.offline(stack.url);
    // The verifier's own image is unreadable now: its check cannot answer.
    await api(stack.url, 'POST', `/v1/admin/solvers/${verifier.solverId}/verifier`, { body: { verifier: false }, headers: admin });
    await verifier.close();
    await verifier.offline(stack.url);
    const blind = await startSolver({ taskTypes: ['screenshot'], price: '1', behaviour: shows(corrupt) });
    await markVerifier(blind);
    const honest = await startSolver({ taskTypes: ['screenshot'], price: '0.5', behaviour: shows(plain) });
    const unread = await shot(honest, '/shots/unread');
    expect(unread).toMatchObject({ status: 'incomparable', wrong_solver_id: null });
    expect(unread.evidence).toMatchObject({ incomparable: 'check_unreadable' });
    expect((await trustOf(honest.solverId)).reputation[0]).toMatchObject({ verified_failures: 0, failures: 0 });
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });

  test('a third run that crashes leaves nothing open: the task stays disputed, with a failure on neither side', async () => {
    const { first, cheat, third: crasher, client, task: disputed, run } = await disputedWithThird('/crash/third', failsClientWork);
    expect(run).toMatchObject({ status: 'disagreed', wrong_solver_id: null, third_solver_id: null });
    expect(run.evidence).toMatchObject({ third: { reason: expect.stringContaining('worker crashed') } });
    expect(await stack.db.oneFirst(sql.type(z.object({ status: z.string() }))`SELECT status FROM tasks WHERE task_id = ${run.third_run_task_id}`)).toBe('failed');
    expect(crasher.received.map((frame) => frame.task_id)).toContain(run.third_run_task_id);
    expect(await verificationOf(disputed.taskId, client.auth)).toBe('disputed');
    for (const solver of [first, cheat]) expect((await trustOf(solver.solverId)).reputation[0]).toMatchObject({ verified_failures: 0, failures: 0 });
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });

  describe('location', () => {
    /** Capabilities of a proxy_fetch solver that declares `country`. */
    const fetchingFrom = (country: string, price: string) => [
      { task_type: 'proxy_fetch', tier: 'standard', billing_type: 'per_request', fulfillment_path: 'http', provider_name: 'fake', model_name: 'fake', marginal_cost: 0, min_price_points: price, max_concurrent: 8, country },
    ];
    /** A Firecrawl scrape with a location that names no country (Firecrawl's default, the US); its fetch task. */
    async function scrapeFromDefaultCountry(client: { account_id: string; auth: Record<string, string> }, path: string) {
      const scraped = await api(stack.url, 'POST', '/v2/scrape', { headers: client.auth, body: { url: `${siteUrl}${path}`, location: {} } });
      expect({ status: scraped.status, error: scraped.json?.error }).toEqual({ status: 200, error: undefined });
      return stack.db.one(sql.type(z.object({ task_id: z.string(), solver_id: z.string(), country: z.string().nullable() }))`
        SELECT task_id, solver_id, country FROM tasks WHERE account_id = ${client.account_id} AND task_type = 'proxy_fetch' ORDER BY created_at DESC LIMIT 1`);
    }
    const runCountry = (taskId: string | null) => stack.db.oneFirst(sql.type(z.object({ country: z.string().nullable() }))`SELECT country FROM tasks WHERE task_id = ${taskId}`);

    test('a fabricator alone in its country is checked by a verifier of another: disputed and its pay held while no other solver of its country can decide, proven wrong and refunded once one can', async () => {
      // The verifier declares no country; the cheat alone declares the US.
      const verifier = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: honestFetch });
      await markVerifier(verifier);
      const cheat = await startSolver({ capabilities: fetchingFrom('US', '0.5'), behaviour: fabricatedFetch });
      const client = await registerAccount(stack.url, '100');
      const alone = await scrapeFromDefaultCountry(client, '/location/alone');
      expect(alone).toMatchObject({ solver_id: cheat.solverId, country: 'US' });
      const disputed = await concluded(alone.task_id);
      expect(disputed).toMatchObject({ status: 'disagreed', by_verifier: true, second_solver_id: verifier.solverId, third_solver_id: null, wrong_solver_id: null });
      expect(disputed.evidence).toMatchObject({ cross_country: true, third: { reason: expect.any(String) } });
      expect(await runCountry(disputed.run_task_id)).toBeNull();
      expect(await verificationOf(alone.task_id, client.auth)).toBe('disputed');
      expect((await trustOf(cheat.solverId)).reputation[0]).toMatchObject({ verified_failures: 0 });
      expect(await stack.db.exists(sql.unsafe`SELECT 1 FROM holds WHERE hold_id = ${`held:${alone.task_id}`} AND status = 'open'`)).toBe(true);
      await cheat.close();
      await cheat.offline(stack.url);

      // Another solver of its country comes online once the cheat has the client's task: it decides.
      const cheatGate = held(fabricatedFetch);
      const second = await startSolver({ capabilities: fetchingFrom('US', '0.5'), behaviour: cheatGate.behaviour });
      const scraping = scrapeFromDefaultCountry(client, '/location/decided');
      await waitFor(() => second.received[0], 30_000);
      const honest = await startSolver({ capabilities: fetchingFrom('US', '0.5'), behaviour: honestFetch });
      cheatGate.open();
      const decided = await scraping;
      expect(decided.solver_id).toBe(second.solverId);
      const run = await concluded(decided.task_id);
      expect(run).toMatchObject({ status: 'refuted', by_verifier: true, second_solver_id: verifier.solverId, third_solver_id: honest.solverId, wrong_solver_id: second.solverId });
      expect(await runCountry(run.third_run_task_id)).toBe('US');
      expect(await verificationOf(decided.task_id, client.auth)).toBe('refunded');
      expect((await trustOf(second.solverId)).reputation[0]).toMatchObject({ verified_failures: 1 });
      expect((await trustOf(honest.solverId)).reputation[0]).toMatchObject({ verified_failures: 0, failures: 0 });
      expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
    });

    test('a verifier of another country that sees another page proves nothing against an honest solver: disputed with no failure, or upheld by a solver of its country', async () => {
      // The verifier's country is served another page (here: one it makes up).
      const verifier = await startSolver({ capabilities: fetchingFrom('DE', '1'), behaviour: fabricatedFetch });
      await markVerifier(verifier);
      const honest = await startSolver({ capabilities: fetchingFrom('US', '0.5'), behaviour: honestFetch });
      const client = await registerAccount(stack.url, '100');
      const alone = await scrapeFromDefaultCountry(client, '/location/honest-alone');
      expect(alone.solver_id).toBe(honest.solverId);
      expect(await concluded(alone.task_id)).toMatchObject({ status: 'disagreed', second_solver_id: verifier.solverId, wrong_solver_id: null });
      expect(await verificationOf(alone.task_id, client.auth)).toBe('disputed');
      // A second honest solver of the US breaks the tie: the client's result stands, nobody is wrong.
      const partner = await startSolver({ capabilities: fetchingFrom('US', '0.5'), behaviour: honestFetch });
      const tied = await scrapeFromDefaultCountry(client, '/location/honest-pair');
      const run = await concluded(tied.task_id);
      expect(run).toMatchObject({ status: 'upheld', second_solver_id: verifier.solverId, wrong_solver_id: null });
      expect([tied.solver_id, run.third_solver_id].sort()).toEqual([honest.solverId, partner.solverId].sort());
      expect(await verificationOf(tied.task_id, client.auth)).toBe('verified');
      for (const solver of [honest, partner]) expect((await trustOf(solver.solverId)).reputation[0]).toMatchObject({ verified_failures: 0, failures: 0 });
      expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: '1' });
      expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
    });

    test('with a verifier of the task\'s country online, the run goes to it and a fabricator is proven wrong as anywhere', async () => {
      const elsewhere = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: honestFetch });
      await markVerifier(elsewhere);
      const local = await startSolver({ capabilities: fetchingFrom('US', '1'), behaviour: honestFetch });
      await markVerifier(local);
      const cheat = await startSolver({ capabilities: fetchingFrom('US', '0.5'), behaviour: fabricatedFetch });
      const client = await registerAccount(stack.url, '100');
      const task = await scrapeFromDefaultCountry(client, '/location/local');
      expect(task.solver_id).toBe(cheat.solverId);
      const run = await concluded(task.task_id);
      expect(run).toMatchObject({ status: 'refuted', by_verifier: true, second_solver_id: local.solverId, third_solver_id: local.solverId, wrong_solver_id: cheat.solverId });
      expect(run.evidence!.cross_country).toBeUndefined();
      expect(await runCountry(run.run_task_id)).toBe('US');
      expect(await verificationOf(task.task_id, client.auth)).toBe('refunded');
    });
  });
});

describe('the default sampling: probation and escrow', () => {
  const startSolver = stackWith({
    TRUST_PROBATION_CANARIES: '1',
    CANARY_EVERY_TASKS: '50',
    REDUNDANT_RUN_FRACTION: '0.02',
    VERIFICATION_START_FRACTION: '0.5',
    EARNINGS_VESTING_SECONDS: '86400',
    EARNINGS_VESTING_CHECKS: '3',
  });

  /** Starts a solver and waits until it has passed its probation canary. */
  async function onProbationPassed(options: Parameters<typeof startSolver>[0]) {
    const solver = await startSolver(options);
    await waitFor(async () => (await trustOf(solver.solverId)).reputation.find((row: { task_type: string }) => row.task_type === 'proxy_fetch')?.client_work === true, 60_000);
    return solver;
  }

  type Client = Awaited<ReturnType<typeof registerAccount>>;
  /**
   * `count` client accounts with `points` each: a cheat serving several clients, as a real one does
   * (proofs from one client's tasks count once a day, "Verified client tasks").
   */
  const registerClients = async (count: number, points: string) => Promise.all(Array.from({ length: count }, () => registerAccount(stack.url, points)));

  /** Client fetches, `concurrency` at a time and the clients in turn, until `done` or `limit` are sent; the tasks served, with their client. */
  async function sendUntil(clients: Client[], prefix: string, limit: number, done: () => Promise<boolean>, concurrency = 2) {
    const served: { taskId: string; solverId: string; client: Client }[] = [];
    let sent = 0;
    while (sent < limit && !(await done())) {
      const batch = await Promise.all(
        Array.from({ length: Math.min(concurrency, limit - sent) }, async () => {
          const client = clients[sent % clients.length]!;
          const task = await clientFetch(client, `${prefix}/${sent++}`);
          return task && { ...task, client };
        }),
      );
      for (const task of batch) if (task) served.push(task);
    }
    return served;
  }
  /** The `verification` of each task served, asked with its client's key. */
  const verificationsOf = (served: { taskId: string; client: Client }[]) => Promise.all(served.map((task) => verificationOf(task.taskId, task.client.auth)));

  test('a cheat that fetches honestly whatever it suspects is a check is quarantined by verified client tasks; the honest solver beside it is not; its clients are refunded and the newcomers were verified at the high rate', async () => {
    const verifier = await onProbationPassed({ taskTypes: ['proxy_fetch'], price: '1', behaviour: honestFetch });
    await markVerifier(verifier);
    const honest = await onProbationPassed({ taskTypes: ['proxy_fetch'], price: '0.5', behaviour: honestFetch });
    const cheat = await onProbationPassed({ taskTypes: ['proxy_fetch'], price: '0.5', behaviour: fetchesSuspectsOnly });
    const clients = await registerClients(10, '100');
    const served = await sendUntil(clients, '/suspects', 300, async () => (await trustOf(cheat.solverId)).quarantined);
    const cheatServed = served.filter((task) => task.solverId === cheat.solverId);
    const byCheat = cheatServed.map((task) => task.taskId);
    const byHonest = served.filter((task) => task.solverId === honest.solverId).map((task) => task.taskId);
    expect((await trustOf(cheat.solverId)).quarantined).toBe(true);
    expect(byCheat.length).toBeLessThanOrEqual(100);
    // Keep the honest solver working beside the verifier after the cheat is gone.
    byHonest.push(...(await sendUntil(clients, '/honest', 60, async () => false)).filter((task) => task.solverId === honest.solverId).map((task) => task.taskId));
    await canariesSettled(stack.db, honest.solverId);
    expect((await trustOf(honest.solverId)).quarantined).toBe(false);
    expect((await trustOf(verifier.solverId)).quarantined).toBe(false);

    // Both were newcomers: verified at the start rate (half their tasks), far above the 2 % floor. The
    // cheat serves about 17 tasks: at a rate of one half, a share of 0.1 or less has odds of 1 in 7,000
    // (0.2, which 3 of 17 miss, 1 in 160).
    const cheatRuns = await runsOf(byCheat);
    const honestRuns = await runsOf(byHonest);
    expect(cheatRuns.length / byCheat.length).toBeGreaterThan(0.1);
    expect(honestRuns.length / byHonest.length).toBeGreaterThan(0.1);
    expect(cheatRuns.every((run) => run.status === 'refuted' && run.second_solver_id === verifier.solverId)).toBe(true);
    expect(honestRuns.every((run) => run.status === 'agreed')).toBe(true);

    // Proven wrong: refunded at once (a second proof from one client's tasks is disputed, its pay held);
    // the rest of what the cheat served is frozen, and refunded when confirmed.
    const clientOf = (taskId: string) => cheatServed.find((task) => task.taskId === taskId)!.client;
    for (const run of cheatRuns) expect(await verificationOf(run.task_id, clientOf(run.task_id).auth)).toBe(run.evidence!.correlated_with ? 'disputed' : 'refunded');
    const confirmed = await api(stack.url, 'POST', `/v1/admin/solvers/${cheat.solverId}/quarantine/confirm`, { body: {}, headers: admin });
    expect(confirmed.status).toBe(200);
    expect(await verificationsOf(cheatServed)).toEqual(cheatServed.map(() => 'refunded'));
    console.log(
      `suspects-only cheat: ${byCheat.length} client tasks before quarantine, ${cheatRuns.length} verified (all proven wrong); ` +
        `honest newcomer: ${honestRuns.length} of ${byHonest.length} verified, all agreed`,
    );
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });

  test('a solver with a long clean verified record is verified at the floor: at most 5 % of its client tasks', async () => {
    const verifier = await onProbationPassed({ taskTypes: ['proxy_fetch'], price: '1', behaviour: honestFetch });
    await markVerifier(verifier);
    const veteran = await onProbationPassed({ taskTypes: ['proxy_fetch'], price: '0.5', behaviour: honestFetch });
    // Its record, as 1,000 verified passes would have left it.
    await stack.db.query(sql.unsafe`UPDATE solver_reputation SET verified_passes = 1000 WHERE solver_id = ${veteran.solverId} AND task_type = 'proxy_fetch'`);
    const clients = await registerClients(1, '1000');
    const served = (await sendUntil(clients, '/veteran', 300, async () => false, 4)).filter((task) => task.solverId === veteran.solverId).map((task) => task.taskId);
    expect(served.length).toBeGreaterThan(250);
    const runs = await runsOf(served);
    console.log(`veteran: ${runs.length} of ${served.length} client tasks verified`);
    expect(runs.length / served.length).toBeLessThanOrEqual(0.05);
    expect(runs.every((run) => run.status === 'agreed')).toBe(true);
  });

  test('with no verifier, a cheat that makes up one client page in ten, priced like two honest solvers, is quarantined by majorities within 1,000 client tasks', async () => {
    const honest = [
      await onProbationPassed({ taskTypes: ['proxy_fetch'], price: '1', maxConcurrent: 2, behaviour: honestFetch }),
      await onProbationPassed({ taskTypes: ['proxy_fetch'], price: '1', maxConcurrent: 2, behaviour: honestFetch }),
    ];
    const cheat = await onProbationPassed({ taskTypes: ['proxy_fetch'], price: '1', maxConcurrent: 2, behaviour: fabricatesOneIn(10, stack.url) });
    const clients = await registerClients(50, '60');
    const served = await sendUntil(clients, '/tenth-majority', 1000, async () => (await trustOf(cheat.solverId)).quarantined, 4);
    const clientOf = (taskId: string) => served.find((task) => task.taskId === taskId)!.client;
    const byCheat = served.filter((task) => task.solverId === cheat.solverId).map((task) => task.taskId);
    const runs = await runsOf(served.map((task) => task.taskId));
    const statuses = runs.reduce<Record<string, number>>((counts, run) => ({ ...counts, [run.status]: (counts[run.status] ?? 0) + 1 }), {});
    const proven = runs.filter((run) => run.wrong_solver_id === cheat.solverId);
    console.log(
      `one-in-ten cheat, majorities only: ${served.length} client tasks, ${byCheat.length} served by the cheat, runs ${JSON.stringify(statuses)}, ` +
        `${proven.length} proving the cheat wrong (${proven.filter((run) => run.status === 'refuted').length} its own client tasks), record ${JSON.stringify((await trustOf(cheat.solverId)).reputation[0])}`,
    );
    expect((await trustOf(cheat.solverId)).quarantined).toBe(true);
    expect(byCheat.length).toBeLessThanOrEqual(1000);
    for (const run of proven.filter((run) => run.status === 'refuted')) expect(await verificationOf(run.task_id, clientOf(run.task_id).auth)).toBe(run.evidence!.correlated_with ? 'disputed' : 'refunded');
    expect(runs.every((run) => run.wrong_solver_id === null || run.wrong_solver_id === cheat.solverId)).toBe(true);
    for (const solver of honest) expect((await trustOf(solver.solverId)).quarantined).toBe(false);
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });

  test('a cheat that makes up one client page in ten is quarantined within 1,000 client tasks, and each wrong answer proven is refunded', async () => {
    const verifier = await onProbationPassed({ taskTypes: ['proxy_fetch'], price: '1', behaviour: honestFetch });
    await markVerifier(verifier);
    const cheat = await onProbationPassed({ taskTypes: ['proxy_fetch'], price: '0.4', maxConcurrent: 4, behaviour: fabricatesOneIn(10, stack.url) });
    const clients = await registerClients(50, '40');
    const served = await sendUntil(clients, '/tenth', 1000, async () => (await trustOf(cheat.solverId)).quarantined, 4);
    const cheatServed = served.filter((task) => task.solverId === cheat.solverId);
    const byCheat = cheatServed.map((task) => task.taskId);
    const clientOf = (taskId: string) => cheatServed.find((task) => task.taskId === taskId)!.client;
    const runs = await runsOf(byCheat);
    const statuses = runs.reduce<Record<string, number>>((counts, run) => ({ ...counts, [run.status]: (counts[run.status] ?? 0) + 1 }), {});
    console.log(`one-in-ten cheat: ${served.length} client tasks, ${byCheat.length} served by the cheat, runs ${JSON.stringify(statuses)}, record ${JSON.stringify((await trustOf(cheat.solverId)).reputation[0])}`);
    expect((await trustOf(cheat.solverId)).quarantined).toBe(true);
    expect(byCheat.length).toBeLessThanOrEqual(1000);
    const refuted = runs.filter((run) => run.status === 'refuted');
    expect(refuted.length).toBeGreaterThanOrEqual(3);
    // A second proof from one client's tasks within the day does not count: disputed, its pay held.
    for (const run of refuted) expect(await verificationOf(run.task_id, clientOf(run.task_id).auth)).toBe(run.evidence!.correlated_with ? 'disputed' : 'refunded');
    expect(runs.filter((run) => run.status === 'agreed').length + refuted.length).toBe(runs.length);
    console.log(`one-in-ten cheat: ${byCheat.length} client tasks before quarantine, ${Math.floor(byCheat.length / 10)} made up, ${runs.length} verified, ${refuted.length} proven wrong, ${refuted.filter((run) => !run.evidence!.correlated_with).length} of them counted and refunded at once`);
    // The checks its honest pages passed vest nothing while no sequential test has accepted it (one
    // rarely does, about 0.9^49): confirming the quarantine refunds every task it served.
    await vestEarnings(stack.db, stack.config.trust);
    const accepts = await stack.db.oneFirst(sql.type(z.object({ sprt_accepts: z.number() }))`
      SELECT sprt_accepts FROM solver_reputation WHERE solver_id = ${cheat.solverId} AND task_type = 'proxy_fetch'`);
    expect((await api(stack.url, 'POST', `/v1/admin/solvers/${cheat.solverId}/quarantine/confirm`, { body: {}, headers: admin })).status).toBe(200);
    const refunded = (await verificationsOf(cheatServed)).filter((verification) => verification === 'refunded').length;
    console.log(`one-in-ten cheat confirmed: ${refunded} of ${byCheat.length} client tasks refunded, sequential tests accepted ${accepts}`);
    if (accepts === 0) expect(refunded).toBe(byCheat.length);
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });
});
