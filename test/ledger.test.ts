import crypto from 'node:crypto';
import { createAccount } from '../src/db/accounts';
import { sql } from 'slonik';
import { z } from 'zod';
import { balanceFromEntries, deposit, getBalance, PLATFORM_ACCOUNT_ID, release, settle } from '../src/db/ledger';
import { createDb, type Db } from '../src/db/pool';
import { createTaskWithHold, markWorkflowStarted } from '../src/db/tasks/create';
import { testEndpoints } from './support/stack';
import { DEFAULT_TRUST_POLICY } from '../src/db/reputation';

let db: Db;
beforeAll(async () => {
  db = await createDb(testEndpoints().databaseUrl, { maximumPoolSize: 20 });
});
afterAll(async () => {
  await db.end();
});

const newAccount = async (points?: string) => {
  const { account } = await createAccount(db);
  if (points) await deposit(db, { accountId: account.account_id, amount: points, idempotencyKey: `test:${crypto.randomUUID()}` });
  return account.account_id;
};
const holdId = () => `task_${crypto.randomUUID()}`;

/**
 * Takes a hold the way production does, with its task (the hold's id is the task's). The task is marked
 * started, so no suite's stranded-task sweep starts a workflow for it.
 */
async function hold(input: { holdId: string; accountId: string; amount: string; idempotencyKey?: string }) {
  const outcome = await createTaskWithHold(db, DEFAULT_TRUST_POLICY, {
    taskId: input.holdId,
    accountId: input.accountId,
    taskType: 'proxy_fetch',
    payload: {},
    maxPricePoints: input.amount,
    timeoutSeconds: 60,
    workflowId: `task-${input.holdId}`,
    idempotency: input.idempotencyKey ? { key: input.idempotencyKey, fingerprint: 'same request' } : undefined,
  });
  if (outcome.kind === 'created') await markWorkflowStarted(db, input.holdId);
  return outcome.kind;
}

const holdOf = (id: string) =>
  db.maybeOne(sql.type(z.object({ status: z.string(), remaining: z.string() }))`SELECT status, trim_scale(remaining)::text AS remaining FROM holds WHERE hold_id = ${id}`);

async function expectConsistent(accountId: string) {
  const running = await getBalance(db, accountId);
  const derived = await balanceFromEntries(db, accountId);
  expect(running).toEqual(derived);
}

