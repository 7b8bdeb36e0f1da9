import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import type { Db } from './pool';

/**
 * Crawls and batch scrapes (docs/crawl.md) in PostgreSQL. A job's pages are rows unique by URL within
 * the job; the crawl activity is the only writer of a page's progress (claim, task, finish), the cancel
 * route the only other writer of a job's state.
 */

export const CRAWL_KINDS = ['crawl', 'batch_scrape'] as const;
export type CrawlKind = (typeof CRAWL_KINDS)[number];
export const CRAWL_STATES = ['scraping', 'completed', 'failed', 'cancelled'] as const;
export type CrawlState = (typeof CRAWL_STATES)[number];
export const PAGE_STATES = ['pending', 'running', 'completed', 'failed', 'cancelled'] as const;
export type PageState = (typeof PAGE_STATES)[number];

type Runner = CommonQueryMethods;

const iso = (column: string) => sql.fragment`to_char(${sql.identifier([column])} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

export const CrawlRow = z.object({
  crawl_id: z.string(),
  account_id: z.string(),
  key_id: z.string().nullable(),
  kind: z.enum(CRAWL_KINDS),
  url: z.string().nullable(),
  options: z.record(z.any()),
  status: z.enum(CRAWL_STATES),
  error: z.string().nullable(),
  robots_blocked: z.array(z.string()),
  workflow_id: z.string(),
  created_at: z.string(),
  expires_at: z.string(),
});
export type CrawlRow = z.infer<typeof CrawlRow>;

const CRAWL_COLUMNS = sql.fragment`crawl_id, account_id, key_id, kind, url, options, status, error, robots_blocked, workflow_id, ${iso('created_at')} AS created_at, ${iso('expires_at')} AS expires_at`;

export interface NewPage {
  url: string;
  depth: number;
}

export async function createCrawl(
  db: Db,
  input: { crawlId: string; accountId: string; keyId?: string; kind: CrawlKind; url: string | null; options: Record<string, unknown>; workflowId: string; ttlHours: number; pages: NewPage[] },
): Promise<void> {
  await db.query(sql.unsafe`
    INSERT INTO crawls (crawl_id, account_id, key_id, kind, url, options, workflow_id, expires_at)
    VALUES (${input.crawlId}, ${input.accountId}, ${input.keyId ?? null}, ${input.kind}, ${input.url}, ${sql.jsonb(input.options as never)},
            ${input.workflowId}, now() + make_interval(hours => ${input.ttlHours}))`);
  await addPages(db, input.crawlId, input.pages, Number.MAX_SAFE_INTEGER);
}

export async function getCrawl(db: Runner, crawlId: string, accountId?: string): Promise<CrawlRow | null> {
  return db.maybeOne(sql.type(CrawlRow)`
    SELECT ${CRAWL_COLUMNS} FROM crawls WHERE crawl_id = ${crawlId} ${accountId ? sql.fragment`AND account_id = ${accountId}` : sql.fragment``}`);
}

/** The account's crawls still running, oldest first. */
export async function activeCrawls(db: Runner, accountId: string, kind: CrawlKind): Promise<CrawlRow[]> {
  return [...(await db.any(sql.type(CrawlRow)`
    SELECT ${CRAWL_COLUMNS} FROM crawls WHERE account_id = ${accountId} AND status = 'scraping' AND kind = ${kind} ORDER BY created_at`))];
}

/**
 * Adds pages not yet in the job, at most up to `limit` pages in all; returns how many were new. The
 * unique (crawl_id, url) makes a URL found twice one page, however often it is offered.
 */
export async function addPages(db: Db, crawlId: string, pages: NewPage[], limit: number): Promise<number> {
  if (pages.length === 0) return 0;
  // The job's row is locked so that pages added at once by concurrent pages of a slice count each other.
  return db.transaction(async (tx) => {
    await tx.query(sql.unsafe`SELECT 1 FROM crawls WHERE crawl_id = ${crawlId} FOR UPDATE`);
    const result = await tx.query(sql.unsafe`
    INSERT INTO crawl_pages (crawl_id, url, depth)
    SELECT ${crawlId}, url, depth
    FROM unnest(${sql.array(pages.map((page) => page.url), 'text')}::text[], ${sql.array(pages.map((page) => page.depth), 'int4')}::int[]) WITH ORDINALITY AS p(url, depth, n)
    WHERE n <= GREATEST(0, ${Math.min(limit, 2_147_483_647)} - (SELECT count(*) FROM crawl_pages WHERE crawl_id = ${crawlId}))
    ORDER BY n
    ON CONFLICT (crawl_id, url) DO NOTHING`);
    return result.rowCount;
  });
}

export async function pageCount(db: Runner, crawlId: string): Promise<number> {
  return db.oneFirst(sql.type(z.object({ n: z.number() }))`SELECT count(*)::int AS n FROM crawl_pages WHERE crawl_id = ${crawlId}`);
}

/** Whether a page with this URL is in the job already (so it need not be judged again). */
export async function knownUrls(db: Runner, crawlId: string, urls: string[]): Promise<Set<string>> {
  if (urls.length === 0) return new Set();
  const rows = await db.anyFirst(sql.type(z.object({ url: z.string() }))`
    SELECT url FROM crawl_pages WHERE crawl_id = ${crawlId} AND url = ANY(${sql.array(urls, 'text')})`);
  return new Set(rows);
}

export const PageRow = z.object({ page_id: z.coerce.number(), url: z.string(), depth: z.number(), task_id: z.string().nullable() });
export type PageRow = z.infer<typeof PageRow>;

/** Pages claimed by an earlier run of the activity that ended before finishing them (a lost worker). */
export async function runningPages(db: Runner, crawlId: string): Promise<PageRow[]> {
  return [...(await db.any(sql.type(PageRow)`
    SELECT page_id, url, depth, task_id FROM crawl_pages WHERE crawl_id = ${crawlId} AND status = 'running' ORDER BY page_id`))];
}

/** Claims up to `n` pending pages in discovery order (only while the job runs). */
export async function claimPages(db: Runner, crawlId: string, n: number): Promise<PageRow[]> {
  if (n <= 0) return [];
  return [...(await db.any(sql.type(PageRow)`
    UPDATE crawl_pages SET status = 'running'
    WHERE page_id IN (
      SELECT page_id FROM crawl_pages
      WHERE crawl_id = ${crawlId} AND status = 'pending' AND EXISTS (SELECT 1 FROM crawls WHERE crawl_id = ${crawlId} AND status = 'scraping')
      ORDER BY page_id LIMIT ${n} FOR UPDATE SKIP LOCKED)
    RETURNING page_id, url, depth, task_id`))].sort((a, b) => a.page_id - b.page_id);
}

export async function recordPageTask(db: Runner, pageId: number, taskId: string): Promise<void> {
  await db.query(sql.unsafe`UPDATE crawl_pages SET task_id = ${taskId} WHERE page_id = ${pageId} AND status = 'running'`);
}

/** Ends a running page; false when it had ended already. */
export async function finishPage(
  db: Runner,
  pageId: number,
  outcome: { status: 'completed'; document: Record<string, unknown> } | { status: 'failed' | 'cancelled'; error: { code: string; message: string } },
): Promise<boolean> {
  const result = await db.query(sql.unsafe`
    UPDATE crawl_pages SET status = ${outcome.status}, finished_at = now(),
      document = ${outcome.status === 'completed' ? sql.jsonb(outcome.document as never) : null},
      error = ${outcome.status === 'completed' ? null : sql.jsonb(outcome.error)}
    WHERE page_id = ${pageId} AND status = 'running'`);
  return result.rowCount === 1;
}

/** Ends a running job; false when it had ended already (a cancel came first). */
export async function finishCrawl(db: Runner, crawlId: string, status: Exclude<CrawlState, 'scraping'>, error?: string): Promise<boolean> {
  const result = await db.query(sql.unsafe`
    UPDATE crawls SET status = ${status}, error = ${error ?? null}, finished_at = now() WHERE crawl_id = ${crawlId} AND status = 'scraping'`);
  if (status !== 'completed') await db.query(sql.unsafe`UPDATE crawl_pages SET status = 'cancelled', finished_at = now() WHERE crawl_id = ${crawlId} AND status = 'pending'`);
  return result.rowCount === 1;
}

export async function recordRobots(db: Runner, crawlId: string, robots: Record<string, unknown>, blocked: string[]): Promise<void> {
  await db.query(sql.unsafe`
    UPDATE crawls SET options = options || jsonb_build_object('_robots', ${sql.jsonb(robots as never)}),
      robots_blocked = (SELECT COALESCE(array_agg(DISTINCT u), '{}') FROM unnest(robots_blocked || ${sql.array(blocked, 'text')}) u)
    WHERE crawl_id = ${crawlId}`);
}

export async function addRobotsBlocked(db: Runner, crawlId: string, blocked: string[]): Promise<void> {
  if (blocked.length === 0) return;
  await db.query(sql.unsafe`
    UPDATE crawls SET robots_blocked = (SELECT COALESCE(array_agg(DISTINCT u), '{}') FROM unnest(robots_blocked || ${sql.array(blocked, 'text')}) u) WHERE crawl_id = ${crawlId}`);
}

/** The tasks of the job's pages still running (a cancel stops them). */
export async function runningPageTasks(db: Runner, crawlId: string): Promise<string[]> {
  return [...(await db.anyFirst(sql.type(z.object({ task_id: z.string() }))`
    SELECT task_id FROM crawl_pages WHERE crawl_id = ${crawlId} AND status = 'running' AND task_id IS NOT NULL`))];
}

const Counts = z.object({ total: z.number(), completed: z.number(), failed: z.number(), pending: z.number(), running: z.number(), cancelled: z.number() });
export type CrawlCounts = z.infer<typeof Counts>;

export async function crawlCounts(db: Runner, crawlId: string): Promise<CrawlCounts> {
  return db.one(sql.type(Counts)`
    SELECT count(*)::int AS total,
           (count(*) FILTER (WHERE status = 'completed'))::int AS completed,
           (count(*) FILTER (WHERE status = 'failed'))::int AS failed,
           (count(*) FILTER (WHERE status = 'pending'))::int AS pending,
           (count(*) FILTER (WHERE status = 'running'))::int AS running,
           (count(*) FILTER (WHERE status = 'cancelled'))::int AS cancelled
    FROM crawl_pages WHERE crawl_id = ${crawlId}`);
}

/** What the job's page tasks cost: points charged so far, and points still held by running ones. */
export async function crawlCost(db: Runner, crawlId: string): Promise<{ charged_points: string; held_points: string }> {
  return db.one(sql.type(z.object({ held_points: z.string(), charged_points: z.string() }))`
    WITH t AS (SELECT task_id FROM crawl_pages WHERE crawl_id = ${crawlId} AND task_id IS NOT NULL)
    SELECT trim_scale(COALESCE((SELECT sum(remaining) FROM holds WHERE hold_id IN (SELECT task_id FROM t) AND status = 'open'), 0))::text AS held_points,
           trim_scale(COALESCE((SELECT sum(amount) FROM ledger_entries WHERE idempotency_key IN (SELECT 'capture:' || task_id FROM t)), 0))::text AS charged_points`);
}

/** The documents of completed pages in discovery order, from `skip`, at most `limit`. */
export async function crawlDocuments(db: Runner, crawlId: string, skip: number, limit: number): Promise<Array<Record<string, unknown>>> {
  return [...(await db.anyFirst(sql.type(z.object({ document: z.record(z.any()) }))`
    SELECT document FROM crawl_pages WHERE crawl_id = ${crawlId} AND status = 'completed' ORDER BY page_id OFFSET ${skip} LIMIT ${limit}`))];
}

const ErrorRow = z.object({ page_id: z.coerce.number(), url: z.string(), task_id: z.string().nullable(), error: z.object({ code: z.string(), message: z.string() }), finished_at: z.string() });

export async function crawlErrors(db: Runner, crawlId: string): Promise<Array<z.infer<typeof ErrorRow>>> {
  return [...(await db.any(sql.type(ErrorRow)`
    SELECT page_id, url, task_id, error, ${iso('finished_at')} AS finished_at FROM crawl_pages WHERE crawl_id = ${crawlId} AND status = 'failed' ORDER BY page_id`))];
}
