import crypto from 'node:crypto';
import { sql } from 'slonik';
import { z } from 'zod';
import { meterUsage } from '../src/chat/usage';
import { createAccount } from '../src/db/accounts';
import { deposit } from '../src/db/ledger';
import { createDb, type Db } from '../src/db/pool';
import { heartbeatNode, registerConnection, replaceCapabilities } from '../src/db/solvers';
import { closeAttempt, reserveAttempt } from '../src/db/tasks/attempts';
import { finishTask } from '../src/tasks/finish';
import { createTask } from './support/tasks';
import { testEndpoints } from './support/stack';
import { DEFAULT_TRUST_POLICY } from '../src/db/reputation';

let db: Db;
beforeAll(async () => {
  db = await createDb(testEndpoints().databaseUrl);
});
afterAll(async () => {
  await db.end();
});

const TASK_TYPE = 'chat_completion';

/** A per-token solver with a model of its own, and a task matched to it (a hold of 5 points). */
async function matchedTask() {
  const model = `model-${crypto.randomBytes(4).toString('hex')}`;
  const { account: solver } = await createAccount(db);
  const nodeId = `node-${crypto.randomUUID()}`;
  await heartbeatNode(db, nodeId);
  await replaceCapabilities(db, DEFAULT_TRUST_POLICY, solver.account_id, [
    { task_type: TASK_TYPE, tier: 'strong', billing_type: 'per_token', fulfillment_path: 'provider_api', provider_name: 'p', model_name: model, marginal_cost: '2', min_price_points: '1', max_concurrent: 1 } as never,
  ]);
  await registerConnection(db, DEFAULT_TRUST_POLICY, { solverId: solver.account_id, connectionId: crypto.randomUUID(), nodeId });
  const { account: client } = await createAccount(db);
  await deposit(db, { accountId: client.account_id, amount: '100', idempotencyKey: `t:${crypto.randomUUID()}` });
  const taskId = `chat_${crypto.randomBytes(8).toString('hex')}`;
  const { firstAssignment } = await createTask(db, {
    taskId,
    accountId: client.account_id,
    taskType: TASK_TYPE,
    payload: {},
    maxPricePoints: '5',
    timeoutSeconds: 60,
    workflowId: `chatcmpl-${taskId}`,
    match: { strongModels: [model] },
  });
  expect(firstAssignment?.solverId).toBe(solver.account_id);
  return { taskId, attemptId: firstAssignment!.attemptId, solverId: solver.account_id, clientId: client.account_id };
}

const taskState = (taskId: string) =>
  db.one(sql.type(z.object({ status: z.string(), price_points: z.string().nullable(), result: z.any(), hold: z.string() }))`
    SELECT t.status, trim_scale(t.price_points)::text AS price_points, t.result, h.status AS hold
    FROM tasks t JOIN holds h ON h.hold_id = t.task_id WHERE t.task_id = ${taskId}`);

/**
 * `db` whose transactions ask, before each of their statements, whether another connection could lock
 * the account's balance row at once (NOWAIT); the first words of each statement and the answer are kept.
 */
function probingBalanceLocks(accountId: string, seen: Array<{ statement: string; balanceLocked: boolean; transaction: number }>): Db {
  let transactions = 0;
  const free = () =>
    db
      .transaction((probe) => probe.query(sql.unsafe`SELECT 1 FROM balances WHERE account_id = ${accountId} FOR UPDATE NOWAIT`))
      .then(() => true)
      .catch(() => false);
  const probed = <T extends object>(tx: T, transaction: number): T =>
    new Proxy(tx, {
      get(target, property, receiver) {
        const value = Reflect.get(target, property, receiver);
        if (typeof value !== 'function') return value;
        return async (...args: unknown[]) => {
          const token = args[0] as { sql?: string };
          if (typeof token?.sql === 'string') seen.push({ statement: token.sql.trim().replace(/\s+/g, ' ').slice(0, 40), balanceLocked: !(await free()), transaction });
          return value.apply(target, args);
        };
      },
    });
  return new Proxy(db, {
    get(target, property, receiver) {
      if (property !== 'transaction') return Reflect.get(target, property, receiver);
      return (handler: (tx: unknown) => Promise<unknown>) => {
        const transaction = transactions++;
        return target.transaction((tx) => handler(probed(tx, transaction)));
      };
    },
  });
}