describe('points ledger', () => {
  test('a deposit with the same idempotency key applies once', async () => {
    const accountId = await newAccount();
    const key = `deposit:${crypto.randomUUID()}`;
    expect(await deposit(db, { accountId, amount: '12.5', idempotencyKey: key })).toEqual({ applied: true });
    expect(await deposit(db, { accountId, amount: '12.5', idempotencyKey: key })).toEqual({ applied: false, depositedBefore: '12.5' });
    expect((await getBalance(db, accountId))?.available_points).toBe('12.5');
    await expectConsistent(accountId);
  });

  test('decimal amounts stay exact (no binary floating point)', async () => {
    const accountId = await newAccount();
    for (let i = 0; i < 10; i++) await deposit(db, { accountId, amount: '0.1', idempotencyKey: `d:${crypto.randomUUID()}` });
    expect((await getBalance(db, accountId))?.available_points).toBe('1');
  });

  test('a task\'s hold moves points from available to held and is refused when it does not fit', async () => {
    const accountId = await newAccount('10');
    expect(await hold({ holdId: holdId(), accountId, amount: '7' })).toBe('created');
    expect(await getBalance(db, accountId)).toMatchObject({ available_points: '3', held_points: '7' });
    const refused = holdId();
    expect(await hold({ holdId: refused, accountId, amount: '3.01' })).toBe('insufficient_balance');
    expect(await holdOf(refused)).toBeNull();
    expect(await getBalance(db, accountId)).toMatchObject({ available_points: '3', held_points: '7' });
    await expectConsistent(accountId);
  });

  test('a task created twice with one idempotency key holds once', async () => {
    const accountId = await newAccount('10');
    const key = `key-${crypto.randomUUID()}`;
    expect(await hold({ holdId: holdId(), accountId, amount: '4', idempotencyKey: key })).toBe('created');
    expect(await hold({ holdId: holdId(), accountId, amount: '4', idempotencyKey: key })).toBe('existing');
    expect(await getBalance(db, accountId)).toMatchObject({ available_points: '6', held_points: '4' });
    await expectConsistent(accountId);
  });

  test('a release gives the whole hold back once when repeated', async () => {
    const client = await newAccount('10');
    const id = holdId();
    await hold({ holdId: id, accountId: client, amount: '10' });
    expect(await release(db, { holdId: id })).toEqual({ applied: true, released: '10' });
    expect(await release(db, { holdId: id })).toEqual({ applied: false, released: '0' });
    expect(await getBalance(db, client)).toEqual({ available_points: '10', held_points: '0', lifetime_earned_points: '0', lifetime_spent_points: '0' });
    expect(await holdOf(id)).toEqual({ status: 'released', remaining: '0' });
    await expectConsistent(client);
  });

  test('settle charges the price, pays the solver less the fee, releases the rest, once', async () => {
    const client = await newAccount('50');
    const solver = await newAccount();
    const id = holdId();
    const platformBefore = await getBalance(db, PLATFORM_ACCOUNT_ID);
    await hold({ holdId: id, accountId: client, amount: '10' });
    const first = await settle(db, { holdId: id, price: '4', solverId: solver, feePercent: '10' });
    const second = await settle(db, { holdId: id, price: '4', solverId: solver, feePercent: '10' });
    expect(first).toEqual({ applied: true, charged: '4', solverEarned: '3.6', fee: '0.4' });
    expect(second.applied).toBe(false);
    expect(await getBalance(db, client)).toEqual({ available_points: '46', held_points: '0', lifetime_earned_points: '0', lifetime_spent_points: '4' });
    expect(await getBalance(db, solver)).toMatchObject({ available_points: '3.6', lifetime_earned_points: '3.6' });
    const platformAfter = await getBalance(db, PLATFORM_ACCOUNT_ID);
    expect(Number(platformAfter!.lifetime_earned_points) - Number(platformBefore!.lifetime_earned_points)).toBeCloseTo(0.4, 9);
    await expectConsistent(client);
  });

  test('settle caps the charge at the hold', async () => {
    const client = await newAccount('10');
    const solver = await newAccount();
    const id = holdId();
    await hold({ holdId: id, accountId: client, amount: '5' });
    const settled = await settle(db, { holdId: id, price: '8', solverId: solver, feePercent: '0' });
    expect(settled.charged).toBe('5');
    expect(await getBalance(db, client)).toMatchObject({ available_points: '5', held_points: '0', lifetime_spent_points: '5' });
  });

  test('settle where the solver is the paying account moves each of its balances once', async () => {
    const account = await newAccount('20');
    const id = holdId();
    await hold({ holdId: id, accountId: account, amount: '10' });
    await settle(db, { holdId: id, price: '4', solverId: account, feePercent: '25' });
    // 20 − 4 charged + 3 earned back; the rest of the hold (6) returns to available.
    expect(await getBalance(db, account)).toEqual({ available_points: '19', held_points: '0', lifetime_earned_points: '3', lifetime_spent_points: '4' });
    expect((await holdOf(id))?.status).toBe('settled');
    await expectConsistent(account);
  });

  test('settle at price 0 releases the whole hold and charges nothing', async () => {
    const client = await newAccount('10');
    const solver = await newAccount();
    const id = holdId();
    await hold({ holdId: id, accountId: client, amount: '5' });
    expect(await settle(db, { holdId: id, price: '0', solverId: solver, feePercent: '10' })).toEqual({ applied: true, charged: '0', solverEarned: '0', fee: '0' });
    expect(await holdOf(id)).toEqual({ status: 'released', remaining: '0' });
    expect(await getBalance(db, client)).toEqual({ available_points: '10', held_points: '0', lifetime_earned_points: '0', lifetime_spent_points: '0' });
    await expectConsistent(client);
    await expectConsistent(solver);
  });

  test('a released hold can no longer be settled', async () => {
    const client = await newAccount('10');
    const solver = await newAccount();
    const id = holdId();
    await hold({ holdId: id, accountId: client, amount: '5' });
    await release(db, { holdId: id });
    expect((await settle(db, { holdId: id, price: '5', solverId: solver, feePercent: '10' })).applied).toBe(false);
    expect(await getBalance(db, client)).toMatchObject({ available_points: '10', held_points: '0', lifetime_spent_points: '0' });
    expect(await getBalance(db, solver)).toMatchObject({ available_points: '0' });
  });

  test('concurrent holds on one account never overdraw it', async () => {
    const accountId = await newAccount('10');
    const attempts = await Promise.all(Array.from({ length: 25 }, () => hold({ holdId: holdId(), accountId, amount: '1' })));
    expect(attempts.filter((kind) => kind === 'created')).toHaveLength(10);
    expect(attempts.filter((kind) => kind === 'insufficient_balance')).toHaveLength(15);
    expect(await getBalance(db, accountId)).toMatchObject({ available_points: '0', held_points: '10' });
    await expectConsistent(accountId);
  });

  test('concurrent settles of one hold pay exactly once', async () => {
    const client = await newAccount('10');
    const solver = await newAccount();
    const id = holdId();
    await hold({ holdId: id, accountId: client, amount: '10' });
    const results = await Promise.all(Array.from({ length: 8 }, () => settle(db, { holdId: id, price: '6', solverId: solver, feePercent: '10' })));
    expect(results.filter((result) => result.applied)).toHaveLength(1);
    expect(await getBalance(db, solver)).toMatchObject({ available_points: '5.4' });
    expect(await getBalance(db, client)).toMatchObject({ available_points: '4', held_points: '0', lifetime_spent_points: '6' });
    await expectConsistent(client);
    await expectConsistent(solver);
  });

  test('concurrent settles between the same accounts in both directions all apply (no deadlock)', async () => {
    const a = await newAccount('1000');
    const b = await newAccount('1000');
    const holds = Array.from({ length: 24 }, (_, i) => ({ id: holdId(), payer: i % 2 ? a : b, payee: i % 2 ? b : a }));
    for (const h of holds) await hold({ holdId: h.id, accountId: h.payer, amount: '10' });
    const results = await Promise.all(holds.map((h) => settle(db, { holdId: h.id, price: '4', solverId: h.payee, feePercent: '25' })));
    expect(results.every((result) => result.applied)).toBe(true);
    // Each account paid 12 × 4 and earned 12 × 3.
    expect(await getBalance(db, a)).toEqual({ available_points: '988', held_points: '0', lifetime_earned_points: '36', lifetime_spent_points: '48' });
    await expectConsistent(a);
    await expectConsistent(b);
  });

  test('concurrent deposits with one key apply once', async () => {
    const accountId = await newAccount();
    const key = `deposit:${crypto.randomUUID()}`;
    const results = await Promise.all(Array.from({ length: 8 }, () => deposit(db, { accountId, amount: '5', idempotencyKey: key })));
    expect(results.filter((result) => result.applied)).toHaveLength(1);
    expect((await getBalance(db, accountId))?.available_points).toBe('5');
  });

  test('ledger entries are append-only', async () => {
    const accountId = await newAccount('1');
    await expect(db.query(sql.unsafe`UPDATE ledger_entries SET amount = 100 WHERE account_id = ${accountId}`)).rejects.toThrow(/append-only/);
    await expect(db.query(sql.unsafe`DELETE FROM ledger_entries WHERE account_id = ${accountId}`)).rejects.toThrow(/append-only/);
  });
});
