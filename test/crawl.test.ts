import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import Firecrawl from '@mendable/firecrawl-js';
import FirecrawlAppV1 from 'firecrawl-js-v1';
import { Webhook } from 'standardwebhooks';
import { sql } from 'slonik';
import { createArtifactStore } from '../src/artifacts/store';
import { auditLedger, getBalance } from '../src/db/ledger';
import { createLogger } from '../src/logger';
import { startLocalSolver, type LocalSolver } from '../src/runtime/local-solver';
import { startCrawlSite, type CrawlSite } from './support/crawl-site';
import { runFirecrawlPy } from './support/firecrawl-py';
import { purgeExpired } from '../src/tasks/retention';
import { crawlWorkflowId } from '../src/contract/workflows';
import { createTemporalClient } from '../src/temporal/connection';
import { ADMIN_KEY, api, registerAccount, startTestStack, testConfig, testEndpoints, type TestStack } from './support/stack';

/**
 * Crawl, batch scrape and map in Firecrawl's shape, driven by today's JavaScript SDK and the legacy
 * one (unchanged but for their base URL), against a generated site crawled by the bundled solver.
 */

const logger = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');
const PAGES = 200;

let stack: TestStack;
let site: CrawlSite;
let solver: LocalSolver;
let dataDir: string;
const base = () => `${stack.url}/v1/compat/scraper`;
const pathOf = (url: string) => url.replace(site.baseUrl, '');

beforeAll(async () => {
  site = await startCrawlSite(PAGES, { slowMs: 1500 });
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'crawl-data-'));
  stack = await startTestStack();
  solver = await startLocalSolver({ config: testConfig({ DATA_DIR: dataDir, SOLVER_MAX_CONCURRENT: '16' }), apiUrl: stack.url, logger });
}, 120_000);

afterAll(async () => {
  await solver?.stop();
  await stack?.close();
  await site?.close();
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
}, 120_000);

/** What the account's points moved by since `before`, against what the job says it charged. */
async function spent(accountId: string, before: string) {
  const after = await getBalance(stack.db, accountId);
  return Number(before) - Number(after!.available_points);
}

