import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';

/**
 * What the retention purge reads and changes: results (and the page cache's entries for them), crawl documents
 * and the webhook bodies that carry
 * them past their window, and idempotency keys past theirs. Each statement touches one small batch and holds
 * its row locks for that statement only.
 */

type Runner = CommonQueryMethods;

/** An Idempotency-Key names its first task for this long (Stripe's window); a reuse after it starts a new task. */
export const IDEMPOTENCY_KEY_WINDOW_HOURS = 24;
const KEY_WINDOW = sql.fragment`make_interval(hours => ${IDEMPOTENCY_KEY_WINDOW_HOURS})`;

/** `task` row alias: its key is still within the window. */
export const keyInWindow = (alias: string) =>
  sql.fragment`${sql.identifier([alias, 'created_at'])} >= now() - ${KEY_WINDOW}`;

const ExpiredRow = z.object({ task_id: z.string(), keys: z.array(z.string()) });

/** The oldest results that ended more than `retentionSeconds` ago, with the artifact keys each refers to. */
export async function resultsPastRetention(
  db: Runner,
  retentionSeconds: number,
  limit: number,
): Promise<readonly z.infer<typeof ExpiredRow>[]> {
  return db.any(sql.type(ExpiredRow)`
    SELECT task_id, ARRAY(SELECT jsonb_array_elements_text(jsonb_path_query_array(result, 'strict $.**."$artifact".key'))) AS keys
    FROM tasks
    WHERE result IS NOT NULL AND completed_at < now() - make_interval(secs => ${retentionSeconds})
    ORDER BY completed_at
    LIMIT ${limit}`);
}

/**
 * Removes these tasks' results (their artifacts deleted first), the page cache's entries that name
 * them (a cached page is its task's result), and a verified chat's answer (its result too); returns the
 * tasks it changed.
 */
export async function expireResults(db: Runner, taskIds: readonly string[]): Promise<readonly string[]> {
  return db.anyFirst(sql.type(z.object({ task_id: z.string() }))`
    WITH expired AS (
      UPDATE tasks SET result = NULL, result_expired_at = now()
      WHERE task_id = ANY(${sql.array([...taskIds], 'text')}) AND result IS NOT NULL
      RETURNING task_id),
    evicted AS (DELETE FROM page_cache WHERE task_id IN (SELECT task_id FROM expired)),
    answers AS (UPDATE redundant_runs SET client_answer = NULL WHERE task_id IN (SELECT task_id FROM expired) AND client_answer IS NOT NULL)
    SELECT task_id FROM expired`);
}

/**
 * Removes up to `limit` crawl and batch-scrape page documents that ended more than `retentionSeconds`
 * ago, oldest first, and marks their jobs (which answer 404 from then on); returns how many it removed.
 */
export async function expireCrawlDocuments(db: Runner, retentionSeconds: number, limit: number): Promise<number> {
  return db.oneFirst(sql.type(z.object({ n: z.number() }))`
    WITH pages AS (
      UPDATE crawl_pages SET document = NULL
      WHERE page_id IN (
        SELECT page_id FROM crawl_pages WHERE document IS NOT NULL AND finished_at < now() - make_interval(secs => ${retentionSeconds})
        ORDER BY finished_at LIMIT ${limit} FOR UPDATE SKIP LOCKED)
      RETURNING crawl_id),
    jobs AS (
      UPDATE crawls SET documents_expired_at = now() WHERE crawl_id IN (SELECT crawl_id FROM pages) AND documents_expired_at IS NULL)
    SELECT count(*)::int AS n FROM pages`);
}

/**
 * Empties the `data` (page documents) of up to `limit` job webhook bodies written more than `retentionSeconds`
 * ago; returns how many.
 */
export async function expireDeliveryDocuments(db: Runner, retentionSeconds: number, limit: number): Promise<number> {
  const expired = await db.query(sql.unsafe`
    UPDATE webhook_deliveries SET payload = jsonb_set(payload, '{data}', '[]'::jsonb)
    WHERE delivery_id IN (
      SELECT delivery_id FROM webhook_deliveries WHERE payload->'data' <> '[]'::jsonb AND created_at < now() - make_interval(secs => ${retentionSeconds})
      ORDER BY created_at LIMIT ${limit} FOR UPDATE SKIP LOCKED)`);
  return expired.rowCount;
}

/**
 * Releases up to `limit` idempotency keys older than the window (rows another transaction holds are left for the
 * next batch).
 */
export async function releaseIdempotencyKeys(db: Runner, limit: number): Promise<number> {
  const released = await db.query(sql.unsafe`
    UPDATE tasks SET idempotency_key = NULL
    WHERE task_id IN (
      SELECT task_id FROM tasks WHERE idempotency_key IS NOT NULL AND created_at < now() - ${KEY_WINDOW}
      ORDER BY created_at LIMIT ${limit} FOR UPDATE SKIP LOCKED)`);
  return released.rowCount;
}

/** Releases one account's key when it is older than the window, so that a new request with it creates a task. */
export async function releaseIdempotencyKeyIfExpired(db: Runner, accountId: string, key: string): Promise<void> {
  await db.query(sql.unsafe`
    UPDATE tasks SET idempotency_key = NULL
    WHERE account_id = ${accountId} AND idempotency_key = ${key} AND created_at < now() - ${KEY_WINDOW}`);
}
