import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import FirecrawlApp from 'firecrawl-js-v1';
import { balanceFromEntries, getBalance } from '../src/db/ledger';
import { FakeSolver, SAMPLE_RESULTS, suiteSolvers, type TaskFrame } from './support/fake-solver';
import { api, registerAccount, startTestStack, type TestStack } from './support/stack';

const FAST = { ACCEPT_TIMEOUT_MS: '1000', ATTEMPT_TIMEOUT_SECONDS: '3', HEARTBEAT_INTERVAL_MS: '1000' };

const PAGE = `<!doctype html><html lang="en"><head><title>Fixture Page</title>
<meta name="description" content="A page for scrape tests"><meta property="og:title" content="OG Fixture">
<script>window.tracking = 1</script><style>p { color: red }</style></head>
<body><nav><a href="/home">Home</a></nav>
<main><h1>Fixture Heading</h1><p>Body text with <a href="/docs/guide.html">a relative guide</a> and
<a href="https://other.example.org/x#frag">an absolute link</a>.</p><a href="/docs/guide.html">again</a>
<a href="javascript:alert(1)">script link</a></main>
<footer>Footer text</footer></body></html>`;

/** A solver that answers like a real one: raw HTML when asked for it, markdown otherwise, a PNG for screenshots. */
function pageSolver(frame: TaskFrame, self: FakeSolver) {
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  const url = frame.payload.url as string;
  const result =
    frame.task_type === 'proxy_fetch'
      ? frame.payload.raw_html
        ? { url, final_url: `${url}?final`, status_code: 200, content_type: 'html', content: PAGE, title: 'Fixture Page' }
        : { url, final_url: `${url}?final`, status_code: 200, content_type: 'markdown', content: '# Fixture Heading\n\nBody text.', title: 'Fixture Page' }
      : SAMPLE_RESULTS[frame.task_type]!(frame.payload);
  self.send({ type: 'result', attempt_id: frame.attempt_id, result });
}

