import crypto from 'node:crypto';
import Firecrawl from '@mendable/firecrawl-js';
import { sql } from 'slonik';
import { z } from 'zod';
import { auditLedger, getBalance } from '../src/db/ledger';
import { refundTask } from '../src/db/verification';
import { startCrawlSite, type CrawlSite } from './support/crawl-site';
import { FakeSolver, SAMPLE_RESULTS, suiteSolvers, type TaskFrame } from './support/fake-solver';
import { runFirecrawlPy } from './support/firecrawl-py';
import { api, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * The page cache (docs/crawl.md, "Page cache"): Firecrawl's maxAge and storeInCache on scrapes, batch
 * scrapes and crawls, what is shared between accounts and what is not, and a refunded page evicted.
 */

const PAGE = `<!doctype html><html lang="en"><head><title>Cached Page</title></head>
<body><main><h1>Cached Heading</h1><p>Text that a cache keeps, with <a href="/next.html">a link</a>.</p></main></body></html>`;

/** Answers fetches with PAGE, or with the page itself when it is the crawl site's (served on 127.0.0.1); other tasks with samples. */
async function pageSolver(frame: TaskFrame, self: FakeSolver) {
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  const url = frame.payload.url as string;
  if (frame.task_type !== 'proxy_fetch') return self.send({ type: 'result', attempt_id: frame.attempt_id, result: SAMPLE_RESULTS[frame.task_type]!(frame.payload) });
  const content = url.startsWith('http://127.0.0.1') ? await (await fetch(url)).text() : PAGE;
  self.send({ type: 'result', attempt_id: frame.attempt_id, result: { url, final_url: url, status_code: 200, content_type: 'html', content, title: null } });
}

const WEEK_MS = 7 * 86400 * 1000;
const clean = { accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 };

let stack: TestStack;
let site: CrawlSite;
const solvers = suiteSolvers(() => stack.url);
/** A URL no other test (nor suite sharing the database) scrapes. */
const freshUrl = () => `https://example.com/cache/${crypto.randomUUID()}`;
const scrape = (auth: Record<string, string>, body: Record<string, unknown>) => api(stack.url, 'POST', '/v2/scrape', { headers: auth, body });

beforeAll(async () => {
  site = await startCrawlSite(6);
  // The service's default maxAge (the suites' stacks turn it off); pay held, so that a refund can move it.
  stack = await startTestStack({ env: { PAGE_CACHE_DEFAULT_MAX_AGE_SECONDS: String(2 * 86400), EARNINGS_VESTING_SECONDS: '3600', ACCEPT_TIMEOUT_MS: '1000', HEARTBEAT_INTERVAL_MS: '1000' } });
}, 120_000);

afterAll(async () => {
  await stack?.close();
  await site?.close();
});

describe('scrape', () => {
  test('a repeat within maxAge returns the same content from the cache: no solver, no charge, cacheState "hit" with cachedAt; maxAge 0 reaches a solver', async () => {
    const worker = await solvers({ behaviour: pageSolver, price: '2' });
    const client = await registerAccount(stack.url, '100');
    const url = freshUrl();
    const first = await scrape(client.auth, { url, formats: ['markdown', 'html', 'links'] });
    expect(first.status).toBe(200);
    expect(first.json.data.metadata).toMatchObject({ cacheState: 'miss', pointsCharged: '2', taskIds: [expect.stringMatching(/^task_/)] });
    expect(worker.received).toHaveLength(1);
    const balance = (await getBalance(stack.db, client.account_id))!.available_points;

    // No maxAge: the default (two days) serves it.
    const again = await scrape(client.auth, { url, formats: ['markdown', 'html', 'links'] });
    expect(again.status).toBe(200);
    const { metadata: hitMeta, ...hitData } = again.json.data;
    const { metadata: firstMeta, ...firstData } = first.json.data;
    expect(hitData).toEqual(firstData);
    expect(hitMeta).toMatchObject({ cacheState: 'hit', cachedAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/), pointsCharged: '0', pointsHeld: '0', taskIds: [], title: firstMeta.title, url: firstMeta.url, statusCode: 200 });
    expect(hitMeta.scrapeId).toBeUndefined();
    expect([again.headers.get('x-points-charged'), again.headers.get('x-points-held')]).toEqual(['0', '0']);
    // Other formats and options of the same page come from the same cached page.
    const v1 = await api(stack.url, 'POST', '/v1/compat/scraper/v1/scrape', { headers: client.auth, body: { url, formats: ['rawHtml'], maxAge: WEEK_MS } });
    expect(v1.json.data).toMatchObject({ rawHtml: PAGE, metadata: { cacheState: 'hit' } });
    expect(worker.received).toHaveLength(1);
    expect((await getBalance(stack.db, client.account_id))!.available_points).toBe(balance);

    // maxAge 0 fetches fresh, and a maxAge shorter than the page's age too.
    const fresh = await scrape(client.auth, { url, maxAge: 0 });
    expect(fresh.json.data.metadata).toMatchObject({ cacheState: 'miss', pointsCharged: '2' });
    expect(worker.received).toHaveLength(2);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const young = await scrape(client.auth, { url, maxAge: 1 });
    expect(young.json.data.metadata.cacheState).toBe('miss');
    expect(worker.received).toHaveLength(3);
    expect(await auditLedger(stack.db)).toEqual(clean);
  });

  test('storeInCache: false keeps the page out of the cache; a screenshot or actions are always fetched fresh', async () => {
    const worker = await solvers({ behaviour: pageSolver });
    const client = await registerAccount(stack.url, '100');
    const url = freshUrl();
    await scrape(client.auth, { url, storeInCache: false });
    expect((await scrape(client.auth, { url, maxAge: WEEK_MS })).json.data.metadata.cacheState).toBe('miss');
    expect(worker.received).toHaveLength(2);
    // The second one was stored: a screenshot still runs its tasks.
    const shot = await scrape(client.auth, { url, formats: ['markdown', 'screenshot'], maxAge: WEEK_MS });
    expect(shot.json.data.metadata.cacheState).toBe('miss');
    expect(worker.received.slice(2).map((frame) => frame.task_type).sort()).toEqual(['proxy_fetch', 'screenshot']);
    const refused = await scrape(client.auth, { url, maxAge: -1 });
    expect([refused.status, refused.json.detail[0].loc]).toEqual([422, ['body', 'maxAge']]);
  });

  test('a request with an Idempotency-Key is answered by its own tasks, not from the cache', async () => {
    const worker = await solvers({ behaviour: pageSolver });
    const client = await registerAccount(stack.url, '100');
    const url = freshUrl();
    await scrape(client.auth, { url });
    const keyed = await api(stack.url, 'POST', '/v2/scrape', { headers: { ...client.auth, 'Idempotency-Key': crypto.randomUUID() }, body: { url } });
    expect(keyed.json.data.metadata.cacheState).toBe('miss');
    expect(worker.received).toHaveLength(2);
  });
});

