import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { sql } from 'slonik';
import { Webhook } from 'standardwebhooks';
import { auditLedger, getBalance, PLATFORM_ACCOUNT_ID } from '../src/db/ledger';
import { fabricatedFetch, honestFetch, type Script } from './support/cheats';
import { vestEarnings } from '../src/trust/escrow';
import { recordVerifiedOutcomeIn } from '../src/trust/verifiers';
import { suiteSolvers, waitFor, type FakeSolver } from './support/fake-solver';
import { canariesSettled } from './support/trust';
import { ADMIN_KEY, api, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * Escrow and refunds (docs/trust.md, "Escrow and refunds"): a solver's pay is held until it vests; a
 * quarantine freezes it; a confirmed quarantine forfeits it to refund the clients of those tasks; a
 * cleared one releases it. The cheats are scripted as a dishonest solver author would write them.
 */

jest.setTimeout(240_000);

let stack: TestStack;
const admin = { 'X-Admin-API-Key': ADMIN_KEY };
const AUDIT_EXACT = { accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 };
const CANARY_EVERY_TASKS = 3;
// The cheat's price, and its pay for a task after the 10 % fee.
const CHEAT_PRICE = '5';
const CHEAT_PAY = 4.5;

/** A stack with this escrow policy for the tests of one describe block (the policy is per process). */
function stackWith(env: Record<string, string>) {
  beforeAll(async () => {
    stack = await startTestStack({ env: { CANARY_SWEEP_SECONDS: '3600', CANARY_PRICE_POINTS: '10', ...env } });
    const funded = await api(stack.url, 'POST', '/v1/admin/deposit', {
      body: { account_id: PLATFORM_ACCOUNT_ID, amount_points: '1000' },
      headers: admin,
    });
    expect(funded.status).toBe(200);
  });
  afterAll(async () => {
    await stack.close();
  });
  return suiteSolvers(() => stack.url);
}

/** A webhook receiver on 127.0.0.1 that accepts everything. */
async function startReceiver() {
  const received: { headers: Record<string, string>; body: string }[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      const headers = {
        'webhook-id': String(req.headers['webhook-id']),
        'webhook-timestamp': String(req.headers['webhook-timestamp']),
        'webhook-signature': String(req.headers['webhook-signature']),
      };
      received.push({ headers, body: Buffer.concat(chunks).toString() });
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`,
    received,
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

const bearer = (solver: FakeSolver) => ({ Authorization: `Bearer ${solver.apiKey}` });
const trustOf = async (solverId: string) =>
  (await api(stack.url, 'GET', `/v1/admin/solvers/${solverId}/trust`, { headers: admin })).json;
/** A solver's balance (strings only) with its vesting detail from its own route beside it. */
async function walletOf(solver: FakeSolver) {
  const [balance, earnings] = await Promise.all([
    api(stack.url, 'GET', '/v1/balance', { headers: bearer(solver) }),
    api(stack.url, 'GET', '/v1/solver/earnings', { headers: bearer(solver) }),
  ]);
  expect(Object.values(balance.json).every((value) => typeof value === 'string')).toBe(true);
  expect(earnings.json.solver_id).toBe(solver.solverId);
  return { ...balance.json, earnings: earnings.json };
}
const taskOf = async (taskId: string, auth: Record<string, string>) =>
  (await api(stack.url, 'GET', `/v1/tasks/${taskId}`, { headers: auth })).json;

/**
 * Client fetches served by a cheat at CHEAT_PRICE that makes every page up, until its canary
 * quarantines it (503: no other fetch solver). Returns the served tasks' ids.
 */
async function serveUntilQuarantined(
  cheat: FakeSolver,
  client: { auth: Record<string, string> },
  afterFirst?: () => Promise<void>,
): Promise<string[]> {
  const served: string[] = [];
  for (;;) {
    const fetched = await api(stack.url, 'POST', '/v1/fetch', {
      body: { url: `${stack.url}/health?i=${served.length}` },
      headers: client.auth,
    });
    if (fetched.status === 503) break;
    expect(fetched.status).toBe(200);
    served.push(fetched.headers.get('x-task-id')!);
    if (served.length === 1) await afterFirst?.();
    expect(served.length).toBeLessThanOrEqual(2 * CANARY_EVERY_TASKS - 1);
    await canariesSettled(stack.db, cheat.solverId);
  }
  expect((await trustOf(cheat.solverId)).quarantined).toBe(true);
  return served;
}

describe('with a long vesting period', () => {
  const startSolver = stackWith({
    TRUST_PROBATION_CANARIES: '0',
    CANARY_EVERY_TASKS: String(CANARY_EVERY_TASKS),
    EARNINGS_VESTING_SECONDS: '3600',
    EARNINGS_VESTING_CHECKS: '0',
  });

  test('a fabricator cannot spend its unvested pay; its quarantine freezes it; confirming refunds every client exactly what it paid', async () => {
    const receiver = await startReceiver();
    const client = await registerAccount(stack.url, '100');
    expect(
      (await api(stack.url, 'PUT', '/v1/account/webhook', { body: { url: receiver.url }, headers: client.auth }))
        .status,
    ).toBe(200);
    const { secret } = (await api(stack.url, 'GET', '/v1/account/webhook-secret', { headers: client.auth })).json;
    // An honest search solver at 1: what the cheat, as a client, would spend its earnings on.
    await startSolver({ taskTypes: ['web_search'], price: '1' });
    const cheat = await startSolver({ taskTypes: ['proxy_fetch'], price: CHEAT_PRICE });

    const served = await serveUntilQuarantined(cheat, client, async () => {
      // Paid for one task, the cheat sees its pay held, not spendable...
      const balance = await walletOf(cheat);
      expect(balance).toMatchObject({
        available_points: '0',
        earnings: { unvested_points: String(CHEAT_PAY), unvested_tasks: 1 },
      });
      expect(
        balance.earnings.next_vesting_at === null ||
          Date.parse(balance.earnings.next_vesting_at) > Date.now() + 3_000_000,
      ).toBe(true);
      // ...and cannot spend it as a client with its own key before anyone looks.
      const spend = await api(stack.url, 'POST', '/v1/tasks', {
        body: { task_type: 'web_search', payload: { query: 'cash out' }, max_price_points: 1 },
        headers: bearer(cheat),
      });
      expect(spend.status).toBe(402);
      expect(spend.json.error.type).toBe('insufficient_balance');
    });
    const paid = served.length * Number(CHEAT_PRICE);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({
      available_points: String(100 - paid),
      lifetime_spent_points: String(paid),
    });

    // Frozen: every client task it served, and the failed canary's pay, held; the tasks disputed.
    const heldPay = CHEAT_PAY * (served.length + 1);
    expect(await trustOf(cheat.solverId)).toMatchObject({
      held_points: String(heldPay),
      held_tasks: served.length + 1,
    });
    const frozen = await walletOf(cheat);
    expect(frozen).toMatchObject({
      available_points: '0',
      held_points: String(heldPay),
      earnings: { unvested_points: String(heldPay), frozen: true, next_vesting_at: null },
    });
    for (const taskId of served) expect((await taskOf(taskId, client.auth)).verification).toBe('disputed');
    const platformBefore = await getBalance(stack.db, PLATFORM_ACCOUNT_ID);

    // Two admins confirm at once: the pay is forfeited and each client refunded once.
    const [one, two] = await Promise.all(
      [1, 2].map(() =>
        api(stack.url, 'POST', `/v1/admin/solvers/${cheat.solverId}/quarantine/confirm`, {
          body: { note: 'made pages up' },
          headers: admin,
        }),
      ),
    );
    expect([one.status, two.status]).toEqual([200, 200]);
    const confirmed = one.json.refunded_tasks > 0 ? one : two;
    expect((one.json.refunded_tasks > 0 ? two : one).json).toMatchObject({
      refunded_tasks: 0,
      forfeited_points: '0',
      refunded_points: '0',
    });
    // The canary is refunded to the platform, which paid for it.
    expect(confirmed.json).toMatchObject({
      refunded_tasks: served.length + 1,
      forfeited_points: String(heldPay),
      refunded_points: String(paid + Number(CHEAT_PRICE)),
      quarantine: { confirmed_note: 'made pages up', cleared_at: null },
    });

    // The client has back exactly what it paid; the cheat keeps nothing; the platform gave its fees back.
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({
      available_points: '100',
      held_points: '0',
      lifetime_spent_points: '0',
    });
    expect(await getBalance(stack.db, cheat.solverId)).toMatchObject({
      available_points: '0',
      held_points: '0',
      lifetime_earned_points: '0',
    });
    const platformAfter = await getBalance(stack.db, PLATFORM_ACCOUNT_ID);
    // It got its canary's price back and returned the fees of the client tasks.
    expect(Number(platformAfter!.available_points) - Number(platformBefore!.available_points)).toBeCloseTo(
      CHEAT_PAY - 0.5 * served.length,
      9,
    );
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);

    for (const taskId of served) expect((await taskOf(taskId, client.auth)).verification).toBe('refunded');
    const refunds = (await api(stack.url, 'GET', '/v1/account/ledger?kind=refund', { headers: client.auth })).json.data;
    expect(refunds.map((entry: { task_id: string }) => entry.task_id).sort()).toEqual([...served].sort());
    for (const entry of refunds)
      expect(entry).toMatchObject({
        kind: 'refund',
        amount: CHEAT_PRICE,
        available_change: CHEAT_PRICE,
        held_change: '0',
      });

    // One signed task.refunded delivery per served task, carrying the refunded record.
    const refundedEvents = await waitFor(async () => {
      const events = receiver.received
        .map((entry) => ({ entry, body: JSON.parse(entry.body) }))
        .filter(({ body }) => body.type === 'task.refunded');
      return events.length >= served.length ? events : null;
    }, 30_000);
    expect(refundedEvents.map(({ body }) => body.data.task_id).sort()).toEqual([...served].sort());
    for (const { entry, body } of refundedEvents) {
      expect(() => new Webhook(secret).verify(entry.body, entry.headers)).not.toThrow();
      expect(body.data).toMatchObject({ verification: 'refunded', charged_points: CHEAT_PRICE });
    }

    // A second confirmation finds nothing more to forfeit.
    const again = await api(stack.url, 'POST', `/v1/admin/solvers/${cheat.solverId}/quarantine/confirm`, {
      body: {},
      headers: admin,
    });
    expect(again.json).toMatchObject({ refunded_tasks: 0, forfeited_points: '0', refunded_points: '0' });
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
    await receiver.close();
  });

  test('a quarantine cleared, not confirmed, releases the frozen pay to the solver and refunds nobody', async () => {
    const client = await registerAccount(stack.url, '100');
    const cheat = await startSolver({ taskTypes: ['proxy_fetch'], price: CHEAT_PRICE });
    const served = await serveUntilQuarantined(cheat, client);
    const heldPay = CHEAT_PAY * (served.length + 1);
    expect(await getBalance(stack.db, cheat.solverId)).toMatchObject({
      available_points: '0',
      held_points: String(heldPay),
    });

    const cleared = await api(stack.url, 'POST', `/v1/admin/solvers/${cheat.solverId}/quarantine/clear`, {
      body: { note: 'false alarm' },
      headers: admin,
    });
    expect(cleared.status).toBe(200);
    expect(cleared.json.released_points).toBe(String(heldPay));
    expect(await getBalance(stack.db, cheat.solverId)).toMatchObject({
      available_points: String(heldPay),
      held_points: '0',
      lifetime_earned_points: String(heldPay),
    });
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({
      lifetime_spent_points: String(served.length * Number(CHEAT_PRICE)),
    });
    for (const taskId of served) expect((await taskOf(taskId, client.auth)).verification).toBe('unchecked');
    // Nothing is held any more: a confirmation now (of no quarantine) is refused.
    const confirm = await api(stack.url, 'POST', `/v1/admin/solvers/${cheat.solverId}/quarantine/confirm`, {
      body: {},
      headers: admin,
    });
    expect(confirm.status).toBe(404);
    expect(confirm.json.error.type).toBe('quarantine_not_found');
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });
});

describe('with a short vesting period', () => {
  const startSolver = stackWith({
    TRUST_PROBATION_CANARIES: '0',
    CANARY_EVERY_TASKS: '0',
    EARNINGS_VESTING_SECONDS: '2',
    EARNINGS_VESTING_CHECKS: '0',
  });

  test("an honest solver's pay is held, then vests after the period and is spendable", async () => {
    const client = await registerAccount(stack.url, '100');
    const solver = await startSolver({ taskTypes: ['proxy_fetch'], price: '2', behaviour: honestFetch });
    for (let i = 0; i < 3; i++) {
      const fetched = await api(stack.url, 'POST', '/v1/fetch', {
        body: { url: `${stack.url}/health?i=${i}` },
        headers: client.auth,
      });
      expect(fetched.status).toBe(200);
    }
    const held = await walletOf(solver);
    // Vesting may already have begun on a slow machine; what is not vested is held, never lost. (One
    // response's figures: the earnings are read beside it, and a vest may land between the two.)
    expect(Number(held.available_points) + Number(held.held_points)).toBeCloseTo(5.4, 9);
    // The balance and the earnings are two requests, so a vest may land between them: wait until both agree.
    const vested = await waitFor(async () => {
      const balance = await walletOf(solver);
      return balance.earnings.unvested_tasks === 0 && balance.held_points === '0' ? balance : null;
    }, 30_000);
    expect(vested).toMatchObject({
      available_points: '5.4',
      held_points: '0',
      lifetime_earned_points: '5.4',
      earnings: { unvested_points: '0', next_vesting_at: null, frozen: false },
    });
    const releases = (await api(stack.url, 'GET', '/v1/account/ledger?kind=release', { headers: bearer(solver) })).json
      .data;
    expect(releases).toHaveLength(3);
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });
});

describe('with vesting by passed checks', () => {
  const startSolver = stackWith({
    TRUST_PROBATION_CANARIES: '1',
    CANARY_EVERY_TASKS: '2',
    EARNINGS_VESTING_SECONDS: '3600',
    EARNINGS_VESTING_CHECKS: '1',
  });

  test("a cheat's pay for a page it made up does not vest by the checks it passes after it: no sequential test has accepted it", async () => {
    const client = await registerAccount(stack.url, '100');
    // Makes up the one page it judges safe to (the client's, marked), fetches everything else honestly.
    const makesUpOne: Script = (frame, self) =>
      String(frame.payload.url).includes('made-up') ? fabricatedFetch(frame, self) : honestFetch(frame, self);
    const cheat = await startSolver({ taskTypes: ['proxy_fetch'], price: '2', behaviour: makesUpOne });
    const canaryPasses = async () => (await trustOf(cheat.solverId)).reputation[0]?.canary_passes ?? 0;
    await waitFor(async () => (await trustOf(cheat.solverId)).reputation[0]?.client_work === true, 45_000);
    const madeUp = await api(stack.url, 'POST', '/v1/fetch', {
      body: { url: `${stack.url}/health?page=made-up` },
      headers: client.auth,
    });
    expect(madeUp.status).toBe(200);
    const taskId = madeUp.headers.get('x-task-id')!;
    await canariesSettled(stack.db, cheat.solverId);
    // Honest fetches until it has passed three canaries after the made-up page.
    const passesBefore = await canaryPasses();
    for (let i = 0; i < 12 && (await canaryPasses()) < passesBefore + 3; i++) {
      expect(
        (
          await api(stack.url, 'POST', '/v1/fetch', {
            body: { url: `${stack.url}/health?i=${i}` },
            headers: client.auth,
          })
        ).status,
      ).toBe(200);
      await canariesSettled(stack.db, cheat.solverId);
    }
    expect(await canaryPasses()).toBeGreaterThanOrEqual(passesBefore + 3);
    expect((await trustOf(cheat.solverId)).quarantined).toBe(false);
    await vestEarnings(stack.db, stack.config.trust);
    const ledger = (
      await api(stack.url, 'GET', `/v1/account/ledger?task_id=${taskId}`, { headers: bearer(cheat) })
    ).json.data.map((entry: { kind: string }) => entry.kind);
    expect(ledger).toEqual(['hold', 'payout']);
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });

  test("an honest solver's pay vests once it passes a check after it and a sequential test has accepted it, with no failed check since, long before the period", async () => {
    const client = await registerAccount(stack.url, '100');
    const solver = await startSolver({ taskTypes: ['proxy_fetch'], price: '2', behaviour: honestFetch });
    const trusted = async () => (await trustOf(solver.solverId)).reputation[0]?.client_work === true;
    await waitFor(trusted, 45_000);
    // The probation canary vouches for nothing paid after it: the client tasks' pay stays held.
    const fetched = await api(stack.url, 'POST', '/v1/fetch', {
      body: { url: `${stack.url}/health?i=0` },
      headers: client.auth,
    });
    expect(fetched.status).toBe(200);
    await vestEarnings(stack.db, stack.config.trust);
    const taskId = fetched.headers.get('x-task-id')!;
    const ledgerOf = async () =>
      (await api(stack.url, 'GET', `/v1/account/ledger?task_id=${taskId}`, { headers: bearer(solver) })).json.data.map(
        (entry: { kind: string }) => entry.kind,
      );
    expect(await ledgerOf()).toEqual(['hold', 'payout']);
    // Fetches until a canary passes after that task (one comes within 3 attempts): then it vests.
    let laterTaskId = '';
    for (let i = 1; i <= 3; i++) {
      const later = await api(stack.url, 'POST', '/v1/fetch', {
        body: { url: `${stack.url}/health?i=${i}` },
        headers: client.auth,
      });
      expect(later.status).toBe(200);
      laterTaskId = later.headers.get('x-task-id')!;
      await canariesSettled(stack.db, solver.solverId);
    }
    const { reputation } = await trustOf(solver.solverId);
    expect(reputation[0].canary_passes).toBeGreaterThanOrEqual(2);
    // Checks vouch only for a solver a sequential test has accepted: until then the pay stays held.
    expect(await vestEarnings(stack.db, stack.config.trust)).toBe(0);
    expect(await ledgerOf()).toEqual(['hold', 'payout']);
    // A check it failed after the pay (a run that proved a later result wrong, as the run leaves its row).
    await stack.db.query(sql.unsafe`
      INSERT INTO redundant_runs (task_id, task_type, first_solver_id, status, workflow_started_at, judged_at, concluded_at, wrong_solver_id)
      VALUES (${laterTaskId}, 'proxy_fetch', ${solver.solverId}, 'refuted', now(), now(), now(), ${solver.solverId})`);
    // 49 verified passes in a row: the sequential test accepts it.
    const decisions = [];
    for (let i = 0; i < 49; i++) {
      decisions.push(
        (
          await recordVerifiedOutcomeIn(stack.db, stack.config.trust, {
            solverId: solver.solverId,
            taskType: 'proxy_fetch',
            failed: false,
            evidence: {},
          })
        ).decision,
      );
    }
    expect(decisions.at(-1)).toBe('accept');
    expect(decisions.slice(0, -1).every((decision) => decision === 'continue')).toBe(true);
    // Accepted, but a check failed since the pay: it stays held. Without that failure the checks it passed vest it.
    expect(await vestEarnings(stack.db, stack.config.trust)).toBe(0);
    expect(await ledgerOf()).toEqual(['hold', 'payout']);
    await stack.db.query(sql.unsafe`DELETE FROM redundant_runs WHERE task_id = ${laterTaskId}`);
    expect(await vestEarnings(stack.db, stack.config.trust)).toBeGreaterThan(0);
    expect(await ledgerOf()).toEqual(['release', 'hold', 'payout']);
    expect((await taskOf(taskId, client.auth)).verification).toBe('unchecked');
    expect(await auditLedger(stack.db)).toEqual(AUDIT_EXACT);
  });
});
