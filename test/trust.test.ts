import { sql } from 'slonik';
import { z } from 'zod';
import { auditLedger, balanceFromEntries, getBalance, PLATFORM_ACCOUNT_ID } from '../src/db/ledger';
import { fixedSearchList, honestFetch, honestSearch, staleByOrigin } from './support/cheats';
import { DEFAULT_SEARCH_INDEX_DIR } from '../src/solver/config';
import { createLocalSearchBackend } from '../src/solver/search/local-index';
import { FakeSolver, suiteSolvers, waitFor, type TaskFrame } from './support/fake-solver';
import { canariesSettled, canaryCounts } from './support/trust';
import { ADMIN_KEY, api, freePort, registerAccount, startTestStack, type TestStack } from './support/stack';
import { BrowserPool } from '../src/solver/browser/browser-pool';
import { createScreenshotHandler } from '../src/solver/handlers/screenshot';
import { dueCanaries } from '../src/db/canaries';

/**
 * Trust (docs/trust.md): canaries catch a solver that makes pages up, quarantine it before it gets any
 * client task (probation), hold what it earned, and leave an honest solver alone over many tasks; the
 * platform account alone pays for canaries. Every stack here sweeps for due canaries once an hour
 * only: each canary is sent because the transaction that made it due said so.
 */

const PROBATION_CANARIES = 1;
const CANARY_EVERY_TASKS = 4;

let stack: TestStack;
const admin = { 'X-Admin-API-Key': ADMIN_KEY };

/** A stack with this trust policy for the tests of one describe block (the policy is per process). */
jest.setTimeout(180_000);

function stackWith(env: Record<string, string>, options: { canaryHost?: string } = {}) {
  beforeAll(async () => {
    // A canary host of one name (on this stack's port) serves every canary page from one site, as a
    // deployment's CANARY_HOSTS may; without it, each page is on a name under localhost.
    const port = options.canaryHost ? await freePort() : undefined;
    const hosts: Record<string, string> = options.canaryHost ? { CANARY_HOSTS: `http://${options.canaryHost}:${port}` } : {};
    stack = await startTestStack({ port, env: { CANARY_SWEEP_SECONDS: '3600', ...hosts, ...env } });
    // Canaries are paid from the platform's own points.
    const funded = await api(stack.url, 'POST', '/v1/admin/deposit', { body: { account_id: PLATFORM_ACCOUNT_ID, amount_points: '1000' }, headers: admin });
    expect(funded.status).toBe(200);
  });
  afterAll(async () => {
    await stack.close();
  });
  return suiteSolvers(() => stack.url);
}

/** A solver that fetches the page it is given and returns its text. */
const honest = honestFetch;

const trustOf = async (solverId: string) => (await api(stack.url, 'GET', `/v1/admin/solvers/${solverId}/trust`, { headers: admin })).json;


const countsOf = (solverId: string) => canaryCounts(stack.db, solverId, 'proxy_fetch');

/** Canary pages are served under names of localhost; this file's clients fetch 127.0.0.1. */
const isCanary = (frame: TaskFrame) => new URL(String(frame.payload.url)).hostname.endsWith('.localhost');

/** A behaviour that answers canaries honestly at once and holds each client task until the test releases it. */
function gated() {
  const held = new Map<string, () => void>();
  const behaviour = async (frame: TaskFrame, self: FakeSolver) => {
    if (!isCanary(frame)) await new Promise<void>((resolve) => held.set(frame.task_id, resolve));
    await honest(frame, self);
  };
  return { behaviour, release: (taskId: string) => held.get(taskId)!() };
}

