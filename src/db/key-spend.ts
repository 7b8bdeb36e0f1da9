import { CheckIntegrityConstraintViolationError, sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { SPEND_LIMIT_PERIODS } from '../schemas/domain';
import { spendPeriodNow } from './accounts';

/**
 * A key's spend limit: what the tasks a key created hold (while they run) and were charged (once
 * settled), per period, may not exceed its limit. The count is one row per key and period in
 * `key_spend`, changed only by the statement that creates a task (its hold added) and by the
 * transaction that settles or releases that hold (what is given back taken off); a CHECK on the row
 * refuses the creation that would overshoot, so concurrent requests on one key take turns on its row and
 * exactly as many are admitted as fit, as the balances' CHECK does for the account.
 */

type Runner = CommonQueryMethods;

/** CTE `spend_key`: the key's limit and the period its spend counts in now; no row for a key without a limit. */
export const keySpendLookup = (keyId: string) => sql.fragment`
  spend_key AS (
    SELECT key_id, spend_limit_points, ${spendPeriodNow(sql.fragment`spend_limit_period`)} AS period_start
    FROM api_keys WHERE key_id = ${keyId} AND spend_limit_points IS NOT NULL
  )`;

/**
 * CTE `key_spent`: adds a new task's hold of `amount` to its key's spend. It reads `b` (the hold's
 * balance update), so the key's row is locked after the account's balance row, the order in which a
 * settlement takes them too.
 */
export const keySpendStep = (amount: string | ReturnType<typeof sql.fragment>) => sql.fragment`
  key_spent AS (
    INSERT INTO key_spend AS s (key_id, period_start, spent_points, limit_points)
    SELECT k.key_id, k.period_start, ${amount}::numeric, k.spend_limit_points FROM spend_key k, b
    ON CONFLICT (key_id, period_start) DO UPDATE SET spent_points = s.spent_points + EXCLUDED.spent_points, limit_points = EXCLUDED.limit_points
    RETURNING key_id
  )`;

/** True when a statement failed because a key's spend would have passed its limit (its CHECK). */
export const isKeySpendLimitReached = (error: unknown) =>
  error instanceof CheckIntegrityConstraintViolationError && error.constraint === 'key_spend_within_limit';

/**
 * Takes what a finished task's settlement gave back (`returned`, a numeric expression) off its key's
 * spend, in the period its hold counted in. Called in the settling transaction, after the balance rows.
 */
export async function returnKeySpend(
  tx: Runner,
  taskId: string,
  returned: ReturnType<typeof sql.fragment>,
): Promise<void> {
  await tx.query(sql.unsafe`
    UPDATE key_spend s SET spent_points = s.spent_points - (${returned})
    FROM tasks t WHERE t.task_id = ${taskId} AND s.key_id = t.key_id AND s.period_start = t.key_spend_period`);
}

const KeySpendRow = z.object({ points: z.string(), period: z.enum(SPEND_LIMIT_PERIODS), spent_points: z.string() });
export type KeySpend = z.infer<typeof KeySpendRow>;

/** The key's limit and what its tasks hold and were charged in the current period; null without a limit. */
export async function keySpendOf(db: Runner, keyId: string): Promise<KeySpend | null> {
  return db.maybeOne(sql.type(KeySpendRow)`
    SELECT trim_scale(k.spend_limit_points)::text AS points, k.spend_limit_period AS period,
           COALESCE((SELECT trim_scale(s.spent_points)::text FROM key_spend s WHERE s.key_id = k.key_id AND s.period_start =
             ${spendPeriodNow(sql.fragment`k.spend_limit_period`)}), '0') AS spent_points
    FROM api_keys k WHERE k.key_id = ${keyId} AND k.spend_limit_points IS NOT NULL`);
}