describe('crawl with the JavaScript SDK 4.x (v2)', () => {
  test('crawl: every reachable page once, robots.txt obeyed, documents paged by next, each page billed once', async () => {
    const client = await registerAccount(stack.url, '100000');
    const before = (await getBalance(stack.db, client.account_id))!.available_points;
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const job = await firecrawl.crawl(`${site.baseUrl}/`, { limit: 1000, maxConcurrency: 16, scrapeOptions: { formats: ['markdown', 'links'] }, pollInterval: 1, timeout: 300 });
    expect(job.status).toBe('completed');
    const urls = job.data.map((doc) => doc.metadata!.sourceURL as string);
    // More than one status page (100 documents each), all gathered by following `next`.
    expect(urls.length).toBe(site.reachable.length);
    expect(new Set(urls)).toEqual(new Set(site.reachable));
    expect(job.total).toBe(site.reachable.length);
    expect(job.completed).toBe(site.reachable.length);
    expect(job.creditsUsed).toBe(site.reachable.length);
    const page3 = job.data.find((doc) => doc.metadata!.sourceURL === `${site.baseUrl}/docs/page-3.html`)!;
    expect(page3.markdown).toContain('# Page 3');
    expect(page3.links).toEqual(expect.arrayContaining([`${site.baseUrl}/docs/page-4.html`, `${site.baseUrl}/private/p-3.html`]));
    // Fetched once each (the fragment link is the same page), none under /private/, nothing off the site.
    for (const url of site.reachable) expect([pathOf(url), site.hits.get(pathOf(url))]).toEqual([pathOf(url), 1]);
    expect([...site.hits.keys()].filter((key) => key.startsWith('/private/'))).toEqual([]);

    const errors = await firecrawl.getCrawlErrors(job.id!);
    expect(errors.errors).toEqual([]);
    expect(errors.robotsBlocked).toEqual(expect.arrayContaining([`${site.baseUrl}/private/secret.html`, `${site.baseUrl}/private/listed.html`, `${site.baseUrl}/private/p-7.html`]));

    // Each page is an ordinary task of the account, and the job's charge is what the ledger moved.
    const status = await api(stack.url, 'GET', `/v2/crawl/${job.id}?limit=5`, { headers: client.auth });
    expect(status.json).toMatchObject({ success: true, status: 'completed', next: expect.stringContaining(`/v2/crawl/${job.id}?skip=5&limit=5`) });
    expect(status.json.data).toHaveLength(5);
    const task = await api(stack.url, 'GET', `/v1/tasks/${status.json.data[0].metadata.scrapeId}`, { headers: client.auth });
    expect(task.json).toMatchObject({ task_type: 'proxy_fetch', status: 'completed' });
    expect(await spent(client.account_id, before)).toBeCloseTo(Number(status.json.pointsCharged), 6);
    expect(Number(status.json.pointsHeld)).toBe(0);
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  }, 300_000);

  test('options: limit, maxDiscoveryDepth, includePaths / excludePaths and sitemap "skip" bound what is crawled', async () => {
    const client = await registerAccount(stack.url, '10000');
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const limited = await firecrawl.crawl(`${site.baseUrl}/`, { limit: 7, pollInterval: 1, timeout: 120 });
    expect(limited.status).toBe('completed');
    expect(limited.data).toHaveLength(7);

    const shallow = await firecrawl.crawl(`${site.baseUrl}/docs/page-0.html`, { maxDiscoveryDepth: 1, sitemap: 'skip', pollInterval: 1, timeout: 120 });
    // page-0 links to page-1 and page-2 (and home, outside /docs/); depth 1 stops there.
    expect(new Set(shallow.data.map((doc) => pathOf(doc.metadata!.sourceURL as string)))).toEqual(new Set(['/docs/page-0.html', '/docs/page-1.html', '/docs/page-2.html']));

    const filtered = await firecrawl.crawl(`${site.baseUrl}/`, { includePaths: ['^/docs/'], excludePaths: ['page-1\\d\\.html$'], limit: 30, sitemap: 'skip', pollInterval: 1, timeout: 120 });
    const paths = filtered.data.map((doc) => pathOf(doc.metadata!.sourceURL as string));
    expect(paths).toHaveLength(30);
    expect(paths).toContain('/');
    for (const kept of paths.filter((p) => p !== '/')) expect(kept).toMatch(/^\/docs\/page-\d+\.html/);
    expect(paths.filter((p) => /page-1\d\.html$/.test(p))).toEqual([]);
  }, 300_000);

  test('startCrawl + getCrawlStatus + cancelCrawl: pending pages stop at once, only pages done are charged', async () => {
    const client = await registerAccount(stack.url, '10000');
    const before = (await getBalance(stack.db, client.account_id))!.available_points;
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const started = await firecrawl.startCrawl(`${site.baseUrl}/slow/0.html`, { limit: 100, maxConcurrency: 2, sitemap: 'skip' });
    expect(started.url).toBe(`${base()}/v2/crawl/${started.id}`);
    const active = await firecrawl.getActiveCrawls();
    expect(active.crawls.map((crawl) => crawl.id)).toContain(started.id);
    let status = await firecrawl.getCrawlStatus(started.id);
    for (let i = 0; i < 100 && status.completed < 1; i++) {
      await new Promise((resolve) => setTimeout(resolve, 200));
      status = await firecrawl.getCrawlStatus(started.id);
    }
    expect(status.status).toBe('scraping');
    expect(await firecrawl.cancelCrawl(started.id)).toBe(true);
    const slowHits = () => [...site.hits.keys()].filter((key) => key.startsWith('/slow/')).reduce((sum, key) => sum + site.hits.get(key)!, 0);
    await new Promise((resolve) => setTimeout(resolve, 4000));
    const hitsAfterCancel = slowHits();
    await new Promise((resolve) => setTimeout(resolve, 4000));
    expect(slowHits()).toBe(hitsAfterCancel);
    const final = await firecrawl.getCrawlStatus(started.id);
    expect(final.status).toBe('cancelled');
    expect(final.completed).toBeLessThan(8);
    expect(final.data).toHaveLength(final.completed);
    const raw = await api(stack.url, 'GET', `/v2/crawl/${started.id}`, { headers: client.auth });
    expect(Number(raw.json.pointsHeld)).toBe(0);
    expect(await spent(client.account_id, before)).toBeCloseTo(Number(raw.json.pointsCharged), 6);
    expect((await getActiveCrawls(firecrawl)).includes(started.id)).toBe(false);
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
    // Nothing of the job is left pending or running, the pages its slice had claimed and not started included.
    expect(await stack.db.oneFirst(sql.unsafe`SELECT count(*)::int FROM crawl_pages WHERE crawl_id = ${started.id} AND status IN ('pending', 'running')`)).toBe(0);
  }, 120_000);

  test('another account cannot read, cancel or list a crawl (404 in Firecrawl\'s shape); bad options are refused before anything is held', async () => {
    const owner = await registerAccount(stack.url, '1000');
    const other = await registerAccount(stack.url, '1000');
    const started = await api(stack.url, 'POST', '/v2/crawl', { headers: owner.auth, body: { url: `${site.baseUrl}/docs/page-0.html`, limit: 2, sitemap: 'skip' } });
    expect(started.status).toBe(200);
    for (const [method, suffix] of [['GET', ''], ['DELETE', ''], ['GET', '/errors']] as const) {
      const answer = await api(stack.url, method, `/v2/crawl/${started.json.id}${suffix}`, { headers: other.auth });
      expect(answer.status).toBe(404);
      expect(answer.json).toMatchObject({ success: false, code: 'job_not_found' });
    }
    expect((await api(stack.url, 'GET', '/v2/crawl/active', { headers: other.auth })).json).toEqual({ success: true, crawls: [] });

    // The owner's crawl holds points while it runs: the refusals are measured on the other account.
    const before = (await getBalance(stack.db, other.account_id))!.available_points;
    const badRegex = await api(stack.url, 'POST', '/v2/crawl', { headers: other.auth, body: { url: site.baseUrl, includePaths: ['(unclosed'] } });
    expect(badRegex.status).toBe(422);
    expect(badRegex.json).toMatchObject({ success: false, error: expect.stringContaining('includePaths.0') });
    const screenshot = await api(stack.url, 'POST', '/v2/crawl', { headers: other.auth, body: { url: site.baseUrl, scrapeOptions: { formats: ['screenshot'] } } });
    expect(screenshot.status).toBe(400);
    expect(screenshot.json).toMatchObject({ success: false, code: 'unsupported_format' });
    const poor = await registerAccount(stack.url);
    const broke = await api(stack.url, 'POST', '/v2/crawl', { headers: poor.auth, body: { url: site.baseUrl } });
    expect(broke.status).toBe(402);
    expect(broke.json).toMatchObject({ success: false, code: 'insufficient_balance' });
    const tooMany = await api(stack.url, 'POST', '/v2/crawl', { headers: other.auth, body: { url: site.baseUrl, limit: 10_001 } });
    expect(tooMany.status).toBe(422);
    expect((await getBalance(stack.db, other.account_id))!.available_points).toBe(before);
    expect(await api(stack.url, 'GET', '/v2/crawl/active', { headers: other.auth })).toMatchObject({ json: { crawls: [] } });
  }, 60_000);
});

