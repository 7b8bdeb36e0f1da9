import { sql } from 'slonik';
import { z } from 'zod';
import type { Db } from './pool';
import type { RateLimitState } from './rate-limits';

/**
 * Per-address fixed-window counters, kept in PostgreSQL so that every API node counts against the same
 * numbers; the database clock defines the windows, as for the per-account limit (src/db/rate-limits.ts).
 */

/** What is counted per client address, and the length of each one's window in seconds. */
export const ADDRESS_LIMIT_WINDOWS = Object.freeze({
  register: 3600,
  unauthenticated: 60,
  solver_connect: 60,
} as const);
export type AddressLimitScope = keyof typeof ADDRESS_LIMIT_WINDOWS;

// Counters are deleted this long after their window began: past every window, so none still counts.
const STALE_AFTER_SECONDS = 2 * Math.max(...Object.values(ADDRESS_LIMIT_WINDOWS));

const CounterRow = z.object({ window_count: z.number(), reset_at: z.number(), now_epoch: z.number() });

/**
 * Counts one request of `address` (an IPv4 or IPv6 address; IPv6 is counted by its /64) in `scope` and
 * says whether it is over `limit`. One atomic upsert: concurrent requests on any node count exactly once.
 */
export async function countAddressRequest(
  db: Db,
  scope: AddressLimitScope,
  address: string,
  limit: number,
): Promise<RateLimitState> {
  const window = ADDRESS_LIMIT_WINDOWS[scope];
  const row = await db.one(sql.type(CounterRow)`
    WITH async_commit AS (
      -- As for the per-account counters: an OS crash may lose the last counts, which costs nothing.
      SELECT set_config('synchronous_commit', 'off', true)
    ), clock AS (
      SELECT to_timestamp(floor(extract(epoch FROM now()) / ${window}) * ${window}) AS window_start
    ), counted AS (
      INSERT INTO address_rate_limits AS r (scope, address, window_start, window_count)
      SELECT ${scope}, network(set_masklen(a, CASE family(a) WHEN 6 THEN 64 ELSE 32 END)), clock.window_start, 1
      FROM clock, (SELECT ${address}::inet AS a) address
      ON CONFLICT (scope, address) DO UPDATE SET
        window_count = CASE WHEN r.window_start = EXCLUDED.window_start THEN r.window_count + 1 ELSE 1 END,
        window_start = EXCLUDED.window_start
      RETURNING r.window_count, extract(epoch FROM r.window_start)::bigint + ${window} AS reset_at, extract(epoch FROM now())::float8 AS now_epoch
    )
    SELECT counted.* FROM counted CROSS JOIN async_commit`);
  const limited = row.window_count > limit;
  return {
    limit,
    remaining: Math.max(0, limit - row.window_count),
    resetAt: row.reset_at,
    retryAfter: Math.max(1, Math.ceil(row.reset_at - row.now_epoch)),
    limited,
    simulated: false,
  };
}

/** Deletes the counters of windows that ended long ago (the workers' sweep). */
export async function pruneAddressCounters(db: Db): Promise<void> {
  await db.query(
    sql.unsafe`DELETE FROM address_rate_limits WHERE window_start < now() - make_interval(secs => ${STALE_AFTER_SECONDS})`,
  );
}
