import { CheckIntegrityConstraintViolationError, sql, type DatabaseTransactionConnection } from 'slonik';
import { z } from 'zod';
import { ApiError } from '../errors';
import type { Db } from './pool';

/**
 * The points ledger: the only module that moves points.
 *
 * Every movement is one append-only ledger entry with a unique idempotency key, written in the same
 * transaction as the running balance it changes. Applying the same operation twice therefore applies it
 * once: the second insert hits the unique key and the operation reports `applied: false`.
 * Balance rows are changed by single UPDATE statements guarded by CHECK constraints (never negative),
 * so concurrent operations on one account serialise on the row lock.
 */

export const PLATFORM_ACCOUNT_ID = 'platform';

type Tx = DatabaseTransactionConnection;
type Runner = Db | Tx;

export interface LedgerResult {
  applied: boolean;
}

const BalanceRow = z.object({
  available_points: z.string(),
  held_points: z.string(),
  lifetime_earned_points: z.string(),
  lifetime_spent_points: z.string(),
});
export type Balance = z.infer<typeof BalanceRow>;

const HoldRow = z.object({
  hold_id: z.string(),
  account_id: z.string(),
  amount: z.string(),
  remaining: z.string(),
  status: z.enum(['open', 'settled', 'released']),
});
export type Hold = z.infer<typeof HoldRow>;

// On a pool this opens a transaction; inside one it joins it (a failure aborts the caller's whole
// transaction anyway, and a savepoint would cost two more round trips).
const inTransaction = <T>(db: Runner, fn: (tx: Tx) => Promise<T>): Promise<T> => ('connect' in db ? db.transaction(fn) : fn(db));

/** Inserts the entry unless its key exists; true when this call wrote it. */
async function appendEntry(
  tx: Tx,
  entry: { accountId: string; kind: string; amount: string; holdId?: string | null; key: string },
): Promise<boolean> {
  const written = await tx.maybeOneFirst(sql.type(z.object({ entry_id: z.number() }))`
    INSERT INTO ledger_entries (account_id, kind, amount, hold_id, idempotency_key)
    VALUES (${entry.accountId}, ${entry.kind}, ${entry.amount}::numeric, ${entry.holdId ?? null}, ${entry.key})
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING entry_id`);
  return written !== null;
}

function assertPositive(amount: string, what: string) {
  if (!/^\d+(\.\d+)?$/.test(amount) || /^0+(\.0+)?$/.test(amount)) {
    throw new Error(`${what} must be a positive decimal string, got "${amount}"`);
  }
}

function assertNonNegative(amount: string, what: string) {
  if (!/^\d+(\.\d+)?$/.test(amount)) throw new Error(`${what} must be a non-negative decimal string, got "${amount}"`);
}

export async function getBalance(db: Runner, accountId: string): Promise<Balance | null> {
  return db.maybeOne(sql.type(BalanceRow)`
    SELECT trim_scale(available)::text AS available_points,
           trim_scale(held)::text AS held_points,
           trim_scale(lifetime_earned)::text AS lifetime_earned_points,
           trim_scale(lifetime_spent)::text AS lifetime_spent_points
    FROM balances WHERE account_id = ${accountId}`);
}

export async function getHold(db: Runner, holdId: string): Promise<Hold | null> {
  return db.maybeOne(sql.type(HoldRow)`
    SELECT hold_id, account_id, trim_scale(amount)::text AS amount, trim_scale(remaining)::text AS remaining, status
    FROM holds WHERE hold_id = ${holdId}`);
}

export async function deposit(db: Runner, input: { accountId: string; amount: string; idempotencyKey: string }): Promise<LedgerResult> {
  assertPositive(input.amount, 'deposit amount');
  return inTransaction(db, async (tx) => {
    const applied = await appendEntry(tx, { accountId: input.accountId, kind: 'deposit', amount: input.amount, key: input.idempotencyKey });
    if (applied) {
      await tx.query(sql.unsafe`
        UPDATE balances SET available = available + ${input.amount}::numeric,
          lifetime_deposited = lifetime_deposited + ${input.amount}::numeric, updated_at = now()
        WHERE account_id = ${input.accountId}`);
    }
    return { applied };
  });
}

/**
 * 402 insufficient_balance: a hold of `amount` does not fit the account's available points. Lowering
 * max_price_points is offered only where the request can set it (POST /v1/tasks).
 */