describe('with probation', () => {
  const startSolver = stackWith({ TRUST_PROBATION_CANARIES: String(PROBATION_CANARIES), CANARY_EVERY_TASKS: String(CANARY_EVERY_TASKS) }, { canaryHost: 'notes.localhost' });

  test('a solver that makes pages up is quarantined by its first canary, gets no client task, and its earnings are held', async () => {
    // The scripted 'ok' behaviour answers every fetch with "# Hello", whatever the page says.
    const cheat = await startSolver({ taskTypes: ['proxy_fetch'] });
    const trust = await waitFor(async () => {
      const found = await trustOf(cheat.solverId);
      return found.quarantined ? found : null;
    });
    // Caught on probation: the canary was the only task it was ever sent.
    expect(cheat.received).toHaveLength(1);
    const [quarantine] = trust.quarantines;
    expect(quarantine).toMatchObject({ reason: 'canary_failed', task_type: 'proxy_fetch', cleared_at: null });
    expect(quarantine.evidence.returned_excerpt).toBe('# Hello');
    expect(quarantine.evidence.expected_token).toMatch(/^[0-9a-f]{32}$/);
    // The page was no /canary/ path on the API's origin but a page of a site, judged by its text.
    const url = new URL(String(cheat.received[0]!.payload.url));
    expect(url.hostname).toBe('notes.localhost');
    expect(url.pathname).not.toContain('canary');
    expect(quarantine.evidence.page).toMatchObject({ host: 'notes.localhost', path: url.pathname, measure: 'text_shingles', similarity: 0, threshold: 0.3 });
    // The canary's price (1) less the 10% fee, held on the solver's account.
    expect(trust).toMatchObject({ held_points: '0.9', held_tasks: 1 });
    expect(trust.reputation[0]).toMatchObject({ task_type: 'proxy_fetch', canary_failures: 1, client_work: false });

    // The admin list shows it with its evidence.
    const listed = (await api(stack.url, 'GET', '/v1/admin/quarantines', { headers: admin })).json.quarantines;
    expect(listed.find((q: { solver_id: string }) => q.solver_id === cheat.solverId)).toMatchObject({ held_points: '0.9', evidence: quarantine.evidence });

    // No client work: with no other solver online the request is refused, and nothing reaches it.
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${stack.url}/health` }, headers: client.auth });
    expect(fetched.status).toBe(503);
    expect(fetched.json.error.type).toBe('no_solver_available');
    expect(cheat.received).toHaveLength(1);

    // The solver sees its own quarantine and evidence.
    const own = (await api(stack.url, 'GET', '/v1/solver/stats', { headers: { Authorization: `Bearer ${cheat.apiKey}` } })).json;
    expect(own.trust).toMatchObject({ held_points: '0.9', quarantine: { reason: 'canary_failed' } });

    // Clearing gives the held earnings back, once.
    await cheat.close();
    await cheat.offline();
    const cleared = await api(stack.url, 'POST', `/v1/admin/solvers/${cheat.solverId}/quarantine/clear`, { body: { note: 'test' }, headers: admin });
    expect(cleared.status).toBe(200);
    expect(cleared.json).toMatchObject({ released_points: '0.9', quarantine: { cleared_note: 'test' } });
    const again = await api(stack.url, 'POST', `/v1/admin/solvers/${cheat.solverId}/quarantine/clear`, { body: {}, headers: admin });
    expect(again.status).toBe(404);
    expect(again.json.error.type).toBe('quarantine_not_found');
    const balance = await getBalance(stack.db, cheat.solverId);
    expect(balance).toMatchObject({ available_points: '0.9', held_points: '0' });
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  });

  test(`a solver that serves stale pages passes its probation canary, serves at most ${2 * CANARY_EVERY_TASKS - 1} client tasks, and its next canary quarantines it`, async () => {
    // It fetches the first page of each origin for real (its probation canary, on the API node's
    // origin) and answers every later fetch of that origin with that page's text.
    const cheat = await startSolver({ taskTypes: ['proxy_fetch'], behaviour: staleByOrigin() });
    await waitFor(async () => (await trustOf(cheat.solverId)).reputation[0]?.client_work === true);
    const client = await registerAccount(stack.url, '100');
    let served = 0;
    for (;;) {
      const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${stack.url}/health?i=${served}` }, headers: client.auth });
      if (fetched.status === 503) break;
      expect(fetched.status).toBe(200);
      served += 1;
      expect(served).toBeLessThanOrEqual(2 * CANARY_EVERY_TASKS - 1);
      await canariesSettled(stack.db, cheat.solverId);
    }
    const trust = await trustOf(cheat.solverId);
    expect(trust.quarantined).toBe(true);
    expect(trust.reputation[0]).toMatchObject({ canary_passes: 1, canary_failures: 1, client_work: false });
    // The evidence: the first canary's page (another page of the same site) where the second's was expected.
    const [quarantine] = trust.quarantines;
    expect(quarantine.reason).toBe('canary_failed');
    const [first, second] = cheat.received.filter(isCanary).map((frame) => new URL(String(frame.payload.url)));
    expect(first!.host).toBe(second!.host);
    expect(first!.pathname).not.toBe(second!.pathname);
    expect(quarantine.evidence.page.path).toBe(second!.pathname);
    expect(quarantine.evidence.page.similarity).toBeLessThan(0.3);
    expect(quarantine.evidence.returned_excerpt.length).toBeGreaterThan(200);
    // Two canaries and the client tasks between them; nothing after. Only the failed canary's payout is held.
    expect(cheat.received).toHaveLength(served + 2);
    expect(cheat.received.filter(isCanary)).toHaveLength(2);
    expect(trust.held_points).toBe('0.9');
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: String(served), held_points: '0' });
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  });

  test('a cleared solver on probation is sent a canary again as the clearing commits', async () => {
    const solver = await startSolver({ taskTypes: ['proxy_fetch'] });
    await waitFor(async () => (await trustOf(solver.solverId)).quarantined);
    expect(solver.received).toHaveLength(1);
    // It mends its ways; still connected, it is cleared, and its next canary is on its way at once.
    solver.behaviour = honest;
    const cleared = await api(stack.url, 'POST', `/v1/admin/solvers/${solver.solverId}/quarantine/clear`, { body: {}, headers: admin });
    expect(cleared.status).toBe(200);
    await waitFor(async () => (await trustOf(solver.solverId)).reputation[0]?.client_work === true, 30_000);
    expect(solver.received).toHaveLength(2);
    expect(solver.received.every(isCanary)).toBe(true);
  });

  test('a solver whose resolver cannot resolve the canary names is neither flooded nor failed: its canary ends unanswered, nobody\'s failure, and the next waits out a backoff', async () => {
    // Python's and Node's resolvers on some systems do not resolve names under localhost.
    const solver = await startSolver({
      taskTypes: ['proxy_fetch'],
      behaviour: (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        const host = new URL(String(frame.payload.url)).hostname;
        self.send({ type: 'error', attempt_id: frame.attempt_id, error: { type: 'host_not_found', message: `getaddrinfo ENOTFOUND ${host}` }, retryable: false });
      },
    });
    const unanswered = () => stack.db.oneFirst(sql.type(z.object({ n: z.number() }))`SELECT count(*)::int AS n FROM canaries WHERE solver_id = ${solver.solverId} AND verdict = 'unanswered'`);
    await waitFor(async () => (await unanswered()) === 1, 30_000);
    // Each unanswered canary made the next due at once: hundreds a minute. Now the next waits.
    await new Promise((resolve) => setTimeout(resolve, 5000));
    expect(solver.received).toHaveLength(1);
    expect(await unanswered()).toBe(1);
    const claims = await stack.db.any(sql.type(z.object({ verdict: z.string(), reason: z.string() }))`
      SELECT verdict, reason FROM target_failures WHERE solver_id = ${solver.solverId}`);
    expect(claims).toEqual([{ verdict: 'target', reason: 'canary_name' }]);
    const reputation = (await trustOf(solver.solverId)).reputation.find((row: { task_type: string }) => row.task_type === 'proxy_fetch');
    expect(reputation).toMatchObject({ failures: 0, score: 0.5, on_probation: true, client_work: false });
    // Due again once the backoff (30 s after one unanswered canary) has passed, as the next sweep finds.
    expect(await dueCanaries(stack.db, stack.config.trust, { solverId: solver.solverId })).toEqual([]);
    await stack.db.query(sql.unsafe`UPDATE canaries SET judged_at = judged_at - interval '31 seconds' WHERE solver_id = ${solver.solverId}`);
    expect(await dueCanaries(stack.db, stack.config.trust, { solverId: solver.solverId })).toEqual([expect.objectContaining({ taskType: 'proxy_fetch', sent: 1 })]);
  });

  test('a screenshot canary passes a solver that renders its page and quarantines one that makes images up', async () => {
    const pool = new BrowserPool({ executablePath: '/usr/bin/chromium', pages: 1, policy: { allowPrivateNetworks: true }, timeoutMs: 30_000 });
    const screenshot = createScreenshotHandler({ pool, policy: { allowPrivateNetworks: true }, timeoutMs: 30_000 });
    try {
      // A real browser's screenshot of the page, at the payload's (default) viewport.
      const renderer = await startSolver({
        taskTypes: ['screenshot'],
        behaviour: async (frame, self) => {
          self.send({ type: 'accept', attempt_id: frame.attempt_id });
          const result = await screenshot(frame.payload, { signal: new AbortController().signal });
          self.send({ type: 'result', attempt_id: frame.attempt_id, result });
        },
      });
      // The scripted 'ok' behaviour answers every screenshot with the same 1×1 image.
      const cheat = await startSolver({ taskTypes: ['screenshot'] });
      await waitFor(async () => (await trustOf(cheat.solverId)).quarantined, 60_000);
      await waitFor(async () => (await trustOf(renderer.solverId)).reputation[0]?.client_work === true, 60_000);
      expect((await trustOf(renderer.solverId)).quarantined).toBe(false);
      const [quarantine] = (await trustOf(cheat.solverId)).quarantines;
      expect(quarantine.evidence.returned_excerpt).not.toBe(quarantine.evidence.expected_token);
      // Both were sent the same frame and payload shape a client's screenshot request becomes.
      expect(Object.keys(renderer.received[0]!.payload).sort()).toEqual(Object.keys(cheat.received[0]!.payload).sort());
    } finally {
      await pool.close();
    }
  });

  test('an honest solver passes its canaries over many tasks and is never quarantined; the platform alone pays for canaries', async () => {
    const solver = await startSolver({ taskTypes: ['proxy_fetch'], behaviour: honest });
    // On probation until its first canary passes.
    await waitFor(async () => (await trustOf(solver.solverId)).reputation[0]?.client_work === true);
    const client = await registerAccount(stack.url, '1000');
    const TASKS = 40;
    for (let i = 0; i < TASKS; i++) {
      const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${stack.url}/health?i=${i}` }, headers: client.auth });
      expect(fetched.status).toBe(200);
      // This client waits for each canary before its next task, so that it counts them exactly.
      await canariesSettled(stack.db, solver.solverId);
    }
    const trust = await trustOf(solver.solverId);
    expect(trust.quarantined).toBe(false);
    expect(trust.held_points).toBe('0');
    // 1 on probation, then one every 1 to 7 attempts (mean 4): at least 40 / 7 more.
    expect(trust.reputation[0].canary_passes).toBeGreaterThanOrEqual(1 + Math.floor(TASKS / (2 * CANARY_EVERY_TASKS - 1)));
    expect(trust.reputation[0]).toMatchObject({ canary_failures: 0, client_work: true });

    // On the wire a canary is a task like any other: the same frame fields, the same payload fields.
    const canaryTasks = new Set(
      await stack.db.anyFirst(sql.type(z.object({ task_id: z.string() }))`SELECT task_id FROM canaries WHERE solver_id = ${solver.solverId}`),
    );
    const canaryFrame = solver.received.find((frame) => canaryTasks.has(frame.task_id))!;
    const clientFrame = solver.received.find((frame) => !canaryTasks.has(frame.task_id))!;
    expect(Object.keys(canaryFrame).sort()).toEqual(Object.keys(clientFrame).sort());
    expect(Object.keys(canaryFrame.payload).sort()).toEqual(Object.keys(clientFrame.payload).sort());
    expect(solver.received).toHaveLength(TASKS + canaryTasks.size);

    // Canaries are held and paid from the platform account only; the client paid for its own tasks only.
    const payers = await stack.db.anyFirst(sql.type(z.object({ account_id: z.string() }))`
      SELECT DISTINCT e.account_id FROM ledger_entries e JOIN canaries k ON k.task_id = e.hold_id WHERE e.kind IN ('hold', 'capture')`);
    expect(payers).toEqual([PLATFORM_ACCOUNT_ID]);
    const clientBalance = await getBalance(stack.db, client.account_id);
    expect(clientBalance).toMatchObject({ lifetime_spent_points: String(TASKS), held_points: '0' });
    expect(await balanceFromEntries(stack.db, PLATFORM_ACCOUNT_ID)).toEqual(await getBalance(stack.db, PLATFORM_ACCOUNT_ID));
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  });
});

describe('canary pages under a name the service resolves', () => {
  // An address is a name every resolver reads: a claim that it does not resolve is false.
  const startSolver = stackWith({ TRUST_PROBATION_CANARIES: '1', CANARY_EVERY_TASKS: String(CANARY_EVERY_TASKS) }, { canaryHost: '127.0.0.2' });

  test('a solver that claims it cannot resolve the canary name, to dodge the check, takes the failure', async () => {
    const solver = await startSolver({
      taskTypes: ['proxy_fetch'],
      behaviour: (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        self.send({ type: 'error', attempt_id: frame.attempt_id, error: { type: 'host_not_found', message: 'getaddrinfo ENOTFOUND' }, retryable: false });
      },
    });
    const claims = await waitFor(async () => {
      const rows = await stack.db.any(sql.type(z.object({ verdict: z.string(), reason: z.string(), target: z.string() }))`
        SELECT verdict, reason, target FROM target_failures WHERE solver_id = ${solver.solverId}`);
      return rows.length > 0 ? rows : null;
    }, 30_000);
    expect(claims).toEqual([{ verdict: 'solver', reason: 'platform_task', target: expect.stringContaining('127.0.0.2') }]);
    const reputation = await waitFor(async () => (await trustOf(solver.solverId)).reputation.find((row: { task_type: string; failures: number }) => row.task_type === 'proxy_fetch' && row.failures > 0.9));
    expect(reputation).toMatchObject({ on_probation: true, client_work: false });
    expect(reputation.score).toBeLessThan(0.5);
  });
});

describe('without probation', () => {
  const EVERY = 3;
  const startSolver = stackWith({ TRUST_PROBATION_CANARIES: '0', CANARY_EVERY_TASKS: String(EVERY), TRUST_MIN_SCORE: '0.3' });

  test(`a solver that makes pages up gets client tasks until its first canary, within ${2 * EVERY - 1} of them, and none after`, async () => {
    const cheat = await startSolver({ taskTypes: ['proxy_fetch'] });
    const client = await registerAccount(stack.url, '100');
    let served = 0;
    for (;;) {
      const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${stack.url}/health` }, headers: client.auth });
      if (fetched.status === 503) break;
      expect(fetched.status).toBe(200);
      served += 1;
      expect(served).toBeLessThanOrEqual(2 * EVERY - 1);
      await canariesSettled(stack.db, cheat.solverId);
    }
    expect((await trustOf(cheat.solverId)).quarantined).toBe(true);
    // What it served before the canary is not held; the canary's payout is.
    expect((await trustOf(cheat.solverId)).held_points).toBe('0.9');
    expect(cheat.received).toHaveLength(served + 1);
  });

  test('a canary due by count reaches the solver within seconds of the attempt that made it due', async () => {
    const solver = await startSolver({ taskTypes: ['proxy_fetch'], behaviour: honest });
    const client = await registerAccount(stack.url, '100');
    const delays: number[] = [];
    for (let i = 0; delays.length < 2; i++) {
      expect(i).toBeLessThan(6 * EVERY);
      const counts = await countsOf(solver.solverId);
      // No row yet: the first attempt draws the count, and may make the solver due at once.
      const makesDue = counts === null || counts.since + 1 === counts.due;
      const before = solver.received.length;
      const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${stack.url}/health?i=${i}` }, headers: client.auth });
      expect(fetched.status).toBe(200);
      // The client's answer comes after the commit that ended its attempt.
      const answered = Date.now();
      if (makesDue && (counts !== null || (await countsOf(solver.solverId))!.due === 1)) {
        await waitFor(() => solver.received.slice(before + 1).some(isCanary), 30_000, 20);
        delays.push(Date.now() - answered);
      }
      await canariesSettled(stack.db, solver.solverId);
    }
    // Nothing looks for due canaries but the hourly sweep: each came because its attempt said so.
    // (A second or two on an idle machine; the bound leaves room for a loaded one.)
    for (const delay of delays) expect(delay).toBeLessThan(15_000);
  });

  test("a canary waits for its solver's busy slot and is handed it before client tasks waiting since before it", async () => {
    const gate = gated();
    const solver = await startSolver({ taskTypes: ['proxy_fetch'], behaviour: gate.behaviour, maxConcurrent: 1 });
    const client = await registerAccount(stack.url, '100');
    const fetch = (i: number) => api(stack.url, 'POST', '/v1/fetch', { body: { url: `${stack.url}/health?i=${i}` }, headers: client.auth });
    const queued = () => stack.db.anyFirst(sql.type(z.object({ task_id: z.string() }))`SELECT task_id FROM task_queue WHERE task_type = 'proxy_fetch' ORDER BY arrival`);
    // Client tasks one at a time until the next attempt to end makes the solver due a canary.
    for (let i = 0; ; i++) {
      expect(i).toBeLessThan(6 * EVERY);
      const counts = await countsOf(solver.solverId);
      if (counts && counts.since + 1 === counts.due) break;
      const pending = fetch(i);
      const frame = await waitFor(() => solver.received.find((f) => !isCanary(f) && f.payload.url === `${stack.url}/health?i=${i}`));
      gate.release(frame.task_id);
      expect((await pending).status).toBe(200);
      await canariesSettled(stack.db, solver.solverId);
    }
    // A holds the only slot; B, then C, wait for it.
    const a = fetch(100);
    const frameA = await waitFor(() => solver.received.find((f) => f.payload.url === `${stack.url}/health?i=100`));
    const b = fetch(101);
    await waitFor(async () => (await queued()).length === 1);
    const c = fetch(102);
    await waitFor(async () => (await queued()).length === 2);
    // A's end makes the solver due: its slot goes to B, and the canary waits behind C for the next.
    gate.release(frameA.task_id);
    const frameB = await waitFor(() => solver.received.find((f) => f.payload.url === `${stack.url}/health?i=101`));
    const canaryTask = await waitFor(() =>
      stack.db.maybeOneFirst(sql.type(z.object({ task_id: z.string() }))`
        SELECT q.task_id FROM task_queue q JOIN canaries k USING (task_id) WHERE k.solver_id = ${solver.solverId}`),
    );
    expect(await queued()).toHaveLength(2);
    const sent = solver.received.length;
    gate.release(frameB.task_id);
    // B's slot goes to the canary, though C waited since before it.
    const next = await waitFor(() => solver.received[sent], 30_000, 20);
    expect(next.task_id).toBe(canaryTask);
    const frameC = await waitFor(() => solver.received.find((f) => f.payload.url === `${stack.url}/health?i=102`), 30_000);
    gate.release(frameC.task_id);
    expect((await a).status).toBe(200);
    expect((await b).status).toBe(200);
    expect((await c).status).toBe(200);
    await canariesSettled(stack.db, solver.solverId);
    // (B's or C's end may have made it due another, drawn anew.)
    const [reputation] = (await trustOf(solver.solverId)).reputation;
    expect(reputation.canary_passes).toBeGreaterThanOrEqual(1);
    expect(reputation.canary_failures).toBe(0);
  });

  test('a solver whose attempts fail drops below the score threshold and gets no client task', async () => {
    const failing = await startSolver({ taskTypes: ['proxy_fetch'], behaviour: 'error' });
    const client = await registerAccount(stack.url, '100');
    // Score (S + 1) / (S + F + 2): 1/3 after one failure, 1/4 (below 0.3) after two.
    for (let i = 0; i < 2; i++) {
      const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${stack.url}/health` }, headers: client.auth });
      expect(fetched.status).toBe(502);
    }
    const trust = await trustOf(failing.solverId);
    expect(trust.quarantined).toBe(false);
    expect(trust.reputation[0].client_work).toBe(false);
    expect(trust.reputation[0].score).toBeLessThan(0.3);
    const refused = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${stack.url}/health` }, headers: client.auth });
    expect(refused.status).toBe(503);
  });
});

describe('search canaries against the bundled index', () => {
  const EVERY = 4;
  const startSolver = stackWith({ TRUST_PROBATION_CANARIES: '1', CANARY_EVERY_TASKS: String(EVERY), CANARY_SEARCH_ORACLE: 'bundled' });
  // The index the bundled solver searches, which the oracle reads too.
  const index = createLocalSearchBackend(DEFAULT_SEARCH_INDEX_DIR);
  const searcher = honestSearch((query, count) => index.search(query, count, new AbortController().signal));
  const canaryQueries = async (solverId: string) =>
    stack.db.anyFirst(sql.type(z.object({ token: z.string() }))`SELECT token FROM canaries WHERE solver_id = ${solverId} AND task_type = 'web_search' ORDER BY created_at`);

  test('a solver that returns the same results for every query is quarantined by its first search canary and gets no client search', async () => {
    const cheat = await startSolver({ taskTypes: ['web_search'], behaviour: fixedSearchList });
    const trust = await waitFor(async () => {
      const found = await trustOf(cheat.solverId);
      return found.quarantined ? found : null;
    });
    expect(cheat.received).toHaveLength(1);
    const [quarantine] = trust.quarantines;
    expect(quarantine).toMatchObject({ reason: 'canary_failed', task_type: 'web_search' });
    expect(quarantine.evidence.search).toMatchObject({ oracle: 'bundled', measure: 'result_url_overlap', similarity: 0, threshold: 0.2 });
    expect(quarantine.evidence.search.oracle_urls.length).toBeGreaterThan(0);
    expect(quarantine.evidence.expected_token).toBe(cheat.received[0]!.payload.query);
    const client = await registerAccount(stack.url, '100');
    const searched = await api(stack.url, 'POST', '/v1/search', { body: { query: 'solver points' }, headers: client.auth });
    expect(searched.status).toBe(503);
    expect(cheat.received).toHaveLength(1);
    expect(trust.held_points).toBe('0.9');
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  });

  test('an honest solver searching the same index passes its search canaries, fresh queries that look like client searches', async () => {
    const solver = await startSolver({ taskTypes: ['web_search'], behaviour: searcher });
    await waitFor(async () => (await trustOf(solver.solverId)).reputation[0]?.client_work === true);
    const client = await registerAccount(stack.url, '100');
    const TASKS = 16;
    for (let i = 0; i < TASKS; i++) {
      const searched = await api(stack.url, 'POST', '/v1/search', { body: { query: ['ledger holds', 'solver agent', 'chat models', 'screenshot viewport'][i % 4] }, headers: client.auth });
      expect(searched.status).toBe(200);
      await canariesSettled(stack.db, solver.solverId);
    }
    const trust = await trustOf(solver.solverId);
    expect(trust.quarantined).toBe(false);
    expect(trust.reputation[0]).toMatchObject({ task_type: 'web_search', canary_failures: 0, client_work: true });
    expect(trust.reputation[0].canary_passes).toBeGreaterThanOrEqual(1 + Math.floor(TASKS / (2 * EVERY - 1)));
    // Each canary asks a query of its own, in the payload a client's search becomes.
    const queries = await canaryQueries(solver.solverId);
    expect(new Set(queries).size).toBe(queries.length);
    const canaryFrame = solver.received.find((frame) => frame.payload.query === queries[0])!;
    const clientFrame = solver.received.find((frame) => !queries.includes(String(frame.payload.query)))!;
    expect(Object.keys(canaryFrame).sort()).toEqual(Object.keys(clientFrame).sort());
    expect(canaryFrame.payload).toEqual({ query: queries[0], count: clientFrame.payload.count });
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  });
});
