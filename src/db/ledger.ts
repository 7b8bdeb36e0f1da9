import { CheckIntegrityConstraintViolationError, sql, type DatabaseTransactionConnection } from 'slonik';
import { z } from 'zod';
import { TERMINAL_STATES } from '../contract/lifecycle';
import {
  HOLD_STATES,
  LEDGER_ENTRY_KINDS,
  PLATFORM_ACCOUNT_ID,
  type BalanceColumn,
  type LedgerEntryKind,
} from '../contract/ledger';
import { oncePerKey } from './fragments';
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

export { PLATFORM_ACCOUNT_ID } from '../contract/ledger';

/**
 * NOTIFY channel on which a deposit to the platform account is announced as it commits: the workers
 * start the checks that were due while the account could not pay them (src/tasks/canary-starter.ts).
 */
export const PLATFORM_FUNDED_CHANNEL = 'platform_funded';

const ENTRY_KINDS = Object.keys(LEDGER_ENTRY_KINDS) as LedgerEntryKind[];
const effectOf = (kind: LedgerEntryKind, column: BalanceColumn): number =>
  (LEDGER_ENTRY_KINDS[kind] as Partial<Record<BalanceColumn, number>>)[column] ?? 0;

/**
 * The hold of a solver's pay for one task: opened in the transaction that settles the task, released
 * (`release`) when the pay vests or a quarantine is cleared, forfeited (`refundFromEarnings`) when the
 * task is refunded.
 */
export const heldEarningsId = (taskId: string) => `held:${taskId}`;

/** An entry kind as a statement's value. */
const kindValue = (kind: LedgerEntryKind) => sql.fragment`${kind}::text`;

export const [HOLD_OPEN, HOLD_SETTLED, HOLD_RELEASED] = HOLD_STATES;

/** One entry's (columns `kind` and `amount`) signed effect on `column`. */
const entryEffect = oncePerKey((column: BalanceColumn) => {
  const cases = ENTRY_KINDS.filter((kind) => effectOf(kind, column) !== 0).map(
    (kind) =>
      sql.fragment`WHEN ${kind} THEN ${effectOf(kind, column) > 0 ? sql.fragment`amount` : sql.fragment`-amount`}`,
  );
  return sql.fragment`CASE kind ${sql.join(cases, sql.fragment` `)} ELSE 0 END`;
});

/** `SUM` over entries (with columns `kind` and `amount`) of their effect on `column`. */
function effectSum(column: BalanceColumn) {
  return sql.fragment`COALESCE(SUM(${entryEffect(column)}), 0)`;
}

/** The SET list of a balances UPDATE that applies one entry of `kind` for `amount` (a numeric expression). */
function applyEntry(kind: LedgerEntryKind, amount: ReturnType<typeof sql.fragment>) {
  const columns = (Object.keys(LEDGER_ENTRY_KINDS[kind]) as BalanceColumn[]).map((column) =>
    effectOf(kind, column) > 0
      ? sql.fragment`${sql.identifier([column])} = ${sql.identifier([column])} + ${amount}`
      : sql.fragment`${sql.identifier([column])} = ${sql.identifier([column])} - ${amount}`,
  );
  return sql.fragment`${sql.join(columns, sql.fragment`, `)}, updated_at = now()`;
}

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

// On a pool this opens a transaction; inside one it joins it (a failure aborts the caller's whole
// transaction anyway, and a savepoint would cost two more round trips).
const inTransaction = <T>(db: Runner, fn: (tx: Tx) => Promise<T>): Promise<T> =>
  'connect' in db ? db.transaction(fn) : fn(db);

