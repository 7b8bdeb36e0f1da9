import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Firecrawl from '@mendable/firecrawl-js';
import FirecrawlAppV1 from 'firecrawl-js-v1';
import { getBalance } from '../src/db/ledger';
import { createLogger } from '../src/logger';
import { startLocalSolver, type LocalSolver } from '../src/runtime/local-solver';
import { pngSize } from '../src/solver/png';
import { startFixtureServer, type FixtureServer } from './solver/helpers/fixture-server';
import { FIRECRAWL_PY_MAJORS, runFirecrawlPy } from './support/firecrawl-py';
import { api, registerAccount, startTestStack, testConfig, type TestStack } from './support/stack';

/**
 * Today's Firecrawl SDKs, both majors of each (JavaScript 4.x and 1.x, Python 4.x and 1.x), unchanged
 * but for their base URL, against the service with the bundled solver doing the real work on pages
 * served on 127.0.0.1.
 */

const logger = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

let stack: TestStack;
let site: FixtureServer;
let solver: LocalSolver;
let client: Awaited<ReturnType<typeof registerAccount>>;
let dataDir: string;
let indexDir: string;
const base = () => `${stack.url}/v1/compat/scraper`;
/** The size of the PNG a scrape's screenshot URL serves to the client's key. */
const pngOf = async (url: string) => pngSize(Buffer.from(await (await fetch(url, { headers: client.auth })).arrayBuffer()));

beforeAll(async () => {
  site = await startFixtureServer();
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'firecrawl-sdks-data-'));
  indexDir = fs.mkdtempSync(path.join(os.tmpdir(), 'firecrawl-sdks-index-'));
  fs.writeFileSync(
    path.join(indexDir, 'lighthouse.html'),
    '<html><head><title>Lighthouse keeping</title><link rel="canonical" href="https://example.org/lighthouse"></head><body><p>The lighthouse keeper trims the lamp wick every evening.</p></body></html>',
  );
  fs.writeFileSync(path.join(indexDir, 'harbour.md'), '# Harbour notes\n\nThe harbour master logs every ship that enters, and the lighthouse guides them.\n');
  stack = await startTestStack();
  solver = await startLocalSolver({ config: testConfig({ DATA_DIR: dataDir, SEARCH_INDEX_DIR: indexDir }), apiUrl: stack.url, logger });
  client = await registerAccount(stack.url, '1000');
});