async function getActiveCrawls(firecrawl: Firecrawl): Promise<string[]> {
  return (await firecrawl.getActiveCrawls()).crawls.map((crawl) => crawl.id);
}

describe('map and batch scrape with the JavaScript SDK 4.x (v2)', () => {
  test('map: the sitemap\'s and the start page\'s URLs on the site, search first, limit', async () => {
    const client = await registerAccount(stack.url, '1000');
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const mapped = await firecrawl.map(`${site.baseUrl}/`, { limit: 100 });
    const urls = mapped.links.map((link) => link.url);
    expect(urls).toEqual(expect.arrayContaining([`${site.baseUrl}/`, `${site.baseUrl}/orphan.html`, `${site.baseUrl}/docs/page-0.html`, `${site.baseUrl}/private/secret.html`]));
    expect(urls.some((url) => url.includes('example.org'))).toBe(false);
    expect(new Set(urls).size).toBe(urls.length);
    const searched = await firecrawl.map(`${site.baseUrl}/`, { search: 'orphan', limit: 1 });
    expect(searched.links.map((link) => link.url)).toEqual([`${site.baseUrl}/orphan.html`]);
    const onlySitemap = await firecrawl.map(`${site.baseUrl}/`, { sitemap: 'only' });
    expect(onlySitemap.links.map((link) => link.url)).not.toContain(`${site.baseUrl}/private/secret.html`);
  }, 60_000);

  test('batchScrape: the listed pages as one job, in their shape, errors listed', async () => {
    const client = await registerAccount(stack.url, '1000');
    const before = (await getBalance(stack.db, client.account_id))!.available_points;
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const urls = [`${site.baseUrl}/docs/page-1.html`, `${site.baseUrl}/docs/page-2.html`, `${site.baseUrl}/missing.html`];
    const job = await firecrawl.batchScrape(urls, { options: { formats: ['markdown', 'html'] }, pollInterval: 1, timeout: 120 });
    expect(job.status).toBe('completed');
    expect(job.data).toHaveLength(3);
    const one = job.data.find((doc) => doc.metadata!.sourceURL === urls[0])!;
    expect(one.markdown).toContain('# Page 1');
    expect(one.html).toContain('<h1>Page 1</h1>');
    expect(job.data.find((doc) => doc.metadata!.sourceURL === urls[2])!.metadata!.statusCode).toBe(404);
    const status = await api(stack.url, 'GET', `/v2/batch/scrape/${job.id}`, { headers: client.auth });
    expect(await spent(client.account_id, before)).toBeCloseTo(Number(status.json.pointsCharged), 6);
    expect((await firecrawl.getBatchScrapeErrors(job.id!)).errors).toEqual([]);
  }, 120_000);
});