/** Inserts the entry unless its key exists; true when this call wrote it. */
async function appendEntry(
  tx: Tx,
  entry: { accountId: string; kind: LedgerEntryKind; amount: string; holdId?: string | null; key: string },
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

/** A deposit once per key; one not applied says the amount its key deposited before (canonical decimal text). */
export async function deposit(
  db: Runner,
  input: { accountId: string; amount: string; idempotencyKey: string },
): Promise<{ applied: true } | { applied: false; depositedBefore: string }> {
  assertPositive(input.amount, 'deposit amount');
  return inTransaction(db, async (tx) => {
    const applied = await appendEntry(tx, {
      accountId: input.accountId,
      kind: 'deposit',
      amount: input.amount,
      key: input.idempotencyKey,
    });
    if (!applied) {
      const before = await tx.oneFirst(sql.type(z.object({ amount: z.string() }))`
        SELECT trim_scale(amount)::text AS amount FROM ledger_entries WHERE idempotency_key = ${input.idempotencyKey}`);
      return { applied: false, depositedBefore: before };
    }
    await tx.query(
      sql.unsafe`UPDATE balances SET ${applyEntry('deposit', sql.fragment`${input.amount}::numeric`)} WHERE account_id = ${input.accountId}`,
    );
    // Checks put off for want of the platform's points start as soon as it is funded.
    if (input.accountId === PLATFORM_ACCOUNT_ID)
      await tx.query(sql.unsafe`SELECT pg_notify(${PLATFORM_FUNDED_CHANNEL}, '{}')`);
    return { applied: true };
  });
}

/** True when a statement failed because a balance would have gone negative (its CHECK). */
export const isOverdraft = (error: unknown) =>
  error instanceof CheckIntegrityConstraintViolationError && error.constraint === 'balances_available_check';

/**
 * The steps of a hold, as CTEs for one statement: `h` opens the hold named by each row of `holdIds` (a
 * query returning `hold_id`; zero or one row), `e` writes its ledger entry, `b` moves the points from
 * available to held. `b` reads `h`, so the balance row is locked only after what `holdIds` locks. A
 * second hold with the same id waits on the first's key and then does nothing; a balance that would go
 * negative fails its CHECK (`isOverdraft`).
 */
export function holdSteps(
  holdIds: ReturnType<typeof sql.fragment>,
  accountId: string,
  points: string | ReturnType<typeof sql.fragment>,
) {
  if (typeof points === 'string') assertNonNegative(points, 'hold amount');
  // A numeric expression (a hold that depends on the statement's match) or a decimal string.
  const amount = typeof points === 'string' ? points : sql.fragment`(${points})`;
  return sql.fragment`
    h AS (
      INSERT INTO holds (hold_id, account_id, amount, remaining)
      SELECT hold_id, ${accountId}, ${amount}::numeric, ${amount}::numeric FROM (${holdIds}) ids
      ON CONFLICT (hold_id) DO NOTHING RETURNING hold_id
    ), e AS (
      INSERT INTO ledger_entries (account_id, kind, amount, hold_id, idempotency_key)
      SELECT ${accountId}, ${kindValue('hold')}, ${amount}::numeric, hold_id, ${kindValue('hold')} || ':' || hold_id FROM h
      ON CONFLICT (idempotency_key) DO NOTHING
    ), b AS (
      UPDATE balances SET ${applyEntry('hold', sql.fragment`${amount}::numeric`)}
      FROM h WHERE account_id = ${accountId}
      RETURNING account_id
    )`;
}

/**
 * The steps that raise open holds, as CTEs for one statement: `raises` is a query of rows (hold_id,
 * account_id, extra, raise_id); each hold grows by `extra`, with its own `hold` entry (once per
 * raise_id), and the
 * points move from available to held (a balance that would go negative fails its CHECK, `isOverdraft`).
 */
export function raiseHoldSteps(raises: ReturnType<typeof sql.fragment>) {
  return sql.fragment`
    raise AS (${raises}),
    raised_hold AS (
      UPDATE holds h SET amount = h.amount + x.extra, remaining = h.remaining + x.extra
      FROM raise x WHERE h.hold_id = x.hold_id AND h.status = ${HOLD_OPEN}
    ), raised_entry AS (
      INSERT INTO ledger_entries (account_id, kind, amount, hold_id, idempotency_key)
      SELECT account_id, ${kindValue('hold')}, extra, hold_id, ${kindValue('hold')} || ':' || raise_id FROM raise
      ON CONFLICT (idempotency_key) DO NOTHING
    ), raised_balance AS (
      UPDATE balances b SET ${applyEntry('hold', sql.fragment`x.extra`)}
      FROM raise x WHERE b.account_id = x.account_id
    )`;
}

async function lockHold(tx: Tx, holdId: string) {
  return tx.maybeOne(sql.type(z.object({ account_id: z.string(), remaining: z.string(), status: z.enum(HOLD_STATES) }))`
    SELECT account_id, remaining::text AS remaining, status FROM holds WHERE hold_id = ${holdId} FOR UPDATE`);
}

/**
 * What a task held and was charged, as columns of a statement over tasks (`taskId` names its id):
 * `held_points` (its hold's amount: its maximum price, or a chat's estimate), `estimated_price_points` (its
 * latest attempt's offer's estimated price for it), `hold_status` (open, settled, released) and
 * `charged_points` (its capture, "0" until it settles or when nothing is charged). A task's hold is
 * named by its task id.
 */
export function taskCostColumns(taskId: ReturnType<typeof sql.fragment>) {
  return sql.fragment`
    (SELECT trim_scale(amount)::text FROM holds WHERE hold_id = ${taskId}) AS held_points,
    (SELECT trim_scale(estimated_price_points)::text FROM task_attempts WHERE task_id =
      ${taskId} ORDER BY attempt_number DESC LIMIT 1) AS estimated_price_points,
    (SELECT status FROM holds WHERE hold_id = ${taskId}) AS hold_status,
    ${chargedPointsColumn(taskId)}`;
}

/** What the task was charged ("0" for nothing). */
export function chargedPointsColumn(taskId: ReturnType<typeof sql.fragment>) {
  return sql.fragment`COALESCE((SELECT trim_scale(amount)::text FROM ledger_entries WHERE idempotency_key =
    ${kindValue('capture')} || ':' || ${taskId}), '0') AS charged_points`;
}

/** What the given tasks held and were charged together (exact sums; "0" for none). */
export async function costOfTasks(
  db: Runner,
  taskIds: readonly string[],
): Promise<{ held_points: string; charged_points: string }> {
  return db.one(sql.type(z.object({ held_points: z.string(), charged_points: z.string() }))`
    SELECT trim_scale(COALESCE((SELECT sum(amount) FROM holds WHERE hold_id = ANY(${sql.array(taskIds, 'text')})), 0))::text AS held_points,
           trim_scale(COALESCE((SELECT sum(amount) FROM ledger_entries
             WHERE idempotency_key = ANY(SELECT
               ${kindValue('capture')} || ':' || id FROM unnest(${sql.array(taskIds, 'text')}) id)), 0))::text AS charged_points`);
}

/**
 * What the given tasks have cost and may still cost: their charges, and what their open holds may yet
 * capture (a limit spread over several tasks counts a task that has not settled at its whole hold).
 */
export async function committedToTasks(db: Runner, taskIds: readonly string[]): Promise<string> {
  return db.oneFirst(sql.type(z.object({ points: z.string() }))`
    SELECT trim_scale(
             COALESCE((SELECT sum(remaining) FROM holds WHERE hold_id = ANY(${sql.array(taskIds, 'text')}) AND status = ${HOLD_OPEN}), 0)
           + COALESCE((SELECT sum(amount) FROM ledger_entries
               WHERE idempotency_key = ANY(SELECT ${kindValue('capture')} || ':' || id FROM unnest(${sql.array(taskIds, 'text')}) id)), 0))::text AS points`);
}

/** Gives a whole open hold back (its task ended without a result) and closes it. */
export async function release(db: Runner, input: { holdId: string }): Promise<LedgerResult & { released: string }> {
  return inTransaction(db, async (tx) => {
    const held = await lockHold(tx, input.holdId);
    if (!held) throw new Error(`hold ${input.holdId} does not exist`);
    if (held.status !== HOLD_OPEN) return { applied: false, released: '0' };
    const applied = await appendEntry(tx, {
      accountId: held.account_id,
      kind: 'release',
      amount: held.remaining,
      holdId: input.holdId,
      key: `release:${input.holdId}`,
    });
    if (!applied) return { applied, released: '0' };
    await tx.query(
      sql.unsafe`UPDATE holds SET remaining = 0, status = ${HOLD_RELEASED}, closed_at = now() WHERE hold_id = ${input.holdId}`,
    );
    await tx.query(
      sql.unsafe`UPDATE balances SET ${applyEntry('release', sql.fragment`${held.remaining}::numeric`)} WHERE account_id = ${held.account_id}`,
    );
    return { applied, released: held.remaining };
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
    const held = await tx.maybeOne(sql.type(
      z.object({
        status: z.string(),
        charged: z.string(),
        fee: z.string(),
        earned: z.string(),
        rest: z.string(),
        written: z.number(),
      }),
    )`
      WITH h AS (
        SELECT account_id, status, charged, fee, charged - fee AS earned, remaining - charged AS rest
        FROM (
          SELECT account_id, status, remaining, charged, charged * ${input.feePercent}::numeric / 100 AS fee
          FROM (SELECT *, ${cappedCharge(input.price)} AS charged FROM holds WHERE hold_id = ${input.holdId} FOR UPDATE) hold
        ) priced
      ), movable AS (
        SELECT * FROM h WHERE status = ${HOLD_OPEN} AND rest >= 0
      ), locked AS (
        SELECT b.account_id FROM balances b, movable m
        WHERE b.account_id = ANY(ARRAY[m.account_id, ${input.solverId}, ${PLATFORM_ACCOUNT_ID}])
        ORDER BY b.account_id FOR UPDATE OF b
      ), entries AS (
        INSERT INTO ledger_entries (account_id, kind, amount, hold_id, idempotency_key)
        SELECT e.account_id, e.kind, e.amount, ${input.holdId}, e.kind || ':' || ${input.holdId}::text
        FROM movable m CROSS JOIN LATERAL (VALUES
          (m.account_id, ${kindValue('capture')}, m.charged),
          (${input.solverId}, ${kindValue('payout')}, m.earned),
          (${PLATFORM_ACCOUNT_ID}, ${kindValue('fee')}, m.fee),
          (m.account_id, ${kindValue('release')}, m.rest)) e (account_id, kind, amount)
        ON CONFLICT (idempotency_key) DO NOTHING
        RETURNING account_id, kind, amount
      ), deltas AS (
        SELECT account_id, ${effectSum('available')} AS available, ${effectSum('held')} AS held,
               ${effectSum('lifetime_earned')} AS earned, ${effectSum('lifetime_spent')} AS spent
        FROM entries JOIN locked USING (account_id) GROUP BY account_id
      ), moved AS (
        UPDATE balances b SET available = b.available + d.available, held = b.held + d.held,
          lifetime_earned = b.lifetime_earned + d.earned, lifetime_spent = b.lifetime_spent + d.spent, updated_at = now()
        FROM deltas d WHERE b.account_id = d.account_id
        RETURNING b.account_id
      ), closed AS (
        UPDATE holds SET status = CASE WHEN m.rest < holds.amount THEN ${HOLD_SETTLED} ELSE ${HOLD_RELEASED} END, remaining = 0, closed_at = now()
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
    if (held.rest.startsWith('-'))
      throw new Error(`capture of ${held.charged} exceeds what remains of hold ${input.holdId}`);
    // Under the hold's row lock an open hold has none of its settlement entries yet.
    if (held.written !== 4)
      throw new Error(`settlement of hold ${input.holdId} wrote ${held.written} of its 4 entries`);
    return { applied: true, ...outcome };
  });
}

/** Locks the accounts' balance rows in the one global order settlements take them in. */
async function lockBalances(tx: Tx, accountIds: readonly string[]): Promise<void> {
  await tx.query(
    sql.unsafe`SELECT 1 FROM balances WHERE account_id = ANY(${sql.array([...new Set(accountIds)], 'text')}) ORDER BY account_id FOR UPDATE`,
  );
}

export type RefundMovement =
  /**
   * `refunded` went to `accountId` (the task's client): `forfeited` from the solver's hold, `feeReturned` from
   * the platform.
   */
  | { applied: true; accountId: string; solverId: string; refunded: string; forfeited: string; feeReturned: string }
  /**
   * The solver's pay for the task is not held (it vested, was refunded already, or was never escrowed): nothing
   * moves.
   */
  | { applied: false };

/**
 * Refunds a settled task's client from its solver's unvested pay for it, once: the pay held as
 * `held:<task id>` is forfeited, the platform gives back its fee (as much as its available points
 * allow), and the client gets both back, never more than the task's capture. Locks the hold, then the
 * three balance rows in the global order.
 */
export async function refundFromEarnings(db: Runner, taskId: string): Promise<RefundMovement> {
  return inTransaction(db, async (tx) => {
    const held = await tx.maybeOne(sql.type(z.object({ solver_id: z.string(), client_id: z.string() }))`
      SELECT h.account_id AS solver_id, t.account_id AS client_id
      FROM holds h JOIN tasks t ON t.task_id = ${taskId}
      WHERE h.hold_id = ${heldEarningsId(taskId)} AND h.status = ${HOLD_OPEN}
      FOR UPDATE OF h`);
    if (!held) return { applied: false };
    await lockBalances(tx, [held.solver_id, held.client_id, PLATFORM_ACCOUNT_ID]);
    // The fee given back is what remains of the capture beyond the forfeited pay, within the fee and the
    // platform's available points (no balance goes negative); the refund never exceeds the capture.
    const amounts = await tx.one(sql.type(
      z.object({ forfeited: z.string(), fee_returned: z.string(), refunded: z.string() }),
    )`
      SELECT trim_scale(forfeited)::text AS forfeited, trim_scale(fee_returned)::text AS fee_returned,
             trim_scale(LEAST(charged, forfeited + fee_returned))::text AS refunded
      FROM (
        SELECT forfeited, charged, GREATEST(LEAST(fee, charged - forfeited, platform_available), 0) AS fee_returned
        FROM (
          SELECT (SELECT remaining FROM holds WHERE hold_id = ${heldEarningsId(taskId)}) AS forfeited,
                 COALESCE((SELECT amount FROM ledger_entries WHERE idempotency_key = ${kindValue('capture')} || ':' || ${taskId}), 0) AS charged,
                 COALESCE((SELECT amount FROM ledger_entries WHERE idempotency_key = ${kindValue('fee')} || ':' || ${taskId}), 0) AS fee,
                 (SELECT available FROM balances WHERE account_id = ${PLATFORM_ACCOUNT_ID}) AS platform_available
        ) raw
      ) capped`);
    const moves: { accountId: string; kind: LedgerEntryKind; amount: string; holdId: string }[] = [
      { accountId: held.solver_id, kind: 'forfeit', amount: amounts.forfeited, holdId: heldEarningsId(taskId) },
      { accountId: PLATFORM_ACCOUNT_ID, kind: 'fee_return', amount: amounts.fee_returned, holdId: taskId },
      { accountId: held.client_id, kind: 'refund', amount: amounts.refunded, holdId: taskId },
    ];
    for (const move of moves) {
      if (/^0*(\.0*)?$/.test(move.amount)) continue;
      if (!(await appendEntry(tx, { ...move, key: `${move.kind}:${move.holdId}` })))
        throw new Error(`${move.kind} of task ${taskId} was written before its hold closed`);
      await tx.query(
        sql.unsafe`UPDATE balances SET ${applyEntry(move.kind, sql.fragment`${move.amount}::numeric`)} WHERE account_id = ${move.accountId}`,
      );
    }
    await tx.query(
      sql.unsafe`UPDATE holds SET remaining = 0, status = ${HOLD_SETTLED}, closed_at = now() WHERE hold_id = ${heldEarningsId(taskId)}`,
    );
    return {
      applied: true,
      accountId: held.client_id,
      solverId: held.solver_id,
      refunded: amounts.refunded,
      forfeited: amounts.forfeited,
      feeReturned: amounts.fee_returned,
    };
  });
}

/** Balances recomputed from the entries alone; used to prove the running totals never drift. */
export async function balanceFromEntries(db: Runner, accountId: string): Promise<Balance> {
  return db.one(sql.type(BalanceRow)`
    SELECT trim_scale(${effectSum('available')})::text AS available_points,
           trim_scale(${effectSum('held')})::text AS held_points,
           trim_scale(${effectSum('lifetime_earned')})::text AS lifetime_earned_points,
           trim_scale(${effectSum('lifetime_spent')})::text AS lifetime_spent_points
    FROM ledger_entries WHERE account_id = ${accountId}`);
}

/**
 * What a whole-ledger audit finds wrong (all zero when exact): accounts whose running balances differ
 * from their entries, go negative or break available + held = deposited + earned − spent; holds left
 * open on finished tasks; holds charged, paid out, forfeited or refunded more than once.
 */
export async function auditLedger(
  db: Runner,
): Promise<{ accountsOff: number; openHoldsOnFinishedTasks: number; doubleMovements: number }> {
  return db.one(sql.type(
    z.object({ accountsOff: z.number(), openHoldsOnFinishedTasks: z.number(), doubleMovements: z.number() }),
  )`
    SELECT
      (SELECT count(*)::int FROM balances b
       LEFT JOIN LATERAL (
         SELECT ${effectSum('available')} AS available, ${effectSum('held')} AS held
         FROM ledger_entries e WHERE e.account_id = b.account_id) l ON true
       WHERE b.available <> l.available OR b.held <> l.held OR b.available < 0 OR b.held < 0
          OR b.available + b.held <> b.lifetime_deposited + b.lifetime_earned - b.lifetime_spent) AS "accountsOff",
      (SELECT count(*)::int FROM holds h JOIN tasks t ON t.task_id = h.hold_id
       WHERE h.status = ${HOLD_OPEN} AND t.status = ANY(${sql.array(TERMINAL_STATES, 'text')})) AS "openHoldsOnFinishedTasks",
      (SELECT count(*)::int FROM (
         SELECT hold_id, kind FROM ledger_entries WHERE kind =
           ANY(${sql.array(['capture', 'payout', 'forfeit', 'fee_return', 'refund'] satisfies LedgerEntryKind[], 'text')})
         GROUP BY 1, 2 HAVING count(*) > 1) d) AS "doubleMovements"`);
}

/**
 * The task an entry belongs to: its hold's, or for a solver's pay held until it vests (`held:<task id>`), that
 * task.
 */
const ENTRY_TASK_ID = sql.fragment`CASE WHEN e.hold_id LIKE ${heldEarningsId('%')} THEN substr(e.hold_id, ${heldEarningsId('').length + 1}) ELSE e.hold_id END`;

const LedgerEntryRow = z.object({
  entry_id: z.string(),
  kind: z.enum(ENTRY_KINDS as [LedgerEntryKind, ...LedgerEntryKind[]]),
  amount: z.string(),
  task_id: z.string().nullable(),
  task_type: z.string().nullable(),
  available_change: z.string(),
  held_change: z.string(),
  created_at: z.string(),
});
export type LedgerEntry = z.infer<typeof LedgerEntryRow>;

export interface LedgerHistoryFilter {
  kind?: LedgerEntryKind;
  taskId?: string;
  createdAfter?: string;
  createdBefore?: string;
  /** The entry_id where the previous page ended. */
  beforeEntryId?: string;
  limit: number;
}

/**
 * An account's ledger entries, newest first, a page at a time (cut by entry_id, so entries written while
 * a client pages never shift the pages). Each carries its signed effect on available and held points,
 * from LEDGER_ENTRY_KINDS: summed over every entry they give the balance.
 */
export async function ledgerHistory(
  db: Runner,
  accountId: string,
  filter: LedgerHistoryFilter,
): Promise<{ entries: LedgerEntry[]; hasMore: boolean }> {
  const conditions = [
    sql.fragment`e.account_id = ${accountId}`,
    ...(filter.kind ? [sql.fragment`e.kind = ${filter.kind}`] : []),
    ...(filter.taskId ? [sql.fragment`e.hold_id IN (${filter.taskId}, ${heldEarningsId(filter.taskId)})`] : []),
    ...(filter.createdAfter ? [sql.fragment`e.created_at >= ${filter.createdAfter}::timestamptz`] : []),
    ...(filter.createdBefore ? [sql.fragment`e.created_at < ${filter.createdBefore}::timestamptz`] : []),
    ...(filter.beforeEntryId ? [sql.fragment`e.entry_id < ${filter.beforeEntryId}::bigint`] : []),
  ];
  // One row more than the page tells whether another page follows.
  const rows = await db.any(sql.type(LedgerEntryRow)`
    SELECT e.entry_id::text AS entry_id, e.kind, trim_scale(e.amount)::text AS amount, ${ENTRY_TASK_ID} AS task_id, t.task_type,
           trim_scale(${entryEffect('available')})::text AS available_change, trim_scale(${entryEffect('held')})::text AS held_change,
           e.created_at
    FROM ledger_entries e LEFT JOIN tasks t ON t.task_id = ${ENTRY_TASK_ID}
    WHERE ${sql.join(conditions, sql.fragment` AND `)}
    ORDER BY e.entry_id DESC
    LIMIT ${filter.limit + 1}`);
  return { entries: rows.slice(0, filter.limit), hasMore: rows.length > filter.limit };
}

/**
 * Every entry that moved points for one task, on any account (its client's hold, capture and release,
 * the solver's payout, the platform's fee, and the `held:` hold of a quarantined solver's earnings),
 * oldest first. Each entry's key is `<kind>:<hold id>`, so the unique index finds them.
 */
export async function taskLedger(
  db: Runner,
  taskId: string,
): Promise<readonly (LedgerEntry & { account_id: string })[]> {
  const keys = ENTRY_KINDS.flatMap((kind) => [`${kind}:${taskId}`, `${kind}:held:${taskId}`]);
  return db.any(sql.type(LedgerEntryRow.extend({ account_id: z.string() }))`
    SELECT e.entry_id::text AS entry_id, e.account_id, e.kind, trim_scale(e.amount)::text AS amount, ${taskId}::text AS task_id, t.task_type,
           trim_scale(${entryEffect('available')})::text AS available_change, trim_scale(${entryEffect('held')})::text AS held_change,
           e.created_at
    FROM ledger_entries e LEFT JOIN tasks t ON t.task_id = ${taskId}
    WHERE e.idempotency_key = ANY(${sql.array(keys, 'text')})
    ORDER BY e.entry_id`);
}

const SummaryRow = z.object({
  day: z.string(),
  task_type: z.string().nullable(),
  tasks: z.number(),
  entries: z.number(),
  amounts: z.record(z.string()),
  available_change: z.string(),
  held_change: z.string(),
});
export type LedgerSummaryRow = z.infer<typeof SummaryRow>;

/**
 * The account's entries summed by UTC day and task type (null: entries of no task, i.e. deposits):
 * the amount of each entry kind, and the net change of available and held points. Newest day first.
 */
export async function ledgerSummary(
  db: Runner,
  accountId: string,
  range: { createdAfter?: string; createdBefore?: string },
): Promise<readonly LedgerSummaryRow[]> {
  const conditions = [
    sql.fragment`e.account_id = ${accountId}`,
    ...(range.createdAfter ? [sql.fragment`e.created_at >= ${range.createdAfter}::timestamptz`] : []),
    ...(range.createdBefore ? [sql.fragment`e.created_at < ${range.createdBefore}::timestamptz`] : []),
  ];
  const amounts = ENTRY_KINDS.map(
    (kind) => sql.fragment`${kind}::text, trim_scale(COALESCE(SUM(e.amount) FILTER (WHERE e.kind = ${kind}), 0))::text`,
  );
  return db.any(sql.type(SummaryRow)`
    SELECT to_char(e.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, t.task_type,
           count(DISTINCT ${ENTRY_TASK_ID})::int AS tasks, count(*)::int AS entries,
           json_build_object(${sql.join(amounts, sql.fragment`, `)}) AS amounts,
           trim_scale(${effectSum('available')})::text AS available_change, trim_scale(${effectSum('held')})::text AS held_change
    FROM ledger_entries e LEFT JOIN tasks t ON t.task_id = ${ENTRY_TASK_ID}
    WHERE ${sql.join(conditions, sql.fragment` AND `)}
    GROUP BY 1, 2
    ORDER BY 1 DESC, 2 NULLS FIRST`);
}