describe('privacy', () => {
  test('a page fetched with something of the client\'s (credentials in its URL, a location) is served to that account only', async () => {
    const worker = await solvers({
      behaviour: pageSolver,
      capabilities: ['proxy_fetch', 'page_snapshot'].map((taskType) => ({
        task_type: taskType, tier: 'standard', billing_type: 'per_request', fulfillment_path: 'http', provider_name: 'fake', model_name: 'fake', marginal_cost: 0, min_price_points: '1', max_concurrent: 8, country: 'DE',
      })),
    });
    const owner = await registerAccount(stack.url, '100');
    const other = await registerAccount(stack.url, '100');
    const path = crypto.randomUUID();
    const withCredentials = `https://user:secret-token@example.com/private/${path}`;
    const located = { url: `https://example.com/located/${path}`, location: { country: 'DE' } };

    for (const body of [{ url: withCredentials }, located]) {
      const before = worker.received.length;
      expect((await scrape(owner.auth, { ...body, maxAge: WEEK_MS })).json.data.metadata.cacheState).toBe('miss');
      // Its own account is served from the cache.
      expect((await scrape(owner.auth, { ...body, maxAge: WEEK_MS })).json.data.metadata.cacheState).toBe('hit');
      // Another account with the very same request reaches a solver.
      const theirs = await scrape(other.auth, { ...body, maxAge: WEEK_MS });
      expect(theirs.json.data.metadata).toMatchObject({ cacheState: 'miss', pointsCharged: '1' });
      expect(worker.received.length - before).toBe(2);
    }
    // The same page without them is another entry, shared: fetched once more, then served to both.
    const plain = `https://example.com/private/${path}`;
    expect((await scrape(owner.auth, { url: plain })).json.data.metadata.cacheState).toBe('miss');
    expect((await scrape(other.auth, { url: plain })).json.data.metadata.cacheState).toBe('hit');
    // Client headers (cookies among them) are never sent: refused, so nothing of them is ever cached.
    const headers = await scrape(owner.auth, { url: plain, headers: { Cookie: 'session=1' } });
    expect([headers.status, headers.json.code, headers.json.option]).toEqual([400, 'unsupported_option', 'headers']);
  });
});

describe('verification', () => {
  test('a refunded page is evicted: the next scrape reaches a solver, and the ledger stays exact', async () => {
    const worker = await solvers({ behaviour: pageSolver, price: '3' });
    const client = await registerAccount(stack.url, '100');
    const url = freshUrl();
    const first = await scrape(client.auth, { url });
    const taskId = first.json.data.metadata.taskIds[0] as string;
    const entries = () => stack.db.oneFirst(sql.type(z.object({ n: z.number() }))`SELECT count(*)::int AS n FROM page_cache WHERE task_id = ${taskId}`);
    expect(await entries()).toBe(1);
    // The verdict against the result (as a redundant run's or a quarantine's refund makes it).
    const { movement } = await stack.db.transaction((tx) => refundTask(tx, taskId));
    expect(movement.applied).toBe(true);
    const after = await scrape(client.auth, { url });
    expect(after.json.data.metadata).toMatchObject({ cacheState: 'miss', pointsCharged: '3' });
    expect(worker.received).toHaveLength(2);
    expect(await entries()).toBe(0);
    expect(await auditLedger(stack.db)).toEqual(clean);
  });
});