export const insufficientBalance = (amount: string, priceFromRequest = false) =>
  new ApiError(
    'insufficient_balance',
    `This request holds ${amount} points while it runs (and is charged only what it costs), more than the account has available; deposit points${priceFromRequest ? ' or lower max_price_points' : ''}.`,
    { required_points: amount },
  );

/** True when a statement failed because a balance would have gone negative (its CHECK). */
export const isOverdraft = (error: unknown) => error instanceof CheckIntegrityConstraintViolationError && error.constraint === 'balances_available_check';

/**
 * The steps of a hold, as CTEs for one statement: `h` opens the hold named by each row of `holdIds` (a
 * query returning `hold_id`; zero or one row), `e` writes its ledger entry, `b` moves the points from
 * available to held. `b` reads `h`, so the balance row is locked only after what `holdIds` locks. A
 * second hold with the same id waits on the first's key and then does nothing; a balance that would go
 * negative fails its CHECK (`isOverdraft`).
 */
export function holdSteps(holdIds: ReturnType<typeof sql.fragment>, accountId: string, amount: string) {
  assertNonNegative(amount, 'hold amount');
  return sql.fragment`
    h AS (
      INSERT INTO holds (hold_id, account_id, amount, remaining)
      SELECT hold_id, ${accountId}, ${amount}::numeric, ${amount}::numeric FROM (${holdIds}) ids
      ON CONFLICT (hold_id) DO NOTHING RETURNING hold_id
    ), e AS (
      INSERT INTO ledger_entries (account_id, kind, amount, hold_id, idempotency_key)
      SELECT ${accountId}, 'hold', ${amount}::numeric, hold_id, 'hold:' || hold_id FROM h
      ON CONFLICT (idempotency_key) DO NOTHING
    ), b AS (
      UPDATE balances SET available = available - ${amount}::numeric, held = held + ${amount}::numeric, updated_at = now()
      FROM h WHERE account_id = ${accountId}
      RETURNING account_id
    )`;
}

/** Moves `amount` from available to held under `holdId`; 402 insufficient_balance when it does not fit. */
export async function hold(db: Runner, input: { holdId: string; accountId: string; amount: string }): Promise<LedgerResult> {
  return inTransaction(db, async (tx) => {
    // One statement: the hold, its entry and the balance move together.
    const done = await tx
      .one(sql.type(z.object({ created: z.number(), moved: z.number() }))`
        WITH ${holdSteps(sql.fragment`SELECT ${input.holdId}::text AS hold_id`, input.accountId, input.amount)}
        SELECT (SELECT count(*) FROM h)::int AS created, (SELECT count(*) FROM b)::int AS moved`)
      .catch((error) => {
        throw isOverdraft(error) ? insufficientBalance(input.amount) : error;
      });
    if (done.created === 0) return { applied: false };
    // No balance row: the account does not exist (the caller's transaction rolls the hold back).
    if (done.moved === 0) throw insufficientBalance(input.amount);
    return { applied: true };
  });
}

async function lockOpenHold(tx: Tx, holdId: string): Promise<Hold | null> {
  return tx.maybeOne(sql.type(HoldRow)`
    SELECT hold_id, account_id, amount::text AS amount, remaining::text AS remaining, status
    FROM holds WHERE hold_id = ${holdId} FOR UPDATE`);
}

/** Charges `amount` of an open hold to its account (held → spent). */
export async function capture(db: Runner, input: { holdId: string; amount: string }): Promise<LedgerResult> {
  assertNonNegative(input.amount, 'capture amount');
  return inTransaction(db, async (tx) => {
    const held = await lockOpenHold(tx, input.holdId);
    if (!held) throw new Error(`hold ${input.holdId} does not exist`);
    const applied = await appendEntry(tx, { accountId: held.account_id, kind: 'capture', amount: input.amount, holdId: input.holdId, key: `capture:${input.holdId}` });
    if (!applied) return { applied };
    if (held.status !== 'open') throw new Error(`hold ${input.holdId} is ${held.status}; it cannot be captured`);
    const updated = await tx.maybeOneFirst(sql.type(z.object({ hold_id: z.string() }))`
      UPDATE holds SET remaining = remaining - ${input.amount}::numeric
      WHERE hold_id = ${input.holdId} AND remaining >= ${input.amount}::numeric RETURNING hold_id`);
    if (updated === null) throw new Error(`capture of ${input.amount} exceeds what remains of hold ${input.holdId}`);
    await tx.query(sql.unsafe`
      UPDATE balances SET held = held - ${input.amount}::numeric, lifetime_spent = lifetime_spent + ${input.amount}::numeric, updated_at = now()
      WHERE account_id = ${held.account_id}`);
    return { applied };
  });
}