describe('the legacy JavaScript SDK 1.x (v1 routes)', () => {
  test('crawlUrl, asyncCrawlUrl + checkCrawlStatus + cancelCrawl, mapUrl and batchScrapeUrls', async () => {
    const client = await registerAccount(stack.url, '10000');
    const app = new FirecrawlAppV1({ apiKey: client.api_key, apiUrl: base() });
    const crawled = await app.crawlUrl(`${site.baseUrl}/docs/page-0.html`, { limit: 120, scrapeOptions: { formats: ['markdown'] } }, 1);
    if (!crawled.success) throw new Error(JSON.stringify(crawled));
    expect(crawled.status).toBe('completed');
    // More than one status page, followed by the SDK's own `next` loop.
    expect(crawled.data).toHaveLength(120);
    expect(crawled.data[0]!.markdown).toContain('# Page 0');

    const started = await app.asyncCrawlUrl(`${site.baseUrl}/slow/0.html`, { limit: 50, maxConcurrency: 1, ignoreSitemap: true } as never);
    if (!started.success) throw new Error(JSON.stringify(started));
    const checked = await app.checkCrawlStatus(started.id!);
    expect(checked).toMatchObject({ success: true, status: 'scraping' });
    expect(await app.cancelCrawl(started.id!)).toMatchObject({ status: 'cancelled' });

    const mapped = await app.mapUrl(`${site.baseUrl}/`, { limit: 500 });
    if (!mapped.success) throw new Error(JSON.stringify(mapped));
    expect(mapped.links).toEqual(expect.arrayContaining([`${site.baseUrl}/orphan.html`, `${site.baseUrl}/docs/page-0.html`]));

    const batch = await app.batchScrapeUrls([`${site.baseUrl}/docs/page-5.html`, `${site.baseUrl}/docs/page-6.html`], { formats: ['markdown'] }, 1);
    if (!batch.success) throw new Error(JSON.stringify(batch));
    expect(batch.status).toBe('completed');
    expect(batch.data.map((doc) => doc.markdown)).toEqual(expect.arrayContaining([expect.stringContaining('# Page 5'), expect.stringContaining('# Page 6')]));
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  }, 300_000);
});