afterAll(async () => {
  await solver?.stop();
  await stack?.close();
  await site?.close();
  for (const dir of [dataDir, indexDir]) if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

describe('JavaScript SDK 4.x (Firecrawl, v2 API)', () => {
  test('scrape: markdown, main-content html, links and a screenshot object with its viewport, in v2 shape', async () => {
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const url = `${site.baseUrl}/article.html`;
    const doc = await firecrawl.scrape(url, {
      formats: ['markdown', 'html', 'links', { type: 'screenshot', fullPage: false, viewport: { width: 640, height: 480 } }],
      onlyMainContent: true,
      timeout: 30_000,
    });
    expect(doc.markdown).toContain('# The Fixture Heading');
    expect(doc.html).toContain('<h1>The Fixture Heading</h1>');
    for (const gone of ['<nav', 'Footer text', '<script']) expect(doc.html).not.toContain(gone);
    expect(doc.links).toEqual(expect.arrayContaining([`${site.baseUrl}/docs/guide.html`, 'https://example.org/elsewhere']));
    expect(await pngOf(doc.screenshot!)).toEqual({ width: 640, height: 480 });
    expect(doc.metadata).toMatchObject({ title: 'Fixture Article', language: 'en', sourceURL: url, url, statusCode: 200, scrapeId: expect.stringMatching(/^task_/) });
  });

  test('scrape: includeTags / excludeTags filter html and markdown; onlyMainContent false keeps the page chrome', async () => {
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const url = `${site.baseUrl}/article.html`;
    const filtered = await firecrawl.scrape(url, { formats: ['markdown', 'html'], includeTags: ['article'], excludeTags: ['table', 'h2'] });
    expect(filtered.html).toContain('The Fixture Heading');
    for (const gone of ['<table', 'A Table', 'Home']) expect(filtered.html).not.toContain(gone);
    expect(filtered.markdown).toContain('# The Fixture Heading');
    expect(filtered.markdown).not.toContain('| Task');
    // Derived from one raw-HTML fetch: a single task.
    expect((filtered.metadata as { taskIds: string[] }).taskIds).toHaveLength(1);

    const whole = await firecrawl.scrape(url, { formats: ['markdown', 'html'], onlyMainContent: false });
    expect(whole.html).toContain('Footer text');
    expect(whole.markdown).toContain('Footer text');
  });

  test('scrape: mobile takes the screenshot at a phone viewport, waitFor after the page has loaded', async () => {
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const started = Date.now();
    const doc = await firecrawl.scrape(`${site.baseUrl}/article.html`, { formats: ['screenshot'], mobile: true, waitFor: 400 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(400);
    expect(await pngOf(doc.screenshot!)).toEqual({ width: 390, height: 844 });
    expect(doc.markdown).toBeUndefined();
    const task = await api(stack.url, 'GET', `/v1/tasks/${doc.metadata!.scrapeId}`, { headers: client.auth });
    expect(task.json.payload).toEqual({ url: `${site.baseUrl}/article.html`, full_page: false, viewport: { width: 390, height: 844 }, wait_ms: 400 });
  });

  test('search: results in data.web with url, title, description and position', async () => {
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const found = await firecrawl.search('lighthouse keeper', { limit: 2 });
    expect(found.web!.length).toBeGreaterThan(0);
    expect(found.web!.length).toBeLessThanOrEqual(2);
    expect(found.web![0]).toMatchObject({ url: 'https://example.org/lighthouse', title: 'Lighthouse keeping', description: expect.stringContaining('lighthouse keeper'), position: 1 });
  });

  test('an unsupported format is refused in Firecrawl\'s error shape, naming it, and nothing is charged', async () => {
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const before = await getBalance(stack.db, client.account_id);
    await expect(firecrawl.scrape(`${site.baseUrl}/article.html`, { formats: ['markdown', 'branding'] })).rejects.toMatchObject({
      status: 400,
      code: 'unsupported_format',
      message: expect.stringContaining('"branding"'),
    });
    const tracking = await api(stack.url, 'POST', '/v1/compat/scraper/v2/scrape', {
      headers: client.auth,
      body: { url: `${site.baseUrl}/article.html`, formats: ['markdown', { type: 'changeTracking', modes: ['git-diff'] }] },
    });
    expect(tracking.status).toBe(400);
    expect(tracking.json).toEqual({ success: false, code: 'unsupported_format', format: 'changeTracking', error: expect.stringContaining('"changeTracking" format is not supported') });
    const news = await api(stack.url, 'POST', '/v1/compat/scraper/v2/search', { headers: client.auth, body: { query: 'lighthouse', sources: ['web', { type: 'news' }] } });
    expect(news.status).toBe(400);
    expect(news.json).toMatchObject({ success: false, code: 'unsupported_format', format: 'news' });
    expect(await getBalance(stack.db, client.account_id)).toEqual(before);
  });

  test('malformed v2 options are 422 with the contract\'s detail list and Firecrawl\'s success/error', async () => {
    const response = await api(stack.url, 'POST', '/v1/compat/scraper/v2/scrape', {
      headers: client.auth,
      body: { url: `${site.baseUrl}/article.html`, formats: [{ type: 'screenshot', viewport: { width: 0, height: 10 } }], excludeTags: ['p[['], waitFor: -1 },
    });
    expect(response.status).toBe(422);
    expect(response.json).toMatchObject({ success: false, error: expect.stringContaining('Bad Request') });
    expect(response.json.detail.map((item: { loc: unknown[] }) => item.loc)).toEqual(expect.arrayContaining([['body', 'waitFor']]));
    const second = await api(stack.url, 'POST', '/v1/compat/scraper/v2/scrape', {
      headers: client.auth,
      body: { url: `${site.baseUrl}/article.html`, formats: [{ type: 'screenshot', viewport: { width: 0, height: 10 } }], excludeTags: ['p[['] },
    });
    expect(second.json.detail).toEqual([
      expect.objectContaining({ type: 'greater_than', loc: ['body', 'formats', 0, 'viewport', 'width'] }),
      expect.objectContaining({ type: 'value_error', loc: ['body', 'excludeTags', 0], input: 'p[[' }),
    ]);
  });
});

describe('JavaScript SDK 1.x (FirecrawlApp, v1 API)', () => {
  test('scrapeUrl and search work through the same base URL', async () => {
    const app = new FirecrawlAppV1({ apiKey: client.api_key, apiUrl: base() });
    const url = `${site.baseUrl}/article.html`;
    const doc = await app.scrapeUrl(url, { formats: ['markdown', 'links'] });
    if (!doc.success) throw new Error(`scrape failed: ${JSON.stringify(doc)}`);
    expect(doc.markdown).toContain('# The Fixture Heading');
    expect(doc.links).toContain(`${site.baseUrl}/docs/guide.html`);
    expect(doc.metadata).toMatchObject({ title: 'Fixture Article', statusCode: 200, sourceURL: url });

    const found = await app.search('lighthouse keeper', { limit: 1 });
    expect(found.success).toBe(true);
    expect(found.data).toEqual([{ url: 'https://example.org/lighthouse', title: 'Lighthouse keeping', description: expect.stringContaining('lighthouse keeper') }]);
  });
});

describe.each(FIRECRAWL_PY_MAJORS)('Python SDK firecrawl-py %i.x', (major) => {
  const call = (request: Record<string, unknown>) => runFirecrawlPy(major, { api_url: base(), api_key: client.api_key, ...request });

  test('scrape returns the page in the requested formats', async () => {
    const url = `${site.baseUrl}/article.html`;
    const outcome = await call({ call: 'scrape', url, options: { formats: ['markdown', 'links'] } });
    expect(outcome.version.startsWith(`${major}.`)).toBe(true);
    expect(outcome.raised).toBeUndefined();
    const doc = outcome.result;
    expect(doc.markdown).toContain('# The Fixture Heading');
    expect(doc.links).toContain(`${site.baseUrl}/docs/guide.html`);
    expect(doc.metadata).toMatchObject({ title: 'Fixture Article' });
    expect(doc.metadata.statusCode ?? doc.metadata.status_code).toBe(200);
  });

  test('search returns the index\'s hits', async () => {
    const outcome = await call({ call: 'search', query: 'lighthouse keeper', options: { limit: 2 } });
    expect(outcome.raised).toBeUndefined();
    const hits = major >= 4 ? outcome.result.web : outcome.result.data;
    expect(hits[0]).toMatchObject({ url: 'https://example.org/lighthouse', title: 'Lighthouse keeping' });
  });

  test('an unsupported format is reported by the SDK with its name', async () => {
    const outcome = await call({ call: 'scrape', url: `${site.baseUrl}/article.html`, options: { formats: ['markdown', major >= 4 ? 'branding' : 'changeTracking'] } });
    expect(outcome.raised).toBeDefined();
    expect(outcome.message).toContain(major >= 4 ? 'branding' : 'changeTracking');
  });
});