/** Returns whatever remains of a hold to available and closes it. */
export async function release(db: Runner, input: { holdId: string }): Promise<LedgerResult & { released: string }> {
  return inTransaction(db, async (tx) => {
    const held = await lockOpenHold(tx, input.holdId);
    if (!held) throw new Error(`hold ${input.holdId} does not exist`);
    if (held.status !== 'open') return { applied: false, released: '0' };
    const applied = await appendEntry(tx, { accountId: held.account_id, kind: 'release', amount: held.remaining, holdId: input.holdId, key: `release:${input.holdId}` });
    if (!applied) return { applied, released: '0' };
    const captured = await tx.oneFirst(sql.type(z.object({ captured: z.boolean() }))`
      SELECT remaining < amount AS captured FROM holds WHERE hold_id = ${input.holdId}`);
    await tx.query(sql.unsafe`
      UPDATE holds SET remaining = 0, status = ${captured ? 'settled' : 'released'}, closed_at = now() WHERE hold_id = ${input.holdId}`);
    await tx.query(sql.unsafe`
      UPDATE balances SET held = held - ${held.remaining}::numeric, available = available + ${held.remaining}::numeric, updated_at = now()
      WHERE account_id = ${held.account_id}`);
    return { applied, released: held.remaining };
  });
}

/** Credits earned points (a solver's pay, or the platform fee). */
export async function payout(
  db: Runner,
  input: { accountId: string; amount: string; idempotencyKey: string; holdId?: string; kind?: 'payout' | 'fee' },
): Promise<LedgerResult> {
  assertNonNegative(input.amount, 'payout amount');
  return inTransaction(db, async (tx) => {
    const applied = await appendEntry(tx, {
      accountId: input.accountId,
      kind: input.kind ?? 'payout',
      amount: input.amount,
      holdId: input.holdId,
      key: input.idempotencyKey,
    });
    if (applied) {
      await tx.query(sql.unsafe`
        UPDATE balances SET available = available + ${input.amount}::numeric,
          lifetime_earned = lifetime_earned + ${input.amount}::numeric, updated_at = now()
        WHERE account_id = ${input.accountId}`);
    }
    return { applied };
  });
}

/** What settling a hold at `price` charges: the price, capped at the hold (read from the hold's row). */
export const cappedCharge = (price: string) => sql.fragment`LEAST(${price}::numeric, amount)`;

/**
 * Settles a hold exactly once: charges `price` (capped at the hold), pays the solver the price less the
 * platform fee, credits the fee to the platform account, and releases the rest.
 */