describe('the Python SDKs (firecrawl-py 4.x and 1.x)', () => {
  test('4.x: crawl, start_crawl + get_crawl_status + cancel_crawl, map and batch_scrape', async () => {
    const client = await registerAccount(stack.url, '10000');
    const call = (name: string, args: unknown[], kwargs: Record<string, unknown> = {}) => runFirecrawlPy(4, { api_url: base(), api_key: client.api_key, call: name, args, kwargs });
    const crawled = await call('crawl', [`${site.baseUrl}/docs/page-0.html`], { limit: 130, poll_interval: 1, timeout: 200 });
    expect(crawled.raised).toBeUndefined();
    expect(crawled.result).toMatchObject({ status: 'completed', total: 130, completed: 130 });
    // Two status pages, followed by the SDK's pagination.
    expect(crawled.result.data).toHaveLength(130);
    expect(crawled.result.data[0].markdown).toContain('# Page 0');

    const started = await call('start_crawl', [`${site.baseUrl}/slow/0.html`], { limit: 50, max_concurrency: 1, sitemap: 'skip' });
    expect(started.result).toMatchObject({ id: expect.any(String) });
    const status = await call('get_crawl_status', [started.result.id]);
    expect(status.result).toMatchObject({ status: 'scraping' });
    expect((await call('cancel_crawl', [started.result.id])).result).toBe(true);
    expect((await call('get_crawl_status', [started.result.id])).result).toMatchObject({ status: 'cancelled' });

    const mapped = await call('map', [`${site.baseUrl}/`], { limit: 50 });
    expect(mapped.result.links.map((link: { url: string }) => link.url)).toEqual(expect.arrayContaining([`${site.baseUrl}/orphan.html`]));
    const batch = await call('batch_scrape', [[`${site.baseUrl}/docs/page-8.html`, `${site.baseUrl}/docs/page-9.html`]], { formats: ['markdown'], poll_interval: 1, wait_timeout: 120 });
    expect(batch.raised).toBeUndefined();
    expect(batch.result).toMatchObject({ status: 'completed', completed: 2 });
  }, 600_000);

  test('1.x: crawl_url, map_url and batch_scrape_urls', async () => {
    const client = await registerAccount(stack.url, '10000');
    const call = (name: string, args: unknown[], kwargs: Record<string, unknown> = {}) => runFirecrawlPy(1, { api_url: base(), api_key: client.api_key, call: name, args, kwargs });
    const crawled = await call('crawl_url', [`${site.baseUrl}/docs/page-0.html`], { params: { limit: 110 }, poll_interval: 1 });
    expect(crawled.raised).toBeUndefined();
    expect(crawled.result).toMatchObject({ status: 'completed', completed: 110 });
    expect(crawled.result.data).toHaveLength(110);
    const mapped = await call('map_url', [`${site.baseUrl}/`], { params: { limit: 50 } });
    expect(mapped.result.links).toEqual(expect.arrayContaining([`${site.baseUrl}/orphan.html`]));
    const batch = await call('batch_scrape_urls', [[`${site.baseUrl}/docs/page-8.html`]], { params: { formats: ['markdown'] }, poll_interval: 1 });
    expect(batch.result).toMatchObject({ status: 'completed', completed: 1 });
  }, 600_000);
});

interface Delivery {
  headers: http.IncomingHttpHeaders;
  body: string;
  event: { success: boolean; type: string; id: string; data: Array<Record<string, any>>; metadata: Record<string, unknown>; error?: string };
}