const balance = (accountId: string) =>
  db.one(sql.type(z.object({ available: z.string(), held: z.string() }))`
    SELECT trim_scale(available)::text AS available, trim_scale(held)::text AS held FROM balances WHERE account_id = ${accountId}`);

describe('completing a task with its attempt result', () => {
  test('prices per token from the reported usage, stores the result once and settles the hold', async () => {
    const { taskId, attemptId, solverId, clientId } = await matchedTask();
    const result = { finish_reason: 'stop', usage: { prompt_tokens: 400, completion_tokens: 600, total_tokens: 1000 } };
    // Metered as the dispatch activity meters it: within the bound of what was counted, so billed as reported.
    const usage = meterUsage(result.usage, { prompt_tokens: 400, completion_tokens: 600, reasoning_tokens: 0 });
    const outcome = await finishTask(db, DEFAULT_TRUST_POLICY, taskId, { completion: { kind: 'attempt', attemptId, result, usage }, feePercent: '10' });
    expect(outcome).toEqual({ applied: true, status: 'completed' });
    // 1 point + 2 points per 1,000 tokens; the solver earns 90 %.
    expect(await taskState(taskId)).toEqual({ status: 'completed', price_points: '3', result, hold: 'settled' });
    expect(await balance(clientId)).toEqual({ available: '97', held: '0' });
    expect((await balance(solverId)).available).toBe('2.7');
    // Completing again changes nothing.
    expect(await finishTask(db, DEFAULT_TRUST_POLICY, taskId, { completion: { kind: 'attempt', attemptId, result, usage }, feePercent: '10' })).toEqual({ applied: false, status: 'completed' });
    expect(await balance(clientId)).toEqual({ available: '97', held: '0' });
  });

  test("the client's balance row is locked by the settlement's one statement only, the transaction's last", async () => {
    const { taskId, attemptId, clientId } = await matchedTask();
    const seen: Array<{ statement: string; balanceLocked: boolean; transaction: number }> = [];
    const outcome = await finishTask(probingBalanceLocks(clientId, seen), DEFAULT_TRUST_POLICY, taskId, { completion: { kind: 'attempt', attemptId, result: { finish_reason: 'stop', usage: { total_tokens: 10 } } }, feePercent: '10' });
    expect(outcome).toEqual({ applied: true, status: 'completed' });
    // Locked before a statement means locked while the one before it ran and until now: never, as the
    // settlement is the last statement (the commit follows it).
    expect(seen.filter((step) => step.balanceLocked)).toHaveLength(0);
    // (A later transaction may hand the freed slot to a waiting task.)
    expect(seen.filter((step) => step.transaction === 0).at(-1)?.statement).toMatch(/^WITH h AS/);
    expect((await balance(clientId)).held).toBe('0');
  });

  test('a result whose attempt ended meanwhile completes nothing and charges nothing', async () => {
    const { taskId, attemptId, clientId } = await matchedTask();
    await closeAttempt(db, DEFAULT_TRUST_POLICY, { attemptId, outcome: 'timeout', error: { type: 'attempt_timeout', message: 'silent' } });
    const outcome = await finishTask(db, DEFAULT_TRUST_POLICY, taskId, { completion: { kind: 'attempt', attemptId, result: { finish_reason: 'stop', usage: { total_tokens: 10 } } }, feePercent: '10' });
    expect(outcome).toEqual({ applied: false, status: 'queued', attemptClosed: true });
    expect(await taskState(taskId)).toEqual({ status: 'queued', price_points: null, result: null, hold: 'open' });
    expect(await balance(clientId)).toEqual({ available: '95', held: '5' });
  });
});