export async function settle(
  db: Runner,
  input: { holdId: string; price: string; solverId: string; feePercent: string },
): Promise<LedgerResult & { charged: string; solverEarned: string; fee: string }> {
  assertNonNegative(input.price, 'price');
  assertNonNegative(input.feePercent, 'fee percent');
  return inTransaction(db, async (tx) => {
    // One statement, so that the balance rows are held for it and the commit only, not also across a
    // round trip through our event loop. The hold's row is locked first; then, when it is open, the
    // balance rows of everyone it pays, in one global order: concurrent settlements touch overlapping
    // accounts (the platform's always), and each could otherwise hold a row another waits for. The
    // balances are changed only through `locked` (deltas join it), so no row is locked out of that order.
    // The four movements (capture, solver pay, fee, release of the rest) are each a keyed entry, and each
    // account's balance row changes once by the sum of its entries.
    const held = await tx.maybeOne(sql.type(z.object({ status: z.string(), charged: z.string(), fee: z.string(), earned: z.string(), rest: z.string(), written: z.number() }))`
      WITH h AS (
        SELECT account_id, status, charged, fee, charged - fee AS earned, remaining - charged AS rest
        FROM (
          SELECT account_id, status, remaining, charged, charged * ${input.feePercent}::numeric / 100 AS fee
          FROM (SELECT *, ${cappedCharge(input.price)} AS charged FROM holds WHERE hold_id = ${input.holdId} FOR UPDATE) hold
        ) priced
      ), movable AS (
        SELECT * FROM h WHERE status = 'open' AND rest >= 0
      ), locked AS (
        SELECT b.account_id FROM balances b, movable m
        WHERE b.account_id = ANY(ARRAY[m.account_id, ${input.solverId}, ${PLATFORM_ACCOUNT_ID}])
        ORDER BY b.account_id FOR UPDATE OF b
      ), entries AS (
        INSERT INTO ledger_entries (account_id, kind, amount, hold_id, idempotency_key)
        SELECT e.account_id, e.kind, e.amount, ${input.holdId}, e.kind || ':' || ${input.holdId}::text
        FROM movable m CROSS JOIN LATERAL (VALUES
          (m.account_id, 'capture', m.charged),
          (${input.solverId}, 'payout', m.earned),
          (${PLATFORM_ACCOUNT_ID}, 'fee', m.fee),
          (m.account_id, 'release', m.rest)) e (account_id, kind, amount)
        ON CONFLICT (idempotency_key) DO NOTHING
        RETURNING account_id, kind, amount
      ), deltas AS (
        SELECT account_id,
               SUM(CASE WHEN kind IN ('payout', 'fee', 'release') THEN amount ELSE 0 END) AS available,
               SUM(CASE WHEN kind IN ('capture', 'release') THEN amount ELSE 0 END) AS held,
               SUM(CASE WHEN kind IN ('payout', 'fee') THEN amount ELSE 0 END) AS earned,
               SUM(CASE WHEN kind = 'capture' THEN amount ELSE 0 END) AS spent
        FROM entries JOIN locked USING (account_id) GROUP BY account_id
      ), moved AS (
        UPDATE balances b SET available = b.available + d.available, held = b.held - d.held,
          lifetime_earned = b.lifetime_earned + d.earned, lifetime_spent = b.lifetime_spent + d.spent, updated_at = now()
        FROM deltas d WHERE b.account_id = d.account_id
        RETURNING b.account_id
      ), closed AS (
        UPDATE holds SET status = CASE WHEN m.rest < holds.amount THEN 'settled' ELSE 'released' END, remaining = 0, closed_at = now()
        FROM movable m WHERE hold_id = ${input.holdId}
        RETURNING hold_id
      )
      -- Data-modifying CTEs run to completion whether or not the final SELECT reads them.
      SELECT status,
             trim_scale(charged)::text AS charged,
             trim_scale(fee)::text AS fee,
             trim_scale(earned)::text AS earned,
             trim_scale(rest)::text AS rest,
             (SELECT count(*)::int FROM entries) AS written
      FROM h`);
    if (!held) throw new Error(`hold ${input.holdId} does not exist`);
    const outcome = { charged: held.charged, solverEarned: held.earned, fee: held.fee };
    if (held.status !== 'open') return { applied: false, ...outcome };
    // Nothing was written then; throwing rolls back the caller's transaction.
    if (held.rest.startsWith('-')) throw new Error(`capture of ${held.charged} exceeds what remains of hold ${input.holdId}`);
    // Under the hold's row lock an open hold has none of its settlement entries yet.
    if (held.written !== 4) throw new Error(`settlement of hold ${input.holdId} wrote ${held.written} of its 4 entries`);
    return { applied: true, ...outcome };
  });
}

/** Balances recomputed from the entries alone; used to prove the running totals never drift. */
export async function balanceFromEntries(db: Runner, accountId: string): Promise<Balance> {
  return db.one(sql.type(BalanceRow)`
    SELECT
      trim_scale(COALESCE(SUM(CASE kind WHEN 'deposit' THEN amount WHEN 'payout' THEN amount WHEN 'fee' THEN amount
                                  WHEN 'release' THEN amount WHEN 'hold' THEN -amount ELSE 0 END), 0))::text AS available_points,
      trim_scale(COALESCE(SUM(CASE kind WHEN 'hold' THEN amount WHEN 'capture' THEN -amount WHEN 'release' THEN -amount ELSE 0 END), 0))::text AS held_points,
      trim_scale(COALESCE(SUM(CASE WHEN kind IN ('payout', 'fee') THEN amount ELSE 0 END), 0))::text AS lifetime_earned_points,
      trim_scale(COALESCE(SUM(CASE WHEN kind = 'capture' THEN amount ELSE 0 END), 0))::text AS lifetime_spent_points
    FROM ledger_entries WHERE account_id = ${accountId}`);
}