/** A v2 batch scrape of these pages of the site, its webhook asking for `page` and `completed`, once its `completed` event is received. */
async function batchScrapeToItsEnd(receiver: Awaited<ReturnType<typeof startReceiver>>, auth: Record<string, string>, pages: number[]) {
  const urls = pages.map((page) => `${site.baseUrl}/docs/page-${page}.html`);
  const batch = await api(stack.url, 'POST', '/v2/batch/scrape', { headers: auth, body: { urls, webhook: { url: receiver.url, events: ['page', 'completed'] } } });
  expect(batch.status).toBe(200);
  await until(() => receiver.of(batch.json.id).some((delivery) => delivery.event.type === 'batch_scrape.completed'));
  return batch;
}

/** A webhook receiver on 127.0.0.1 that accepts every delivery and keeps it. */
async function startReceiver() {
  const received: Delivery[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString();
      received.push({ headers: req.headers, body, event: JSON.parse(body) });
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/firecrawl`,
    received,
    of: (id: string) => received.filter((delivery) => delivery.event.id === id),
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

async function until(check: () => boolean, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** The official Standard Webhooks library's check, as a receiver makes it. */
const verifiedBy = (secret: string, delivery: Delivery) =>
  new Webhook(secret).verify(delivery.body, { 'webhook-id': String(delivery.headers['webhook-id']), 'webhook-timestamp': String(delivery.headers['webhook-timestamp']), 'webhook-signature': String(delivery.headers['webhook-signature']) });

describe('webhook events and Idempotency-Key on job start', () => {
  test('a crawl\'s webhook gets crawl.started, one crawl.page per page with its document, crawl.completed, in Firecrawl\'s shape, signed', async () => {
    const receiver = await startReceiver();
    try {
      const client = await registerAccount(stack.url, '1000');
      const { secret } = (await api(stack.url, 'GET', '/v1/account/webhook-secret', { headers: client.auth })).json;
      const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
      const webhook = { url: receiver.url, headers: { 'x-receiver-token': 'tok-1' }, metadata: { run: 'r1' }, events: ['started', 'page', 'completed', 'failed'] as const };
      const job = await firecrawl.crawl(`${site.baseUrl}/docs/page-0.html`, { limit: 6, sitemap: 'skip', webhook: webhook as never, pollInterval: 1, timeout: 120 });
      expect(job.status).toBe('completed');
      await until(() => receiver.of(job.id!).some((delivery) => delivery.event.type === 'crawl.completed'));
      const deliveries = receiver.of(job.id!);
      for (const delivery of deliveries) {
        expect(verifiedBy(secret, delivery)).toMatchObject({ id: job.id });
        expect(delivery.headers['x-receiver-token']).toBe('tok-1');
      }
      const types = deliveries.map((delivery) => delivery.event.type);
      expect(types.filter((type) => type === 'crawl.started')).toHaveLength(1);
      expect(types.filter((type) => type === 'crawl.completed')).toHaveLength(1);
      expect(types.filter((type) => type === 'crawl.failed')).toHaveLength(0);
      const pages = deliveries.filter((delivery) => delivery.event.type === 'crawl.page');
      expect(pages).toHaveLength(6);
      expect(new Set(pages.map((page) => page.event.data[0]!.metadata.sourceURL))).toEqual(new Set(job.data.map((doc) => doc.metadata!.sourceURL)));
      expect(pages[0]!.event).toEqual({ success: true, type: 'crawl.page', id: job.id, data: [expect.objectContaining({ markdown: expect.stringContaining('# Page'), metadata: expect.objectContaining({ sourceURL: expect.any(String) }) })], metadata: { run: 'r1' } });
      expect(deliveries.find((delivery) => delivery.event.type === 'crawl.completed')!.event).toEqual({ success: true, type: 'crawl.completed', id: job.id, data: [], metadata: { run: 'r1' } });
      expect(new Set(deliveries.map((delivery) => delivery.headers['webhook-id'])).size).toBe(deliveries.length);
    } finally {
      await receiver.close();
    }
  }, 180_000);

  test('a batch scrape\'s webhook honours its events (batch_scrape.*), and a cancelled crawl tells crawl.failed', async () => {
    const receiver = await startReceiver();
    try {
      const client = await registerAccount(stack.url, '1000');
      const batch = await batchScrapeToItsEnd(receiver, client.auth, [1, 2]);
      expect(receiver.of(batch.json.id).map((delivery) => delivery.event.type).sort()).toEqual(['batch_scrape.completed', 'batch_scrape.page', 'batch_scrape.page']);

      // v1, the webhook as a bare URL: every event.
      const crawl = await api(stack.url, 'POST', '/v1/compat/scraper/v1/crawl', { headers: client.auth, body: { url: `${site.baseUrl}/slow/0.html`, limit: 20, maxConcurrency: 1, ignoreSitemap: true, webhook: receiver.url } });
      expect(crawl.status).toBe(200);
      await until(() => receiver.of(crawl.json.id).some((delivery) => delivery.event.type === 'crawl.started'));
      expect((await api(stack.url, 'DELETE', `/v1/compat/scraper/v1/crawl/${crawl.json.id}`, { headers: client.auth })).status).toBe(200);
      await until(() => receiver.of(crawl.json.id).some((delivery) => delivery.event.type === 'crawl.failed'));
      expect(receiver.of(crawl.json.id).find((delivery) => delivery.event.type === 'crawl.failed')!.event).toEqual({ success: false, type: 'crawl.failed', id: crawl.json.id, data: [], metadata: {}, error: expect.stringContaining('cancelled') });
    } finally {
      await receiver.close();
    }
  }, 120_000);

  test('the same Idempotency-Key and body start one job; the key with another body is 422 idempotency_key_reused', async () => {
    const client = await registerAccount(stack.url, '1000');
    const body = { url: `${site.baseUrl}/docs/page-3.html`, limit: 2, sitemap: 'skip' };
    const keyed = (key: string, header = 'Idempotency-Key') => ({ ...client.auth, [header]: key });
    const first = await api(stack.url, 'POST', '/v2/crawl', { headers: keyed('crawl-k1'), body });
    const again = await api(stack.url, 'POST', '/v2/crawl', { headers: keyed('crawl-k1', 'X-Idempotency-Key'), body });
    expect([first.status, again.status]).toEqual([200, 200]);
    expect(again.json.id).toBe(first.json.id);
    const reused = await api(stack.url, 'POST', '/v2/crawl', { headers: keyed('crawl-k1'), body: { ...body, limit: 3 } });
    expect(reused.status).toBe(422);
    expect(reused.json).toMatchObject({ success: false, code: 'idempotency_key_reused' });
    // The same key at another operation (a batch scrape) is another request too.
    expect((await api(stack.url, 'POST', '/v2/batch/scrape', { headers: keyed('crawl-k1'), body: { urls: [body.url] } })).json).toMatchObject({ code: 'idempotency_key_reused' });

    const batchBody = { urls: [`${site.baseUrl}/docs/page-4.html`] };
    const batches = await Promise.all([1, 2, 3].map(() => api(stack.url, 'POST', '/v1/compat/scraper/v1/batch/scrape', { headers: keyed('batch-k1'), body: batchBody })));
    expect(new Set(batches.map((answer) => answer.json.id)).size).toBe(1);
    expect((await api(stack.url, 'POST', '/v1/compat/scraper/v1/batch/scrape', { headers: keyed('batch-k1'), body: { urls: [`${site.baseUrl}/docs/page-5.html`] } })).status).toBe(422);
    const { rows } = await stack.db.query(sql.unsafe`SELECT count(*)::int AS n FROM crawls WHERE account_id = ${client.account_id}`);
    expect(rows[0]!.n).toBe(2);
    for (const path of [`/v2/crawl/${first.json.id}`, `/v2/batch/scrape/${batches[0]!.json.id}`]) {
      let status = '';
      for (let i = 0; i < 300 && status !== 'completed'; i++) {
        status = (await api(stack.url, 'GET', path, { headers: client.auth })).json.status;
        if (status !== 'completed') await new Promise((resolve) => setTimeout(resolve, 200));
      }
      expect(status).toBe('completed');
    }
    // Each job's workflow is listed in the Temporal UI with its kind, account and start page (host and path).
    const temporal = await createTemporalClient(testEndpoints().temporalAddress, 'default');
    try {
      const summaryOf = async (id: string) => (await temporal.workflow.getHandle(crawlWorkflowId(id)).describe()).staticSummary();
      expect(await summaryOf(first.json.id)).toBe(`crawl · ${client.account_id} · \`${new URL(site.baseUrl).host}/docs/page-3.html\``);
      expect(await summaryOf(batches[0]!.json.id)).toBe(`batch_scrape · ${client.account_id}`);
    } finally {
      await temporal.connection.close();
    }
  }, 120_000);
  // Last in the file: its purge of a one-second window takes every result and document the tests left.
  test('past the result retention a job\'s documents and its webhook bodies are emptied with its tasks\' results; the job then answers 404 job_not_found', async () => {
    const receiver = await startReceiver();
    try {
      const client = await registerAccount(stack.url, '1000');
      const batch = await batchScrapeToItsEnd(receiver, client.auth, [6, 7]);
      const status = await api(stack.url, 'GET', `/v2/batch/scrape/${batch.json.id}`, { headers: client.auth });
      expect(status.json).toMatchObject({ status: 'completed', completed: 2 });
      expect(status.json.data).toHaveLength(2);
      // Kept for a day as Firecrawl keeps a job, since the stack's retention (30 days) is longer.
      expect(Date.parse(status.json.expiresAt) - Date.now()).toBeGreaterThan(23 * 3600 * 1000);

      // A retention of one second, run as the worker's sweep runs it.
      await new Promise((resolve) => setTimeout(resolve, 1100));
      const run = await purgeExpired({ db: stack.db, artifacts: createArtifactStore(stack.config) }, 1);
      expect(run.documents).toBeGreaterThanOrEqual(4);
      expect((await purgeExpired({ db: stack.db, artifacts: createArtifactStore(stack.config) }, 1)).documents).toBe(0);

      const pages = await stack.db.any(sql.unsafe`SELECT status, document, task_id FROM crawl_pages WHERE crawl_id = ${batch.json.id}`);
      expect(pages.map((page) => [page.status, page.document])).toEqual([['completed', null], ['completed', null]]);
      const bodies = await stack.db.anyFirst(sql.unsafe`SELECT payload FROM webhook_deliveries WHERE crawl_id = ${batch.json.id} ORDER BY event`);
      const body = (type: string) => ({ success: true, type: `batch_scrape.${type}`, id: batch.json.id, data: [], metadata: {} });
      expect(bodies).toEqual([body('completed'), body('page'), body('page')]);
      expect(await stack.db.oneFirst(sql.unsafe`SELECT documents_expired_at IS NOT NULL FROM crawls WHERE crawl_id = ${batch.json.id}`)).toBe(true);

      for (const path of [`/v2/batch/scrape/${batch.json.id}`, `/v2/batch/scrape/${batch.json.id}/errors`, `/v1/compat/scraper/v1/batch/scrape/${batch.json.id}`, `/v1/compat/scraper/v1/crawl/${batch.json.id}`]) {
        const gone = await api(stack.url, 'GET', path, { headers: client.auth });
        expect([path, gone.status, gone.json.success, gone.json.code]).toEqual([path, 404, false, 'job_not_found']);
      }
      // Each page's task keeps its state and cost, its result gone as any task's.
      const task = await api(stack.url, 'GET', `/v1/tasks/${pages[0]!.task_id}`, { headers: client.auth });
      expect(task.json).toMatchObject({ status: 'completed', result: null, result_expired_at: expect.any(String) });
      expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
      const metrics = await api(stack.url, 'GET', '/metrics', { headers: { 'X-Admin-API-Key': ADMIN_KEY } });
      expect(metrics.text).toMatch(/^marketplace_crawl_documents_purged_total [1-9]/m);
    } finally {
      await receiver.close();
    }
  }, 120_000);
});