describe('Firecrawl v1 scrape compatibility', () => {
  let stack: TestStack;
  let dir: string;
  const solver = suiteSolvers(() => stack.url);
  const base = () => `${stack.url}/v1/compat/scraper`;

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'scrape-policy-'));
    const policyFile = path.join(dir, 'policy.json');
    fs.writeFileSync(policyFile, JSON.stringify({ deny: ['blocked.example.com'] }));
    stack = await startTestStack({ env: { ...FAST, DOMAIN_POLICY_FILE: policyFile } });
  });
  afterAll(async () => {
    await stack.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('the official Firecrawl SDK scrapes through the service with only its base URL changed', async () => {
    const worker = await solver({ behaviour: pageSolver, price: '2' });
    const client = await registerAccount(stack.url, '100');
    const firecrawl = new FirecrawlApp({ apiKey: client.api_key, apiUrl: base() });
    const doc = await firecrawl.scrapeUrl('https://example.com/page', { formats: ['markdown', 'html', 'rawHtml', 'links'], onlyMainContent: true, timeout: 20_000 });
    if (!doc.success) throw new Error(`scrape failed: ${JSON.stringify(doc)}`);
    // Markdown is the main content, converted on the API node from the same fetch as the other formats.
    expect(doc.markdown).toBe('# Fixture Page\n\n## Fixture Heading\n\nBody text with [a relative guide](https://example.com/docs/guide.html) and [an absolute link](https://other.example.org/x#frag).\n\n[again](https://example.com/docs/guide.html) script link');
    expect(doc.rawHtml).toBe(PAGE);
    expect(doc.html).toContain('<h1>Fixture Heading</h1>');
    expect(doc.html).toContain('href="https://example.com/docs/guide.html"');
    for (const gone of ['<script', '<style', 'Footer text', '<nav', 'javascript:']) expect(doc.html).not.toContain(gone);
    expect(doc.links).toEqual(['https://example.com/home', 'https://example.com/docs/guide.html', 'https://other.example.org/x#frag']);
    expect(doc.metadata).toMatchObject({
      title: 'Fixture Page',
      description: 'A page for scrape tests',
      language: 'en',
      ogTitle: 'OG Fixture',
      sourceURL: 'https://example.com/page',
      url: 'https://example.com/page?final',
      statusCode: 200,
    });
    // Every format comes from one raw-HTML fetch, charged at the solver's price; the page needs no rendering.
    expect(doc.metadata!.taskIds).toHaveLength(1);
    expect(doc.metadata).toMatchObject({ pointsCharged: '2', pointsHeld: '10' });
    expect(worker.received.map((frame) => [frame.task_type, frame.payload.raw_html])).toEqual([['proxy_fetch', true]]);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '98', held_points: '0', lifetime_spent_points: '2' });
  });

  test('defaults to markdown, accepts Firecrawl keys that change nothing such as origin, and serves the documented path too', async () => {
    await solver({ behaviour: pageSolver });
    const client = await registerAccount(stack.url, '100');
    const response = await api(stack.url, 'POST', '/v1/compat/scraper/scrape', {
      headers: client.auth,
      body: { url: 'https://example.com/plain', origin: 'js-sdk', waitFor: 0, headers: {}, maxAge: 0, onlyMainContent: null, timeout: null },
    });
    expect(response.status).toBe(200);
    expect(response.json).toEqual({
      success: true,
      data: {
        markdown: expect.stringContaining('## Fixture Heading'),
        metadata: {
          title: 'Fixture Page',
          description: 'A page for scrape tests',
          language: 'en',
          ogTitle: 'OG Fixture',
          sourceURL: 'https://example.com/plain',
          url: 'https://example.com/plain?final',
          statusCode: 200,
          scrapeId: expect.stringMatching(/^task_/),
          taskIds: [expect.stringMatching(/^task_/)],
          cacheState: 'miss',
          pointsCharged: '1',
          pointsHeld: '10',
        },
      },
    });
    expect(response.headers.get('x-ratelimit-limit')).toBeTruthy();
    expect([response.headers.get('x-points-charged'), response.headers.get('x-points-held')]).toEqual(['1', '10']);
  });

  test('a URL without a scheme is scraped over http, as Firecrawl does', async () => {
    const worker = await solver({ behaviour: pageSolver });
    const client = await registerAccount(stack.url, '100');
    const response = await api(stack.url, 'POST', '/v1/compat/scraper/v1/scrape', { headers: client.auth, body: { url: 'example.com/bare' } });
    expect(response.json.data.metadata.sourceURL).toBe('http://example.com/bare');
    expect(worker.received[0]!.payload.url).toBe('http://example.com/bare');
  });

  test('screenshot formats run a screenshot task and answer with the URL of its PNG; timeout is milliseconds', async () => {
    const worker = await solver({ behaviour: pageSolver });
    const client = await registerAccount(stack.url, '100');
    const firecrawl = new FirecrawlApp({ apiKey: client.api_key, apiUrl: base() });
    const doc = await firecrawl.scrapeUrl('https://example.com/shot', { formats: ['screenshot@fullPage'], timeout: 7_500 });
    if (!doc.success) throw new Error('scrape failed');
    expect(doc.screenshot).toBe(`${stack.url}/v1/tasks/${doc.metadata!.scrapeId}/artifacts/image_base64`);
    const png = await fetch(doc.screenshot!, { headers: client.auth });
    expect(Buffer.from(await png.arrayBuffer()).toString('base64')).toBe(SAMPLE_RESULTS.screenshot!({}).image_base64);
    expect(doc.markdown).toBeUndefined();
    expect(worker.received.map((frame) => [frame.task_type, frame.payload])).toEqual([['screenshot', { url: 'https://example.com/shot', full_page: true }]]);
    const record = await api(stack.url, 'GET', `/v1/tasks/${doc.metadata!.scrapeId}`, { headers: client.auth });
    expect(record.json.timeout_seconds).toBe(8);
  });

  test('failures are {success:false, error} with Firecrawl status codes, which the SDK reports', async () => {
    const client = await registerAccount(stack.url, '100');
    const firecrawl = new FirecrawlApp({ apiKey: client.api_key, apiUrl: base() });
    await expect(firecrawl.scrapeUrl('https://blocked.example.com/x')).rejects.toMatchObject({ statusCode: 403, message: expect.stringContaining('blocked.example.com') });

    const blocked = await api(stack.url, 'POST', '/v1/compat/scraper/scrape', { headers: client.auth, body: { url: 'https://blocked.example.com/x' } });
    expect(blocked.status).toBe(403);
    expect(blocked.json).toEqual({ success: false, error: expect.stringContaining('blocked.example.com'), code: 'domain_blocked', url: 'https://blocked.example.com/x' });

    const anonymous = await api(stack.url, 'POST', '/v1/compat/scraper/v1/scrape', { body: { url: 'https://example.com' } });
    expect(anonymous.status).toBe(401);
    expect(anonymous.json).toEqual({ success: false, error: expect.any(String), code: 'authentication_required' });

    const poor = await registerAccount(stack.url);
    await solver({ behaviour: pageSolver });
    const unpaid = await api(stack.url, 'POST', '/v1/compat/scraper/scrape', { headers: poor.auth, body: { url: 'https://example.com' } });
    expect(unpaid.status).toBe(402);
    expect(unpaid.json).toMatchObject({ success: false, code: 'insufficient_balance' });

    const unknownRoute = await api(stack.url, 'POST', '/v1/compat/scraper/v1/extract', { headers: client.auth, body: { url: 'https://example.com' } });
    expect(unknownRoute.status).toBe(404);
    expect(unknownRoute.json).toMatchObject({ success: false, code: 'not_found' });
  });

  test('a fetched page that its scripts fill is rendered by a page_snapshot solver; with none online it is answered from the fetch, with a warning', async () => {
    const SHELL = '<html><head><title>Shell</title></head><body><div id="app"></div><script src="/bundle.js"></script></body></html>';
    const RENDERED = '<html><head><title>Shell</title></head><body><div id="app"><h1>Rendered app</h1><p>Written by the bundle.</p></div></body></html>';
    const spaSolver = (frame: TaskFrame, self: FakeSolver) => {
      self.send({ type: 'accept', attempt_id: frame.attempt_id });
      const url = frame.payload.url as string;
      const result =
        frame.task_type === 'proxy_fetch'
          ? { url, final_url: url, status_code: 200, content_type: 'html', content: SHELL, title: 'Shell' }
          : { url, snapshot: RENDERED, snapshot_format: 'html', title: 'Shell', status_code: 200 };
      self.send({ type: 'result', attempt_id: frame.attempt_id, result });
    };
    const fetcher = await solver({ behaviour: spaSolver, taskTypes: ['proxy_fetch'] });
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v2/scrape', { headers: client.auth, body: { url: 'https://example.com/spa', formats: ['markdown', 'links'] } });
    expect(fetched.status).toBe(200);
    expect(fetched.json.data.warning).toContain('an empty application root');
    expect(fetched.json.data.metadata.taskIds).toHaveLength(1);
    const browser = await solver({ behaviour: spaSolver, taskTypes: ['page_snapshot'] });
    const rendered = await api(stack.url, 'POST', '/v2/scrape', { headers: client.auth, body: { url: 'https://example.com/spa', formats: ['markdown'], mobile: true } });
    expect(rendered.json.data.markdown).toContain('Rendered app');
    expect(rendered.json.data.warning).toBeUndefined();
    expect(rendered.json.data.metadata.taskIds).toHaveLength(2);
    expect(browser.received.map((frame) => frame.payload)).toEqual([{ url: 'https://example.com/spa', mode: 'html', viewport: { width: 390, height: 844 } }]);
    expect(fetcher.received).toHaveLength(2);
  });

  test('a scrape that needs a solver type nobody offers is 503 with Retry-After, in Firecrawl\'s shape, and creates none of its tasks', async () => {
    const fetcher = await solver({ behaviour: pageSolver, taskTypes: ['proxy_fetch'] });
    const client = await registerAccount(stack.url, '100');
    const response = await api(stack.url, 'POST', '/v1/compat/scraper/scrape', { headers: client.auth, body: { url: 'https://example.com/x', formats: ['markdown', 'screenshot'] } });
    expect(response.status).toBe(503);
    expect(response.headers.get('retry-after')).toBe('10');
    expect(response.json).toEqual({ success: false, code: 'no_solver_available', error: expect.stringContaining('screenshot'), retry_after_seconds: 10 });
    // v2 and search alike; the SDK reports the status.
    const v2 = await api(stack.url, 'POST', '/v2/scrape', { headers: client.auth, body: { url: 'https://example.com/x', formats: ['screenshot'] } });
    const search = await api(stack.url, 'POST', '/v1/compat/scraper/v2/search', { headers: client.auth, body: { query: 'nobody searches' } });
    for (const answer of [v2, search]) {
      expect([answer.status, answer.headers.get('retry-after'), answer.json.success, answer.json.code]).toEqual([503, '10', false, 'no_solver_available']);
    }
    const firecrawl = new FirecrawlApp({ apiKey: client.api_key, apiUrl: base() });
    await expect(firecrawl.scrapeUrl('https://example.com/x', { formats: ['screenshot'] })).rejects.toMatchObject({ statusCode: 503 });
    expect(fetcher.received).toHaveLength(0);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '100', held_points: '0' });
  });

  test('a scrape whose task does not finish in time is 408 Request Timeout', async () => {
    await solver({ behaviour: 'accept_then_silent' });
    const client = await registerAccount(stack.url, '100');
    const response = await api(stack.url, 'POST', '/v1/compat/scraper/scrape', { headers: client.auth, body: { url: 'https://example.com/slow', timeout: 1500 } });
    expect(response.status).toBe(408);
    expect(response.json).toMatchObject({ success: false, code: 'task_timeout', task_id: expect.stringMatching(/^task_/) });
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '100', held_points: '0' });
  });

  test('validation errors keep the contract\'s 422 detail list and add Firecrawl\'s success/error', async () => {
    const client = await registerAccount(stack.url, '100');
    const response = await api(stack.url, 'POST', '/v1/compat/scraper/scrape', { headers: client.auth, body: { formats: ['markdown', 'changeTracking'], timeout: 0 } });
    expect(response.status).toBe(422);
    expect(response.json).toEqual({
      success: false,
      error: expect.stringContaining('Bad Request'),
      detail: [
        expect.objectContaining({ type: 'missing', loc: ['body', 'url'] }),
        expect.objectContaining({ type: 'literal_error', loc: ['body', 'formats', 1], input: 'changeTracking' }),
        expect.objectContaining({ type: 'greater_than', loc: ['body', 'timeout'] }),
      ],
    });
    const both = await api(stack.url, 'POST', '/v1/compat/scraper/scrape', { headers: client.auth, body: { url: 'https://example.com', formats: ['screenshot', 'screenshot@fullPage'] } });
    expect(both.status).toBe(422);
    expect(both.json.detail[0]).toMatchObject({ type: 'value_error', loc: ['body', 'formats'] });
    const malformed = await api(stack.url, 'POST', '/v1/compat/scraper/scrape', { headers: { ...client.auth, 'content-type': 'application/json' }, raw: '{"url": ' });
    expect(malformed.status).toBe(422);
    expect(malformed.json).toMatchObject({ success: false, detail: [expect.objectContaining({ type: 'json_invalid' })] });
  });

  test('a scrape retried with the same Idempotency-Key returns the first scrape and charges once', async () => {
    const worker = await solver({ behaviour: pageSolver, price: '3' });
    const client = await registerAccount(stack.url, '100');
    const request = { headers: { ...client.auth, 'Idempotency-Key': 'scrape-retry-1' }, body: { url: 'https://example.com/once', formats: ['markdown', 'links'] } };
    const first = await api(stack.url, 'POST', '/v1/compat/scraper/scrape', request);
    const second = await api(stack.url, 'POST', '/v1/compat/scraper/scrape', request);
    expect(first.status).toBe(200);
    expect(second.json).toEqual(first.json);
    // markdown and links share one fetch, run once.
    expect(worker.received).toHaveLength(1);
    expect((await getBalance(stack.db, client.account_id))?.lifetime_spent_points).toBe('3');
    // The same key with other formats (a part the first scrape had not) is another request, in Firecrawl's shape.
    for (const [path, other] of [
      ['/v1/compat/scraper/scrape', { ...request.body, formats: ['rawHtml'] }],
      ['/v1/compat/scraper/v2/scrape', request.body],
    ] as const) {
      const refused = await api(stack.url, 'POST', path, { headers: request.headers, body: other });
      expect([refused.status, refused.json]).toEqual([422, { success: false, error: expect.stringContaining('Idempotency-Key'), code: 'idempotency_key_reused' }]);
    }
    // Firecrawl's SDKs send the key as X-Idempotency-Key: the same key.
    const viaSdkHeader = await api(stack.url, 'POST', '/v1/compat/scraper/scrape', { headers: { ...client.auth, 'X-Idempotency-Key': 'scrape-retry-1' }, body: request.body });
    expect(viaSdkHeader.json).toEqual(first.json);
    expect(worker.received).toHaveLength(1);
    expect(await getBalance(stack.db, client.account_id)).toEqual(await balanceFromEntries(stack.db, client.account_id));
  });

  test('a convenience request retried with the same Idempotency-Key returns the first task\'s result without a second charge', async () => {
    const worker = await solver({ behaviour: pageSolver, price: '2' });
    const client = await registerAccount(stack.url, '100');
    const request = { headers: { ...client.auth, 'Idempotency-Key': 'fetch-retry-1' }, body: { url: 'https://example.com/retry' } };
    const first = await api(stack.url, 'POST', '/v1/fetch', request);
    const second = await api(stack.url, 'POST', '/v1/fetch', request);
    expect(first.status).toBe(200);
    expect(second.status).toBe(200);
    expect(second.json).toEqual({ ...first.json, elapsed_ms: expect.any(Number) });
    expect(second.headers.get('x-task-id')).toBe(first.json.task_id);
    for (const answer of [first, second]) expect([answer.headers.get('x-points-charged'), answer.headers.get('x-points-held')]).toEqual(['2', '10']);
    expect(worker.received).toHaveLength(1);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '98', held_points: '0', lifetime_spent_points: '2' });
    // A different key is a new task, charged again.
    const other = await api(stack.url, 'POST', '/v1/fetch', { ...request, headers: { ...client.auth, 'Idempotency-Key': 'fetch-retry-2' } });
    expect(other.json.task_id).not.toBe(first.json.task_id);
    expect((await getBalance(stack.db, client.account_id))?.lifetime_spent_points).toBe('4');
  });
});
