import { sql, type CommonQueryMethods, type DatabaseTransactionConnection } from 'slonik';
import { z } from 'zod';
import { CRAWL_KINDS, type CrawlEvent, type CrawlKind, type CrawlWebhook } from '../contract/crawl-events';
import type { Idempotency } from './tasks/create';
import { chargedPointsColumn } from './ledger';
import type { Db } from './pool';
import { DueRow, type DueDelivery } from './webhooks';

/**
 * Crawls and batch scrapes (docs/crawl.md) in PostgreSQL. A job's pages are rows unique by URL within
 * the job; the crawl activity is the only writer of a page's progress (claim, task, finish), the cancel
 * route the only other writer of a job's state.
 */

export { CRAWL_KINDS, type CrawlKind };
export const CRAWL_STATES = ['scraping', 'completed', 'failed', 'cancelled'] as const;
export type CrawlState = (typeof CRAWL_STATES)[number];
export const PAGE_STATES = ['pending', 'running', 'completed', 'failed', 'cancelled'] as const;
export type PageState = (typeof PAGE_STATES)[number];

type Runner = CommonQueryMethods;

const iso = (column: string) =>
  sql.fragment`to_char(${sql.identifier([column])} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

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
  /** When the retention purge began removing the job's documents (null while they are kept). */
  documents_expired_at: z.string().nullable(),
});
export type CrawlRow = z.infer<typeof CrawlRow>;

const CRAWL_COLUMNS = sql.fragment`crawl_id, account_id, key_id, kind, url, options, status, error, robots_blocked, workflow_id,
  ${iso('created_at')} AS created_at, ${iso('expires_at')} AS expires_at, ${iso('documents_expired_at')} AS documents_expired_at`;

export interface NewPage {
  url: string;
  depth: number;
}

/**
 * Writes the job's event delivery when its webhook asks for the event, in Firecrawl's body (`success`,
 * `type`, `id`, `data`, `metadata`, and `error` for a failure), and returns it for its first attempt after
 * the commit. `subject` names what the event is about (the page's task, or the job), so an event written
 * again (a page finished twice by a retried slice cannot be, but a job's end may be) is one delivery.
 */
async function jobEventIn(
  tx: Runner,
  input: { crawlId: string; subject: string; event: CrawlEvent; data?: Array<Record<string, unknown>>; error?: string },
): Promise<DueDelivery[]> {
  const type = sql.fragment`c.kind || '.' || ${input.event}::text`;
  return [
    ...(await tx.any(sql.type(DueRow)`
    INSERT INTO webhook_deliveries (delivery_id, task_id, event, crawl_id, payload)
    -- The form of deliveryIdOf.
    SELECT 'whd_' || ${input.subject} || '_' || ${type}, ${input.subject}, ${type}, c.crawl_id,
           jsonb_build_object('success', ${input.event !== 'failed'}::boolean, 'type', ${type}, 'id', c.crawl_id,
                              'data', ${sql.jsonb((input.data ?? []) as never)}::jsonb, 'metadata', COALESCE(c.webhook->'metadata', '{}'::jsonb))
             || ${sql.jsonb((input.error ? { error: input.error } : {}) as never)}::jsonb
    FROM crawls c WHERE c.crawl_id = ${input.crawlId} AND c.webhook->'events' ? ${input.event}
    ON CONFLICT (task_id, event) DO NOTHING
    RETURNING task_id, event`)),
  ];
}

export type CreateCrawlOutcome =
  | { kind: 'created'; webhooks: DueDelivery[] }
  | { kind: 'existing'; crawl: CrawlRow }
  | { kind: 'idempotency_key_reused' };

/**
 * The job an Idempotency-Key started, when it is the account's: the answer to the same request, or a refusal for
 * another.
 */
export async function crawlByIdempotencyKey(
  db: Runner,
  accountId: string,
  idempotency: Idempotency,
): Promise<Exclude<CreateCrawlOutcome, { kind: 'created' }> | null> {
  const row = await db.maybeOne(sql.type(CrawlRow.extend({ request_fingerprint: z.string().nullable() }))`
    SELECT ${CRAWL_COLUMNS}, request_fingerprint FROM crawls WHERE account_id = ${accountId} AND idempotency_key = ${idempotency.key}`);
  if (!row) return null;
  const { request_fingerprint: fingerprint, ...crawl } = row;
  return fingerprint === idempotency.fingerprint ? { kind: 'existing', crawl } : { kind: 'idempotency_key_reused' };
}

/**
 * Creates a job with its first pages and its `started` event. With an Idempotency-Key the account used
 * before, creates nothing and names the job that key started (or refuses another request's body).
 */
export async function createCrawl(
  db: Db,
  input: {
    crawlId: string;
    accountId: string;
    keyId?: string;
    kind: CrawlKind;
    url: string | null;
    options: Record<string, unknown>;
    webhook: CrawlWebhook | null;
    idempotency?: Idempotency;
    workflowId: string;
    ttlSeconds: number;
    pages: NewPage[];
  },
): Promise<CreateCrawlOutcome> {
  const created = await db.transaction(async (tx) => {
    const inserted = await tx.query(sql.unsafe`
      INSERT INTO crawls (crawl_id, account_id, key_id, kind, url, options, webhook, idempotency_key, request_fingerprint, workflow_id, expires_at)
      VALUES (${input.crawlId}, ${input.accountId}, ${input.keyId ?? null}, ${input.kind}, ${input.url}, ${sql.jsonb(input.options as never)},
              ${input.webhook ? sql.jsonb(input.webhook as never) : null}, ${input.idempotency?.key ?? null}, ${input.idempotency?.fingerprint ?? null},
              ${input.workflowId}, now() + make_interval(secs => ${input.ttlSeconds}))
      ON CONFLICT (account_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING`);
    if (inserted.rowCount === 0) return null;
    await addPages(tx, input.crawlId, input.pages, Number.MAX_SAFE_INTEGER);
    return jobEventIn(tx, { crawlId: input.crawlId, subject: input.crawlId, event: 'started' });
  });
  if (created) return { kind: 'created', webhooks: created };
  // A concurrent request with the key created its job first.
  return (await crawlByIdempotencyKey(db, input.accountId, input.idempotency!)) ?? { kind: 'idempotency_key_reused' };
}

export async function getCrawl(db: Runner, crawlId: string, accountId?: string): Promise<CrawlRow | null> {
  return db.maybeOne(sql.type(CrawlRow)`
    SELECT ${CRAWL_COLUMNS} FROM crawls WHERE crawl_id = ${crawlId} ${accountId ? sql.fragment`AND account_id = ${accountId}` : sql.fragment``}`);
}

/** The account's crawls still running, oldest first. */
export async function activeCrawls(db: Runner, accountId: string, kind: CrawlKind): Promise<CrawlRow[]> {
  return [
    ...(await db.any(sql.type(CrawlRow)`
    SELECT ${CRAWL_COLUMNS} FROM crawls WHERE account_id = ${accountId} AND status = 'scraping' AND kind = ${kind} ORDER BY created_at`)),
  ];
}

/**
 * Adds pages not yet in the job, at most up to `limit` pages in all; returns the URLs it added, and
 * whether the job has no room left. The unique (crawl_id, url) makes a URL found twice one page, however
 * often it is offered.
 */
export async function addPages(
  db: Db | DatabaseTransactionConnection,
  crawlId: string,
  pages: NewPage[],
  limit: number,
): Promise<{ added: string[]; full: boolean }> {
  if (pages.length === 0) return { added: [], full: false };
  // The job's row is locked so that pages added at once by concurrent pages of a slice count each other.
  return db.transaction(async (tx) => {
    await tx.query(sql.unsafe`SELECT 1 FROM crawls WHERE crawl_id = ${crawlId} FOR UPDATE`);
    const room = await tx.oneFirst(sql.type(z.object({ n: z.number() }))`
      SELECT GREATEST(0, ${Math.min(limit, 2_147_483_647)} - count(*))::int AS n FROM crawl_pages WHERE crawl_id = ${crawlId}`);
    const added = await tx.anyFirst(sql.type(z.object({ url: z.string() }))`
      INSERT INTO crawl_pages (crawl_id, url, depth)
      SELECT ${crawlId}, url, depth
      FROM unnest(${sql.array(
        pages.map((page) => page.url),
        'text',
      )}::text[], ${sql.array(
        pages.map((page) => page.depth),
        'int4',
      )}::int[]) WITH ORDINALITY AS p(url, depth, n)
      WHERE n <= ${room}
      ORDER BY n
      ON CONFLICT (crawl_id, url) DO NOTHING
      RETURNING url`);
    return { added: [...added], full: added.length >= room };
  });
}

export async function pageCount(db: Runner, crawlId: string): Promise<number> {
  return db.oneFirst(
    sql.type(z.object({ n: z.number() }))`SELECT count(*)::int AS n FROM crawl_pages WHERE crawl_id = ${crawlId}`,
  );
}

/** Whether a page with this URL is in the job already (so it need not be judged again). */
export async function knownUrls(db: Runner, crawlId: string, urls: string[]): Promise<Set<string>> {
  if (urls.length === 0) return new Set();
  const rows = await db.anyFirst(sql.type(z.object({ url: z.string() }))`
    SELECT url FROM crawl_pages WHERE crawl_id = ${crawlId} AND url = ANY(${sql.array(urls, 'text')})`);
  return new Set(rows);
}

export const PageRow = z.object({
  page_id: z.coerce.number(),
  url: z.string(),
  depth: z.number(),
  task_id: z.string().nullable(),
  task_attempts: z.number(),
});
export type PageRow = z.infer<typeof PageRow>;

/** Pages claimed by an earlier run of the activity that ended before finishing them (a lost worker). */
export async function runningPages(db: Runner, crawlId: string): Promise<PageRow[]> {
  return [
    ...(await db.any(sql.type(PageRow)`
    SELECT page_id, url, depth, task_id, task_attempts FROM crawl_pages WHERE crawl_id = ${crawlId} AND status = 'running' ORDER BY page_id`)),
  ];
}

/** Claims up to `n` pending pages in discovery order (only while the job runs). */
export async function claimPages(db: Runner, crawlId: string, n: number): Promise<PageRow[]> {
  if (n <= 0) return [];
  return [
    ...(await db.any(sql.type(PageRow)`
    UPDATE crawl_pages SET status = 'running'
    WHERE page_id IN (
      SELECT page_id FROM crawl_pages
      WHERE crawl_id = ${crawlId} AND status = 'pending' AND EXISTS (SELECT 1 FROM crawls WHERE crawl_id = ${crawlId} AND status = 'scraping')
      ORDER BY page_id LIMIT ${n} FOR UPDATE SKIP LOCKED)
    RETURNING page_id, url, depth, task_id, task_attempts`)),
  ].sort((a, b) => a.page_id - b.page_id);
}

/** What a page needs of its ended task: its end, its result or error, and what it was charged. */
export const PageTaskRow = z.object({
  task_id: z.string(),
  status: z.string(),
  result: z.record(z.any()).nullable(),
  error: z.object({ type: z.string().optional(), message: z.string().optional() }).passthrough().nullable(),
  charged_points: z.string(),
});
export type PageTaskRow = z.infer<typeof PageTaskRow>;

/** PageTaskRow of each of the tasks, in one statement (a task that does not exist is left out). */
export async function pageTaskOutcomes(db: Runner, taskIds: readonly string[]): Promise<PageTaskRow[]> {
  if (taskIds.length === 0) return [];
  return [
    ...(await db.any(sql.type(PageTaskRow)`
    SELECT task_id, status, result, error, ${chargedPointsColumn(sql.fragment`tasks.task_id`)}
    FROM tasks WHERE task_id = ANY(${sql.array([...taskIds], 'text')})`)),
  ];
}

/**
 * Gives back pages a slice claimed and did not start: pending again while the job runs, else cancelled
 * as its other pending pages were. A page that has a task stays running, for the next slice to take up.
 * The job's row is locked against a cancel ending it meanwhile, which would miss pages made pending.
 */
export async function releasePages(db: Runner, crawlId: string, pageIds: readonly number[]): Promise<void> {
  if (pageIds.length === 0) return;
  await db.query(sql.unsafe`
    UPDATE crawl_pages p SET status = CASE WHEN c.status = 'scraping' THEN 'pending' ELSE 'cancelled' END,
      finished_at = CASE WHEN c.status = 'scraping' THEN NULL ELSE now() END
    FROM (SELECT status FROM crawls WHERE crawl_id = ${crawlId} FOR SHARE) c
    WHERE p.crawl_id = ${crawlId} AND p.page_id = ANY(${sql.array([...pageIds], 'int8')}) AND p.status = 'running' AND p.task_id IS NULL`);
}

/**
 * Gives a running page its next task: the count goes up from `after` (once, however often a retried
 * slice asks) and the failed task is no longer the page's. Returns the page's count now.
 */
export async function nextPageTask(db: Runner, pageId: number, after: number): Promise<number> {
  await db.query(sql.unsafe`
    UPDATE crawl_pages SET task_attempts = task_attempts + 1, task_id = NULL WHERE page_id = ${pageId} AND status = 'running' AND task_attempts = ${after}`);
  return db.oneFirst(
    sql.type(z.object({ task_attempts: z.number() }))`SELECT task_attempts FROM crawl_pages WHERE page_id = ${pageId}`,
  );
}

/** Names each running page's task, in one statement. */
export async function recordPageTasks(
  db: Runner,
  pages: ReadonlyArray<{ pageId: number; taskId: string }>,
): Promise<void> {
  if (pages.length === 0) return;
  await db.query(sql.unsafe`
    UPDATE crawl_pages p SET task_id = i.task_id
    FROM unnest(${sql.array(
      pages.map((page) => page.pageId),
      'int8',
    )}::int8[], ${sql.array(
      pages.map((page) => page.taskId),
      'text',
    )}::text[]) AS i(page_id, task_id)
    WHERE p.page_id = i.page_id AND p.status = 'running'`);
}

/**
 * What ending a page or a job did: whether it ended it (false: it had ended already), and the webhook deliveries
 * it wrote.
 */
export interface Ended {
  ended: boolean;
  webhooks: DueDelivery[];
}

export type PageOutcome =
  | { status: 'completed'; document: Record<string, unknown> }
  | { status: 'failed' | 'cancelled'; error: { code: string; message: string } };

/**
 * Ends running pages in one statement, with the `page` events of those completed (Firecrawl sends none
 * for a failed page) when the job's webhook asks for them: Firecrawl's body as jobEventIn writes it, the
 * page's task as subject. Returns the pages it ended and the deliveries it wrote, for their first attempt.
 */
export async function finishPages(
  db: Runner,
  pages: ReadonlyArray<{ pageId: number; outcome: PageOutcome }>,
): Promise<{ ended: Set<number>; webhooks: DueDelivery[] }> {
  if (pages.length === 0) return { ended: new Set(), webhooks: [] };
  const column = (of: (outcome: PageOutcome) => unknown) =>
    sql.array(
      pages.map(({ outcome }) => JSON.stringify(of(outcome) ?? null)),
      'text',
    );
  const rows = await db.any(sql.type(
    z.object({ page_id: z.coerce.number().nullable(), task_id: z.string().nullable(), event: z.string().nullable() }),
  )`
    WITH input AS (
      SELECT * FROM unnest(${sql.array(
        pages.map((page) => page.pageId),
        'int8',
      )}::int8[], ${sql.array(
        pages.map((page) => page.outcome.status),
        'text',
      )}::text[],
                           ${column((outcome) => (outcome.status === 'completed' ? outcome.document : null))}::text[],
                           ${column((outcome) => (outcome.status === 'completed' ? null : outcome.error))}::text[]) AS i(page_id, status, document, error)
    ), ended AS (
      UPDATE crawl_pages p SET status = i.status, finished_at = now(), document = nullif(i.document::jsonb, 'null'::jsonb), error =
        nullif(i.error::jsonb, 'null'::jsonb)
      FROM input i WHERE p.page_id = i.page_id AND p.status = 'running'
      RETURNING p.page_id, p.crawl_id, p.task_id, p.status, p.document
    ), events AS (
      INSERT INTO webhook_deliveries (delivery_id, task_id, event, crawl_id, payload)
      -- The form of deliveryIdOf.
      SELECT 'whd_' || s.subject || '_' || c.kind || '.page', s.subject, c.kind || '.page', c.crawl_id,
             jsonb_build_object('success', true, 'type', c.kind || '.page', 'id', c.crawl_id, 'data', jsonb_build_array(e.document),
                                'metadata', COALESCE(c.webhook->'metadata', '{}'::jsonb))
      FROM ended e JOIN crawls c ON c.crawl_id = e.crawl_id
      CROSS JOIN LATERAL (SELECT COALESCE(e.task_id, e.crawl_id || '-' || e.page_id) AS subject) s
      WHERE e.status = 'completed' AND c.webhook->'events' ? 'page'
      ON CONFLICT (task_id, event) DO NOTHING
      RETURNING task_id, event
    )
    SELECT page_id, NULL AS task_id, NULL AS event FROM ended
    UNION ALL SELECT NULL, task_id, event FROM events`);
  const ended = new Set<number>();
  const webhooks: DueDelivery[] = [];
  for (const row of rows) {
    if (row.page_id !== null) ended.add(row.page_id);
    else webhooks.push(DueRow.parse({ task_id: row.task_id, event: row.event }));
  }
  return { ended, webhooks };
}

// What a job's `failed` event says when its client cancelled it (Firecrawl's docs: failed or cancelled).
const CANCELLED_MESSAGE = 'The job was cancelled.';

/** Ends a running job and writes its `completed` or `failed` event (a cancel is a failure to Firecrawl's webhook). */
export async function finishCrawl(
  db: Db,
  crawlId: string,
  status: Exclude<CrawlState, 'scraping'>,
  error?: string,
): Promise<Ended> {
  return db.transaction(async (tx) => {
    const result = await tx.query(sql.unsafe`
      UPDATE crawls SET status = ${status}, error = ${error ?? null}, finished_at = now() WHERE crawl_id = ${crawlId} AND status = 'scraping'`);
    if (status !== 'completed')
      await tx.query(
        sql.unsafe`UPDATE crawl_pages SET status = 'cancelled', finished_at = now() WHERE crawl_id = ${crawlId} AND status = 'pending'`,
      );
    if (result.rowCount === 0) return { ended: false, webhooks: [] };
    const webhooks =
      status === 'completed'
        ? await jobEventIn(tx, { crawlId, subject: crawlId, event: 'completed' })
        : await jobEventIn(tx, { crawlId, subject: crawlId, event: 'failed', error: error ?? CANCELLED_MESSAGE });
    return { ended: true, webhooks };
  });
}

export async function recordRobots(
  db: Runner,
  crawlId: string,
  robots: Record<string, unknown>,
  blocked: string[],
): Promise<void> {
  await db.query(sql.unsafe`
    UPDATE crawls SET options = options || jsonb_build_object('_robots', ${sql.jsonb(robots as never)}),
      robots_blocked = (SELECT COALESCE(array_agg(DISTINCT u), '{}') FROM unnest(robots_blocked || ${sql.array(blocked, 'text')}) u)
    WHERE crawl_id = ${crawlId}`);
}

export async function addRobotsBlocked(db: Runner, crawlId: string, blocked: string[]): Promise<void> {
  if (blocked.length === 0) return;
  await db.query(sql.unsafe`
    UPDATE crawls SET robots_blocked = (SELECT COALESCE(array_agg(DISTINCT u), '{}') FROM unnest(robots_blocked ||
      ${sql.array(blocked, 'text')}) u) WHERE crawl_id = ${crawlId}`);
}

/** The tasks of the job's pages still running (a cancel stops them). */
export async function runningPageTasks(db: Runner, crawlId: string): Promise<string[]> {
  return [
    ...(await db.anyFirst(sql.type(z.object({ task_id: z.string() }))`
    SELECT task_id FROM crawl_pages WHERE crawl_id = ${crawlId} AND status = 'running' AND task_id IS NOT NULL`)),
  ];
}

const Counts = z.object({
  total: z.number(),
  completed: z.number(),
  failed: z.number(),
  pending: z.number(),
  running: z.number(),
  cancelled: z.number(),
});
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
           trim_scale(COALESCE((SELECT sum(amount) FROM ledger_entries WHERE idempotency_key IN (SELECT 'capture:' || task_id FROM t)),
             0))::text AS charged_points`);
}

/** The documents of completed pages in discovery order, from `skip`, at most `limit`. */
export async function crawlDocuments(
  db: Runner,
  crawlId: string,
  skip: number,
  limit: number,
): Promise<Array<Record<string, unknown>>> {
  return [
    ...(await db.anyFirst(sql.type(z.object({ document: z.record(z.any()) }))`
    SELECT document FROM crawl_pages WHERE crawl_id =
      ${crawlId} AND status = 'completed' AND document IS NOT NULL ORDER BY page_id OFFSET ${skip} LIMIT ${limit}`)),
  ];
}

const ErrorRow = z.object({
  page_id: z.coerce.number(),
  url: z.string(),
  task_id: z.string().nullable(),
  error: z.object({ code: z.string(), message: z.string() }),
  finished_at: z.string(),
});

export async function crawlErrors(db: Runner, crawlId: string): Promise<Array<z.infer<typeof ErrorRow>>> {
  return [
    ...(await db.any(sql.type(ErrorRow)`
    SELECT page_id, url, task_id, error,
      ${iso('finished_at')} AS finished_at FROM crawl_pages WHERE crawl_id = ${crawlId} AND status = 'failed' ORDER BY page_id`)),
  ];
}
