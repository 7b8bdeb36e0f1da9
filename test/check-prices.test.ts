import { sql } from 'slonik';
import { z } from 'zod';
import { auditLedger, balanceFromEntries, getBalance, PLATFORM_ACCOUNT_ID } from '../src/db/ledger';
import { fabricatedFetch, honestFetch, type Script } from './support/cheats';
import { suiteSolvers, waitFor, type FakeSolver } from './support/fake-solver';
import { canariesSettled } from './support/trust';
import { ADMIN_KEY, api, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * No price is above the checks (docs/trust.md, "Prices"): every canary holds CHECK_PRICE_CEILING_POINTS
 * and pays the checked solver its own price within it, so a solver is checked, and leaves probation,
 * at any price up to the ceiling; an offer above it gets no client work, however it got there.
 */

jest.setTimeout(240_000);

let stack: TestStack;
const admin = { 'X-Admin-API-Key': ADMIN_KEY };
const LEDGER_EXACT = { accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 };

function stackWith(env: Record<string, string>) {
  beforeAll(async () => {
    stack = await startTestStack({ env: { CANARY_SWEEP_SECONDS: '3600', ...env } });
    const funded = await api(stack.url, 'POST', '/v1/admin/deposit', { body: { account_id: PLATFORM_ACCOUNT_ID, amount_points: '1000' }, headers: admin });
    expect(funded.status).toBe(200);
  });
  afterAll(async () => {
    await stack.close();
  });
  return suiteSolvers(() => stack.url);
}

const trustOf = async (solverId: string) => (await api(stack.url, 'GET', `/v1/admin/solvers/${solverId}/trust`, { headers: admin })).json;

/** The task ids of a solver's canaries (read from the service: nothing on the wire tells them apart). */
const canaryTasks = async (solverId: string) =>
  new Set(await stack.db.anyFirst(sql.type(z.object({ task_id: z.string() }))`SELECT task_id FROM canaries WHERE solver_id = ${solverId}`));

/** What the platform paid for each of a solver's canaries (its settled price), in order. */
const canaryCharges = async (solverId: string) =>
  stack.db.anyFirst(sql.type(z.object({ price: z.string().nullable() }))`
    SELECT trim_scale(t.price_points)::text AS price FROM canaries k JOIN tasks t USING (task_id)
    WHERE k.solver_id = ${solverId} AND k.verdict IN ('passed', 'failed') ORDER BY k.created_at`);

/** The client tasks a solver was sent (its frames less its canaries). */
const clientFrames = async (solver: FakeSolver) => {
  const canaries = await canaryTasks(solver.solverId);
  return solver.received.filter((frame) => !canaries.has(frame.task_id));
};

/** A proxy_fetch capability at `price`, as FakeSolver registers it. */
const fetchAt = (price: string) => [
  { task_type: 'proxy_fetch', tier: 'standard', billing_type: 'per_request', fulfillment_path: 'http', provider_name: 'fake', model_name: 'fake', marginal_cost: 0, min_price_points: price, max_concurrent: 8 },
];
const reprice = async (solver: FakeSolver, price: string) => {
  const registered = await api(stack.url, 'POST', '/v1/solver/capabilities', { body: fetchAt(price), headers: { Authorization: `Bearer ${solver.apiKey}` } });
  expect(registered.status).toBe(200);
};

/** How long a task no solver may serve waits before it is counted unserved. */
const UNSERVED_SECONDS = 3;

/**
 * A client's fetch through POST /v1/tasks with its own cap, followed to its end. One no solver may serve
 * waits out its timeout: matching offers a task to an eligible solver within milliseconds, so a few
 * seconds show that none was.
 */
async function taskAt(client: { auth: Record<string, string> }, maxPrice: string, i: number, timeoutSeconds = 10) {
  const created = await api(stack.url, 'POST', '/v1/tasks', {
    body: { task_type: 'proxy_fetch', payload: { url: `${stack.url}/health?p=${i}` }, max_price_points: maxPrice, timeout_seconds: timeoutSeconds },
    headers: client.auth,
  });
  if (created.status !== 200) return { status: created.status, error: created.json.error?.type as string | undefined };
  const taskId = created.json.task_id as string;
  const done = await waitFor(async () => {
    const task = (await api(stack.url, 'GET', `/v1/tasks/${taskId}`, { headers: client.auth })).json;
    return ['completed', 'failed', 'timed_out', 'cancelled'].includes(task.status) ? task : null;
  }, 30_000);
  return { status: 200, task: done };
}

describe('default settings, canaries by count', () => {
  const EVERY = 3;
  const startSolver = stackWith({ CANARY_EVERY_TASKS: String(EVERY) });

  test(`a fabricator priced at 3 beside two honest solvers at 4 serves at most ${2 * EVERY - 1} client fetches, then a canary at its own price quarantines it`, async () => {
    const cheat = await startSolver({ taskTypes: ['proxy_fetch'], price: '3', behaviour: fabricatedFetch });
    const honest = [await startSolver({ taskTypes: ['proxy_fetch'], price: '4', behaviour: honestFetch }), await startSolver({ taskTypes: ['proxy_fetch'], price: '4', behaviour: honestFetch })];
    const client = await registerAccount(stack.url, '1000');
    let charged = 0;
    for (let i = 0; !(await trustOf(cheat.solverId)).quarantined; i++) {
      // The cheapest offer takes every fetch until it is caught; without a canary at its price it never is.
      expect(i).toBeLessThan(2 * EVERY - 1 + 1);
      const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${stack.url}/health?i=${i}` }, headers: client.auth });
      expect(fetched.status).toBe(200);
      charged += Number(fetched.headers.get('x-points-charged'));
      await canariesSettled(stack.db, cheat.solverId);
    }
    const served = (await clientFrames(cheat)).length;
    expect(served).toBeGreaterThanOrEqual(1);
    expect(served).toBeLessThanOrEqual(2 * EVERY - 1);
    const trust = await trustOf(cheat.solverId);
    expect(trust.quarantines[0]).toMatchObject({ reason: 'canary_failed', task_type: 'proxy_fetch' });
    expect(trust.quarantines[0].evidence.returned_excerpt).toBe('# Hello');
    // The platform paid the canary at the solver's own price (3), held less the 10 % fee.
    expect(await canaryCharges(cheat.solverId)).toEqual(['3']);
    expect(trust).toMatchObject({ held_points: '2.7', held_tasks: 1 });

    // The next fetch goes to an honest solver, at its price.
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${stack.url}/health?after` }, headers: client.auth });
    expect(fetched.status).toBe(200);
    expect(fetched.headers.get('x-points-charged')).toBe('4');
    charged += 4;
    expect((await clientFrames(cheat)).length).toBe(served);
    for (const solver of honest) await canariesSettled(stack.db, solver.solverId);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: String(charged), held_points: '0' });
    expect(await balanceFromEntries(stack.db, PLATFORM_ACCOUNT_ID)).toEqual(await getBalance(stack.db, PLATFORM_ACCOUNT_ID));
    expect(await auditLedger(stack.db)).toEqual(LEDGER_EXACT);
  });

  test('a solver priced above the ceiling (100) gets no client work, even from a client whose cap reaches it', async () => {
    const pricey = await startSolver({ taskTypes: ['proxy_fetch'], price: '150' });
    const client = await registerAccount(stack.url, '1000');
    const answer = await taskAt(client, '200', 0, UNSERVED_SECONDS);
    // No eligible solver: refused, or ended without a result; nothing reached the solver.
    expect(answer.task?.status ?? answer.error).not.toBe('completed');
    expect(pricey.received).toHaveLength(0);
    expect((await trustOf(pricey.solverId)).reputation[0]).toMatchObject({ task_type: 'proxy_fetch', client_work: false });
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: '0', held_points: '0' });
    expect(await auditLedger(stack.db)).toEqual(LEDGER_EXACT);
  });
});