describe('crawl and batch scrape', () => {
  test('a crawl repeated within maxAge reaches no solver for the pages cached; its pages say cacheState "hit" and cost nothing', async () => {
    const worker = await solvers({ behaviour: pageSolver, taskTypes: ['proxy_fetch'] });
    const client = await registerAccount(stack.url, '1000');
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: `${stack.url}/v1/compat/scraper` });
    const options = { limit: 50, sitemap: 'skip' as const, scrapeOptions: { formats: ['markdown' as const], maxAge: WEEK_MS, storeInCache: true }, pollInterval: 1, timeout: 120 };
    const first = await firecrawl.crawl(`${site.baseUrl}/docs/page-0.html`, options);
    expect(first.status).toBe('completed');
    const pages = first.data.length;
    expect(pages).toBeGreaterThan(3);
    expect(worker.received).toHaveLength(pages);
    expect(first.data.every((doc) => doc.metadata!.cacheState === 'miss')).toBe(true);
    const balance = (await getBalance(stack.db, client.account_id))!.available_points;

    const again = await firecrawl.crawl(`${site.baseUrl}/docs/page-0.html`, options);
    expect(again.status).toBe('completed');
    expect(again.data).toHaveLength(pages);
    expect(worker.received).toHaveLength(pages);
    expect(again.data.every((doc) => doc.metadata!.cacheState === 'hit' && doc.metadata!.pointsCharged === '0' && typeof doc.metadata!.cachedAt === 'string')).toBe(true);
    const markdown = (docs: typeof first.data) => Object.fromEntries(docs.map((doc) => [doc.metadata!.sourceURL, doc.markdown]));
    expect(markdown(again.data)).toEqual(markdown(first.data));
    expect((await getBalance(stack.db, client.account_id))!.available_points).toBe(balance);

    // A batch scrape of cached pages and one not cached: only the new one reaches a solver; maxAge 0 all.
    const urls = [`${site.baseUrl}/docs/page-1.html`, `${site.baseUrl}/orphan.html`];
    const batch = await firecrawl.batchScrape(urls, { options: { formats: ['markdown'], maxAge: WEEK_MS }, pollInterval: 1, timeout: 120 });
    expect(Object.fromEntries(batch.data.map((doc) => [doc.metadata!.sourceURL, doc.metadata!.cacheState]))).toEqual({ [urls[0]!]: 'hit', [urls[1]!]: 'miss' });
    expect(worker.received).toHaveLength(pages + 1);
    const fresh = await firecrawl.batchScrape(urls, { options: { formats: ['markdown'], maxAge: 0 }, pollInterval: 1, timeout: 120 });
    expect(fresh.data.map((doc) => doc.metadata!.cacheState)).toEqual(['miss', 'miss']);
    expect(worker.received).toHaveLength(pages + 3);
    expect(await auditLedger(stack.db)).toEqual(clean);
  }, 180_000);
});

describe('Firecrawl SDKs', () => {
  test('JavaScript 4.x: maxAge and storeInCache are accepted and a hit comes back with cacheState "hit"', async () => {
    const worker = await solvers({ behaviour: pageSolver });
    const client = await registerAccount(stack.url, '100');
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: `${stack.url}/v1/compat/scraper` });
    const url = freshUrl();
    const unstored = await firecrawl.scrape(url, { formats: ['markdown'], storeInCache: false });
    const first = await firecrawl.scrape(url, { formats: ['markdown'], maxAge: 600_000 });
    const hit = await firecrawl.scrape(url, { formats: ['markdown'], maxAge: 600_000 });
    expect([unstored.metadata!.cacheState, first.metadata!.cacheState, hit.metadata!.cacheState]).toEqual(['miss', 'miss', 'hit']);
    expect(hit.markdown).toBe(first.markdown);
    expect(hit.metadata!.cachedAt).toEqual(expect.any(String));
    expect(worker.received).toHaveLength(2);
  });

  test('Python 4.x (v2): max_age and store_in_cache are accepted and a hit comes back with cache_state "hit"', async () => {
    const worker = await solvers({ behaviour: pageSolver });
    const client = await registerAccount(stack.url, '100');
    const url = freshUrl();
    const call = (options: Record<string, unknown>) => runFirecrawlPy(4, { api_url: `${stack.url}/v1/compat/scraper`, api_key: client.api_key, call: 'scrape', url, options });
    const unstored = await call({ formats: ['markdown'], store_in_cache: false });
    expect(unstored.raised).toBeUndefined();
    const first = await call({ formats: ['markdown'], max_age: 600_000 });
    const hit = await call({ formats: ['markdown'], max_age: 600_000 });
    expect([unstored.result.metadata.cache_state, first.result.metadata.cache_state, hit.result.metadata.cache_state]).toEqual(['miss', 'miss', 'hit']);
    expect(hit.result.markdown).toBe(first.result.markdown);
    expect(hit.result.metadata.cached_at).toEqual(expect.any(String));
    expect(worker.received).toHaveLength(2);
  }, 60_000);
});
