import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { verificationColumn } from './verification';

/**
 * The page cache's index (docs/crawl.md, "Page cache"): which completed task holds a page, by its URL,
 * the way it was obtained and who may be served it. The page is that task's result, kept and purged
 * with it.
 */

type Runner = CommonQueryMethods;

export interface PageCacheKey {
  url: string;
  variant: string;
  /** 'shared', or the account id the page may be served to. */
  scope: string;
}

/** The scope of a page every client may be served. */
export const SHARED_SCOPE = 'shared';

const CachedRow = z.object({
  n: z.number(),
  task_id: z.string(),
  task_type: z.string(),
  cached_at: z.string(),
  result: z.record(z.any()),
  verification: z.string(),
});
export type CachedPageRow = Omit<z.infer<typeof CachedRow>, 'n'>;

/**
 * For each lookup, the page cached under its key no older than its `maxAgeMs`, whose task still has its
 * result; null otherwise. A refunded result is evicted here and not served; a disputed one is not served
 * while the dispute lasts.
 */
export async function cachedPages(
  db: Runner,
  lookups: ReadonlyArray<PageCacheKey & { maxAgeMs: number }>,
): Promise<Array<CachedPageRow | null>> {
  const rows = await db.any(sql.type(CachedRow)`
    SELECT l.n::int AS n, c.task_id, t.task_type, to_char(c.cached_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS cached_at, t.result,
      ${verificationColumn(sql.fragment`c.task_id`)}
    FROM unnest(${sql.array(
      lookups.map((l) => l.url),
      'text',
    )}::text[], ${sql.array(
      lookups.map((l) => l.variant),
      'text',
    )}::text[],
                ${sql.array(
                  lookups.map((l) => l.scope),
                  'text',
                )}::text[], ${sql.array(
                  lookups.map((l) => l.maxAgeMs),
                  'float8',
                )}::float8[])
      WITH ORDINALITY AS l(url, variant, scope, max_age_ms, n)
    JOIN page_cache c ON c.url = l.url AND c.variant = l.variant AND c.scope = l.scope
      AND c.cached_at > now() - make_interval(secs => l.max_age_ms / 1000.0)
    JOIN tasks t ON t.task_id = c.task_id AND t.status = 'completed' AND t.result IS NOT NULL`);
  const refunded = rows.filter((row) => row.verification === 'refunded').map((row) => row.task_id);
  if (refunded.length > 0) await evictTasks(db, refunded);
  const found = new Map(
    rows
      .filter((row) => row.verification === 'verified' || row.verification === 'unchecked')
      .map(({ n, ...row }) => [n, row]),
  );
  return lookups.map((_, index) => found.get(index + 1) ?? null);
}

/**
 * Caches each task's page under its key, dated when the task completed; a page cached under the key
 * before is replaced. A task that has not completed with a result is not cached.
 */
export async function cachePages(db: Runner, entries: ReadonlyArray<PageCacheKey & { taskId: string }>): Promise<void> {
  if (entries.length === 0) return;
  await db.query(sql.unsafe`
    INSERT INTO page_cache (url, variant, scope, task_id, cached_at)
    SELECT DISTINCT ON (e.url, e.variant, e.scope) e.url, e.variant, e.scope, t.task_id, t.completed_at
    FROM unnest(${sql.array(
      entries.map((e) => e.url),
      'text',
    )}::text[], ${sql.array(
      entries.map((e) => e.variant),
      'text',
    )}::text[],
                ${sql.array(
                  entries.map((e) => e.scope),
                  'text',
                )}::text[], ${sql.array(
                  entries.map((e) => e.taskId),
                  'text',
                )}::text[])
      AS e(url, variant, scope, task_id)
    JOIN tasks t ON t.task_id = e.task_id AND t.status = 'completed' AND t.result IS NOT NULL
    ORDER BY e.url, e.variant, e.scope, t.completed_at DESC
    ON CONFLICT (url, variant, scope) DO UPDATE SET task_id = EXCLUDED.task_id, cached_at = EXCLUDED.cached_at
      WHERE page_cache.cached_at <= EXCLUDED.cached_at`);
}

/** Removes the entries of these tasks' pages. */
export async function evictTasks(db: Runner, taskIds: readonly string[]): Promise<void> {
  await db.query(sql.unsafe`DELETE FROM page_cache WHERE task_id = ANY(${sql.array([...taskIds], 'text')})`);
}