describe('probation, with a ceiling of 5', () => {
  const EVERY = 3;
  const startSolver = stackWith({ TRUST_PROBATION_CANARIES: '1', CANARY_EVERY_TASKS: String(EVERY), CHECK_PRICE_CEILING_POINTS: '5' });

  test('the market tells solvers the ceiling of the types checks are sent for', async () => {
    const account = await registerAccount(stack.url);
    const market = (await api(stack.url, 'GET', '/v1/solver/market', { headers: account.auth })).json;
    expect(market.task_types.proxy_fetch.check_price_ceiling_points).toBe('5');
    expect(market.task_types.chat_completion.check_price_ceiling_points).toBe('5');
    // No search oracle: no web_search canary, no ceiling.
    expect(market.task_types.web_search.check_price_ceiling_points).toBeNull();
  });

  test('an honest solver priced at 2 passes its probation canary, paid its own price, and gets client work', async () => {
    const solver = await startSolver({ taskTypes: ['proxy_fetch'], price: '2', behaviour: honestFetch });
    await waitFor(async () => (await trustOf(solver.solverId)).reputation[0]?.client_work === true, 60_000);
    expect((await trustOf(solver.solverId)).reputation[0]).toMatchObject({ canary_passes: 1, on_probation: false });
    expect(await canaryCharges(solver.solverId)).toEqual(['2']);
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${stack.url}/health` }, headers: client.auth });
    expect(fetched.status).toBe(200);
    expect(fetched.headers.get('x-points-charged')).toBe('2');
    await canariesSettled(stack.db, solver.solverId);
    expect(await auditLedger(stack.db)).toEqual(LEDGER_EXACT);
  });

  test('a solver priced above the ceiling is sent no canary and stays without client work', async () => {
    const pricey = await startSolver({ taskTypes: ['proxy_fetch'], price: '6', behaviour: honestFetch });
    const client = await registerAccount(stack.url, '100');
    const answer = await taskAt(client, '50', 0, UNSERVED_SECONDS);
    expect(answer.task?.status ?? answer.error).not.toBe('completed');
    expect(pricey.received).toHaveLength(0);
    expect(await canaryTasks(pricey.solverId)).toEqual(new Set());
    expect((await trustOf(pricey.solverId)).reputation[0]).toMatchObject({ client_work: false, on_probation: true });
  });

  test('a solver that raises its price past the ceiling after passing its canary gets no client work; back within it, its next canary (at its new price) catches it', async () => {
    // Honest until its probation canary passes; then it makes pages up.
    let script: Script = honestFetch;
    const cheat = await startSolver({ taskTypes: ['proxy_fetch'], price: '2', behaviour: (frame, self) => script(frame, self) });
    await waitFor(async () => (await trustOf(cheat.solverId)).reputation[0]?.client_work === true, 60_000);
    script = fabricatedFetch;
    const client = await registerAccount(stack.url, '1000');

    // Above the ceiling: no check could pay it, so no client may be served by it, whatever its cap.
    await reprice(cheat, '40');
    expect((await trustOf(cheat.solverId)).reputation[0]).toMatchObject({ client_work: false });
    const refused = await taskAt(client, '50', 0, UNSERVED_SECONDS);
    expect(refused.task?.status ?? refused.error).not.toBe('completed');
    expect(await clientFrames(cheat)).toHaveLength(0);

    // Back within the ceiling (4, above the old canary cap of 1): served, and checked at that price.
    await reprice(cheat, '4');
    let served = 0;
    for (let i = 1; !(await trustOf(cheat.solverId)).quarantined; i++) {
      expect(served).toBeLessThanOrEqual(2 * EVERY - 1);
      const answer = await taskAt(client, '50', i);
      if (answer.task?.status === 'completed') {
        // Billed at the price it was matched at, never more.
        expect(answer.task.charged_points).toBe('4');
        served += 1;
      }
      await canariesSettled(stack.db, cheat.solverId);
    }
    expect(served).toBe((await clientFrames(cheat)).length);
    expect(await canaryCharges(cheat.solverId)).toEqual(['2', '4']);
    expect((await trustOf(cheat.solverId)).quarantines[0]).toMatchObject({ reason: 'canary_failed' });
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: String(4 * served), held_points: '0' });
    expect(await auditLedger(stack.db)).toEqual(LEDGER_EXACT);
  });

  test('a price raised while an attempt runs is not what it is billed: the attempt keeps the price it was matched at', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    let gate = false;
    const solver = await startSolver({
      taskTypes: ['proxy_fetch'],
      price: '2',
      behaviour: async (frame, self) => {
        if (gate) await held;
        await honestFetch(frame, self);
      },
    });
    await waitFor(async () => (await trustOf(solver.solverId)).reputation[0]?.client_work === true, 60_000);
    await canariesSettled(stack.db, solver.solverId);
    gate = true;
    const client = await registerAccount(stack.url, '100');
    const pending = api(stack.url, 'POST', '/v1/fetch', { body: { url: `${stack.url}/health?raised` }, headers: client.auth });
    await waitFor(async () => (await clientFrames(solver)).length === 1);
    await reprice(solver, '5');
    release();
    const fetched = await pending;
    expect(fetched.status).toBe(200);
    expect(fetched.headers.get('x-points-charged')).toBe('2');
    await canariesSettled(stack.db, solver.solverId);
    expect(await auditLedger(stack.db)).toEqual(LEDGER_EXACT);
  });
});

describe('probation at the market price (docs/trust.md, "Checks that cannot be drained")', () => {
  const startSolver = stackWith({ TRUST_PROBATION_CANARIES: '1', CANARY_EVERY_TASKS: '0' });
  const platformAvailable = async () => Number((await getBalance(stack.db, PLATFORM_ACCOUNT_ID))!.available_points);

  test('sybils priced at the ceiling are sent no probation check and drain nothing; priced at a default task\'s hold each costs at most that; a newcomer after them is still checked', async () => {
    const before = await platformAvailable();
    const sybils = [];
    for (let i = 0; i < 3; i++) sybils.push(await startSolver({ taskTypes: ['proxy_fetch'], price: '100', behaviour: honestFetch }));
    // An honest newcomer at 1, connected after them: checked at once, paid its own price.
    const honest = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: honestFetch });
    await waitFor(async () => (await trustOf(honest.solverId)).reputation[0]?.client_work === true, 60_000);
    expect(await canaryCharges(honest.solverId)).toEqual(['1']);
    for (const sybil of sybils) {
      expect(await canaryTasks(sybil.solverId)).toEqual(new Set());
      expect((await trustOf(sybil.solverId)).reputation[0]).toMatchObject({ on_probation: true, client_work: false });
    }
    // The platform paid the newcomer's price, and got its 10 % fee back.
    expect(before - (await platformAvailable())).toBeCloseTo(0.9, 9);

    // Priced at what a client's default web task holds (10), each sybil is checked, and costs that once.
    for (const sybil of sybils) await reprice(sybil, '10');
    for (const sybil of sybils) await waitFor(async () => (await trustOf(sybil.solverId)).reputation[0]?.on_probation === false, 60_000);
    for (const sybil of sybils) expect(await canaryCharges(sybil.solverId)).toEqual(['10']);
    expect(before - (await platformAvailable())).toBeCloseTo(0.9 + 3 * 9, 9);

    // Checking goes on for whoever comes next.
    const next = await startSolver({ taskTypes: ['proxy_fetch'], price: '2', behaviour: honestFetch });
    await waitFor(async () => (await trustOf(next.solverId)).reputation[0]?.client_work === true, 60_000);
    expect(await canaryCharges(next.solverId)).toEqual(['2']);
    expect(await auditLedger(stack.db)).toEqual(LEDGER_EXACT);
  });
});
