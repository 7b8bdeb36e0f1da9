import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { AccountRow, accountOfKey, touchKey, type Account } from './accounts';
import type { Db } from './pool';

/**
 * Per-account fixed-window rate limit, kept in PostgreSQL so that every API node counts against the
 * same numbers. The database clock defines the windows, so nodes with skewed clocks still agree.
 */

export const RATE_LIMIT_WINDOW_SECONDS = 60;

const CounterRow = z.object({
  window_count: z.number(),
  reset_at: z.number(),
  total_count: z.number(),
  refuse_from_total: z.number().nullable(),
  now_epoch: z.number(),
});

export interface RateLimitState {
  limit: number;
  remaining: number;
  /** Unix time (seconds) at which the current window ends. */
  resetAt: number;
  /** Seconds until a retry can succeed. */
  retryAfter: number;
  limited: boolean;
  /** True when the refusal comes from simulate-rate-limit (it lasts until reset-rate-limit). */
  simulated: boolean;
}

/**
 * Authenticates an API key and counts the request in one round trip; null for an unknown or revoked
 * key, whose request is not counted against anyone. The count is one atomic upsert (a new window starts
 * from 1, the same window increments), so concurrent requests serialise on the account's row.
 */
export async function countKeyedRequest(
  db: CommonQueryMethods,
  apiKey: string,
  limit: number,
): Promise<{ account: Account; state: RateLimitState } | null> {
  const row = await db.maybeOne(sql.type(AccountRow.merge(CounterRow))`
    WITH keyed AS (${accountOfKey(apiKey)}), touched AS (${touchKey(apiKey)}), async_commit AS (
      -- Commits without waiting for the WAL flush: an OS crash may lose the last counts, which costs nothing,
      -- and every request of a busy account, which all update this row, holds its lock for less time.
      SELECT set_config('synchronous_commit', 'off', true)
    ), clock AS (
      SELECT to_timestamp(floor(extract(epoch FROM now()) / ${RATE_LIMIT_WINDOW_SECONDS}) * ${RATE_LIMIT_WINDOW_SECONDS}) AS window_start
    ), counted AS (
      INSERT INTO rate_limits AS r (account_id, window_start, window_count, total_count)
      SELECT keyed.account_id, clock.window_start, 1, 1 FROM keyed, clock
      ON CONFLICT (account_id) DO UPDATE SET
        window_count = CASE WHEN r.window_start = EXCLUDED.window_start THEN r.window_count + 1 ELSE 1 END,
        window_start = EXCLUDED.window_start,
        total_count = r.total_count + 1
      RETURNING r.account_id, r.window_count, extract(epoch FROM r.window_start)::bigint + ${RATE_LIMIT_WINDOW_SECONDS} AS reset_at,
        r.total_count, r.refuse_from_total, extract(epoch FROM now())::float8 AS now_epoch
    )
    SELECT keyed.*, counted.window_count, counted.reset_at, counted.total_count, counted.refuse_from_total, counted.now_epoch
    FROM counted JOIN keyed USING (account_id) CROSS JOIN async_commit`);
  if (!row) return null;
  const { window_count, reset_at, total_count, refuse_from_total, now_epoch, ...account } = row;
  return { account, state: stateOf({ window_count, reset_at, total_count, refuse_from_total, now_epoch }, limit) };
}

function stateOf(row: z.infer<typeof CounterRow>, limit: number): RateLimitState {
  const simulated = row.refuse_from_total !== null && row.total_count >= row.refuse_from_total;
  const limited = simulated || row.window_count > limit;
  const windowRemaining = Math.max(0, limit - row.window_count);
  // An armed simulation admits only the requests it has left, so Remaining never promises more.
  const simulationRemaining =
    row.refuse_from_total === null ? Infinity : Math.max(0, row.refuse_from_total - row.total_count - 1);
  return {
    limit,
    remaining: limited ? 0 : Math.min(windowRemaining, simulationRemaining),
    resetAt: row.reset_at,
    retryAfter: Math.max(1, Math.ceil(row.reset_at - row.now_epoch)),
    limited,
    simulated,
  };
}

/**
 * A CTE named `name` that charges accounts requests they did not make (rows of `source`: account_id,
 * requests) in the current window, as if they had: a task that failed on its target (docs/trust.md).
 */
export function chargeRequestsStep(name: string, source: ReturnType<typeof sql.fragment>) {
  return sql.fragment`${sql.identifier([name])} AS (
    INSERT INTO rate_limits AS r (account_id, window_start, window_count, total_count)
    SELECT s.account_id, to_timestamp(floor(extract(epoch FROM now()) / ${RATE_LIMIT_WINDOW_SECONDS}) * ${RATE_LIMIT_WINDOW_SECONDS}), s.requests, 0
    FROM (${source}) s
    ON CONFLICT (account_id) DO UPDATE SET
      window_count = CASE WHEN r.window_start = EXCLUDED.window_start THEN r.window_count + EXCLUDED.window_count ELSE EXCLUDED.window_count END,
      window_start = EXCLUDED.window_start
  )`;
}

/** After `afterRequests` more admitted requests (0: the very next one), every request is refused until a reset. */
export async function simulateRateLimit(db: Db, accountId: string, afterRequests: number): Promise<void> {
  await db.query(sql.unsafe`
    INSERT INTO rate_limits AS r (account_id, window_start, window_count, total_count, refuse_from_total)
    VALUES (${accountId}, now(), 0, 0, ${afterRequests + 1})
    ON CONFLICT (account_id) DO UPDATE SET refuse_from_total = r.total_count + ${afterRequests + 1}`);
}

/** Clears the account's counter and any simulation. */
export async function resetRateLimit(db: Db, accountId: string): Promise<void> {
  await db.query(sql.unsafe`DELETE FROM rate_limits WHERE account_id = ${accountId}`);
}
