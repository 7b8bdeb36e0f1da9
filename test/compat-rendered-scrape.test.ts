import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Firecrawl from '@mendable/firecrawl-js';
import FirecrawlAppV1 from 'firecrawl-js-v1';
import { auditLedger, getBalance } from '../src/db/ledger';
import { createLogger } from '../src/logger';
import { startLocalSolver, type LocalSolver } from '../src/runtime/local-solver';
import { SETTLE_MAX_MS } from '../src/solver/browser/settle';
import { pngSize } from '../src/solver/png';
import { SAMPLE_RESULTS, suiteSolvers, waitFor, type FakeSolver, type TaskFrame } from './support/fake-solver';
import { FIRECRAWL_PY_MAJORS, runFirecrawlPy } from './support/firecrawl-py';
import { api, registerAccount, startTestStack, testConfig, type TestStack } from './support/stack';

/**
 * Firecrawl scrapes of pages that scripts fill, and actions, through the official SDKs against the
 * service with the bundled solver (its Chromium) doing the work on pages served here.
 */

const logger = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

const STATIC_TEXT = 'This page is written by its server, long enough to need no browser. '.repeat(5);
const PAGES: Record<string, string> = {
  // A single-page application: its server sends an empty root that its script fills.
  '/app.html': `<!doctype html><html lang="en"><head><title>App</title></head><body><h1>App</h1><div id="root"></div><p>More</p>
<script>document.getElementById('root').innerHTML = '<h2>Rendered harbour list</h2><p>The application script wrote this paragraph.</p>';</script></body></html>`,
  // Server-written text, and a button whose click inserts more.
  '/click.html': `<!doctype html><html><head><title>Click</title></head><body><main><h1>Click page</h1><p>${STATIC_TEXT}</p>
<input id="query"><button id="more" onclick="var p = document.createElement('p'); p.textContent = 'Inserted after the click for ' + document.getElementById('query').value; document.querySelector('main').appendChild(p)">More</button></main>
<script>window.ready = true;</script></body></html>`,
  // An application whose script fills its root 150 ms after the load (the strings are cut so the source does not hold the text).
  '/fill-after-load.html': `<!doctype html><html lang="en"><head><title>Fill after load</title></head><body><h1>Fill after load</h1><div id="root"></div>
<script>addEventListener('load', () => setTimeout(() => { document.getElementById('root').innerHTML = '<h2>Tide ' + 'tables</h2><p>Written by the ' + 'script after the load event.</p>'; }, 150));</script></body></html>`,
  // An application that never settles: a clock rewrites its root every 100 ms.
  '/ticking.html': `<!doctype html><html lang="en"><head><title>Ticking</title></head><body><h1>Ticking</h1><div id="root"></div>
<script>let ticks = 0; setInterval(() => { document.getElementById('root').textContent = 'Tick ' + (++ticks); }, 100);</script></body></html>`,
  // Text that appears 300 ms after the load.
  '/late.html': `<!doctype html><html><head><title>Late</title></head><body><main><h1>Late page</h1><p>${STATIC_TEXT}</p><div id="late"></div></main>
<script>setTimeout(function () { document.getElementById('late').textContent = 'Late text arrived'; }, 300);</script></body></html>`,
};

let stack: TestStack;
let site: { url: string; close(): Promise<void> };
let solver: LocalSolver;
let client: Awaited<ReturnType<typeof registerAccount>>;
const base = () => `${stack.url}/v1/compat/scraper`;
/** The size of the PNG a scrape's screenshot URL serves to the client's key. */
const pngOf = async (url: string) => pngSize(Buffer.from(await (await fetch(url, { headers: client.auth })).arrayBuffer()));

async function serve(): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    const page = PAGES[new URL(req.url ?? '/', 'http://site').pathname];
    res.writeHead(page ? 200 : 404, { 'content-type': 'text/html; charset=utf-8' }).end(page ?? '<h1>missing</h1>');
  });
  await new Promise<void>((ready) => server.listen(0, '127.0.0.1', ready));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise((done) => server.close(() => done())) };
}

const taskTypesOf = async (taskIds: string[]) =>
  Promise.all(taskIds.map(async (id) => (await api(stack.url, 'GET', `/v1/tasks/${id}`, { headers: client.auth })).json.task_type as string));

beforeAll(async () => {
  site = await serve();
  stack = await startTestStack();
  solver = await startLocalSolver({ config: testConfig(), apiUrl: stack.url, logger });
  client = await registerAccount(stack.url, '1000');
});

afterAll(async () => {
  await solver?.stop();
  await stack?.close();
  await site?.close();
});

describe('rendered pages', () => {
  test('a script-filled page is fetched, seen to need rendering, and its rendered text is in markdown, html and links', async () => {
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const doc = await firecrawl.scrape(`${site.url}/app.html`, { formats: ['markdown', 'html'] });
    expect(doc.markdown).toContain('Rendered harbour list');
    expect(doc.markdown).toContain('The application script wrote this paragraph.');
    expect(doc.html).toContain('<h2>Rendered harbour list</h2>');
    expect(doc.metadata).toMatchObject({ title: 'App', statusCode: 200 });
    expect(await taskTypesOf((doc.metadata as { taskIds: string[] }).taskIds)).toEqual(['proxy_fetch', 'page_snapshot']);
  });

  test('a page a script fills 150 ms after its load is scraped with that text, without waitFor (v2, v1 and /v1/snapshot)', async () => {
    const url = `${site.url}/fill-after-load.html`;
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const doc = await firecrawl.scrape(url, { formats: ['markdown', 'html'] });
    expect(doc.markdown).toContain('Tide tables');
    expect(doc.markdown).toContain('Written by the script after the load event.');
    expect(doc.html).toContain('<h2>Tide tables</h2>');
    expect(await taskTypesOf((doc.metadata as { taskIds: string[] }).taskIds)).toEqual(['proxy_fetch', 'page_snapshot']);
    const v1 = await new FirecrawlAppV1({ apiKey: client.api_key, apiUrl: base() }).scrapeUrl(url, { formats: ['markdown'] });
    expect(v1.success && v1.markdown).toContain('Tide tables');
    const snapshot = await api(stack.url, 'POST', '/v1/snapshot', { headers: client.auth, body: { url } });
    expect(snapshot.status).toBe(200);
    expect(snapshot.json.snapshot).toContain('## Tide tables');
  });

  test('a page that never settles is answered once the settle wait runs out, not at the timeout', async () => {
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const started = Date.now();
    const doc = await firecrawl.scrape(`${site.url}/ticking.html`, { formats: ['markdown'] });
    const elapsed = Date.now() - started;
    expect(doc.markdown).toMatch(/Tick \d+/);
    expect(elapsed).toBeGreaterThanOrEqual(SETTLE_MAX_MS);
    // The fetch, the task's dispatch and the browser's start-up besides the capped wait, on a busy 2-core machine.
    expect(elapsed).toBeLessThan(SETTLE_MAX_MS + 5_000);
  });

  test('a server-written page is not rendered: one fetch', async () => {
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const doc = await firecrawl.scrape(`${site.url}/click.html`, { formats: ['markdown'] });
    expect(doc.markdown).toContain('Click page');
    expect(await taskTypesOf((doc.metadata as { taskIds: string[] }).taskIds)).toEqual(['proxy_fetch']);
  });

  test('waitFor renders the page and waits before its content is taken', async () => {
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const without = await firecrawl.scrape(`${site.url}/late.html`, { formats: ['markdown'] });
    expect(without.markdown).not.toContain('Late text arrived');
    const waited = await firecrawl.scrape(`${site.url}/late.html`, { formats: ['markdown'], waitFor: 800 });
    expect(waited.markdown).toContain('Late text arrived');
    expect(await taskTypesOf((waited.metadata as { taskIds: string[] }).taskIds)).toEqual(['page_snapshot']);
  });
});

describe('actions', () => {
  test('JavaScript SDK 4.x: a click that inserts text shows in markdown; screenshots, scrapes and script values in data.actions', async () => {
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const doc = await firecrawl.scrape(`${site.url}/click.html`, {
      formats: ['markdown', { type: 'screenshot', viewport: { width: 500, height: 400 } }],
      actions: [
        { type: 'click', selector: '#query' },
        { type: 'write', text: 'lighthouses' },
        { type: 'click', selector: '#more' },
        { type: 'wait', selector: 'main p:nth-of-type(2)' },
        { type: 'screenshot' },
        { type: 'scrape' },
        { type: 'executeJavascript', script: 'document.querySelectorAll("p").length' },
        { type: 'executeJavascript', script: 'return { title: document.title, ready: window.ready }' },
        { type: 'scroll', direction: 'down' },
        { type: 'press', key: 'End' },
      ],
    });
    expect(doc.markdown).toContain('Inserted after the click for lighthouses');
    const actions = doc.actions as { screenshots: string[]; scrapes: Array<{ url: string; html: string }>; javascriptReturns: Array<{ type: string; value: unknown }>; pdfs: unknown[] };
    expect(actions.screenshots).toHaveLength(1);
    expect(await pngOf(actions.screenshots[0]!)).toEqual({ width: 1280, height: 800 });
    // The screenshot format is taken after the actions, at its own viewport.
    expect(await pngOf(doc.screenshot!)).toEqual({ width: 500, height: 400 });
    expect(actions.scrapes).toEqual([{ url: `${site.url}/click.html`, html: expect.stringContaining('Inserted after the click') }]);
    expect(actions.javascriptReturns).toEqual([
      { type: 'number', value: 2 },
      { type: 'object', value: { title: 'Click', ready: true } },
    ]);
    expect(actions.pdfs).toEqual([]);
  });

  test('JavaScript SDK 1.x: the v1 scrape runs actions and answers them in its shape', async () => {
    const app = new FirecrawlAppV1({ apiKey: client.api_key, apiUrl: base() });
    const doc = await app.scrapeUrl(`${site.url}/click.html`, {
      formats: ['markdown'],
      actions: [{ type: 'click', selector: '#more' }, { type: 'executeJavascript', script: 'document.title' }],
    });
    if (!doc.success) throw new Error(`scrape failed: ${JSON.stringify(doc)}`);
    expect(doc.markdown).toContain('Inserted after the click');
    expect(doc.actions).toEqual({ screenshots: [], scrapes: [], javascriptReturns: [{ type: 'string', value: 'Click' }] });
  });

  test('a failing action fails the scrape in Firecrawl\'s shape, names the action, and charges nothing', async () => {
    const payer = await registerAccount(stack.url, '100');
    const firecrawl = new Firecrawl({ apiKey: payer.api_key, apiUrl: base() });
    await expect(firecrawl.scrape(`${site.url}/click.html`, { actions: [{ type: 'click', selector: '#more' }, { type: 'click', selector: '#nowhere' }] })).rejects.toMatchObject({
      status: 500,
      message: expect.stringContaining('action 1 (click "#nowhere") failed'),
    });
    const thrown = await api(stack.url, 'POST', '/v2/scrape', { headers: payer.auth, body: { url: `${site.url}/click.html`, actions: [{ type: 'executeJavascript', script: 'throw new Error("boom")' }] } });
    expect(thrown.status).toBe(500);
    expect(thrown.json).toMatchObject({ success: false, code: 'solver_failed', error: expect.stringContaining('boom') });
    expect(await getBalance(stack.db, payer.account_id)).toMatchObject({ available_points: '100', held_points: '0', lifetime_spent_points: '0' });
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  });
});

describe('refusals', () => {
  test('an unknown action type, an action over a limit and every refused option are 400 naming them, before anything is held', async () => {
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const before = (await getBalance(stack.db, client.account_id))!;
    const url = `${site.url}/click.html`;
    await expect(firecrawl.scrape(url, { actions: [{ type: 'click', selector: '#more' }, { type: 'pdf' }] })).rejects.toMatchObject({ status: 400, code: 'invalid_action', message: expect.stringContaining('Action 1 ("pdf")') });
    const unknown = await api(stack.url, 'POST', '/v2/scrape', { headers: client.auth, body: { url, actions: [{ type: 'hover', selector: '#more' }] } });
    expect([unknown.status, unknown.json]).toEqual([400, { success: false, code: 'invalid_action', action: 'hover', index: 0, error: expect.stringContaining('"hover"') }]);
    const long = await api(stack.url, 'POST', '/v2/scrape', { headers: client.auth, body: { url, waitFor: 5_000, actions: [{ type: 'wait', milliseconds: 16_000 }] } });
    expect([long.status, long.json.action, long.json.error]).toEqual([400, 'wait', expect.stringContaining('at most 20000 ms')]);
    const refused: Array<[string, unknown]> = [
      ['location', { country: 'DE', languages: ['de-DE'] }],
      ['proxy', 'stealth'],
      ['headers', { Cookie: 'session=1' }],
      ['minAge', 60_000],
      ['lockdown', true],
      ['redactPII', true],
      ['zeroDataRetention', true],
      ['profile', { name: 'mine' }],
      ['threatProtection', { mode: 'off' }],
      ['useMock', 'recorded'],
      ['domainTools', true],
      ['notAnOption', 1],
    ];
    for (const [option, value] of refused) {
      const answer = await api(stack.url, 'POST', '/v2/scrape', { headers: client.auth, body: { url, [option]: value } });
      expect([option, answer.status, answer.json.code, answer.json.option]).toEqual([option, 400, 'unsupported_option', option]);
      expect(answer.json.error).toContain(`"${option}"`);
    }
    for (const [option, value] of [['changeTrackingOptions', { modes: ['git-diff'] }], ['agent', { model: 'FIRE-1' }], ['location', { languages: ['en-US'] }]] as const) {
      const v1 = await api(stack.url, 'POST', '/v1/compat/scraper/v1/scrape', { headers: client.auth, body: { url, [option]: value } });
      expect([option, v1.status, v1.json.option]).toEqual([option, 400, option]);
    }
    // Options that cannot change the answer pass.
    const accepted = await api(stack.url, 'POST', '/v2/scrape', {
      headers: client.auth,
      body: { url, origin: 'test', maxAge: 3_600_000, storeInCache: false, blockAds: true, proxy: 'basic', parsers: ['pdf'], skipTlsVerification: true, fastMode: true, headers: {} },
    });
    expect(accepted.status).toBe(200);
    const after = (await getBalance(stack.db, client.account_id))!;
    // Only the accepted scrape (one fetch) was charged.
    expect(Number(before.available_points) - Number(after.available_points)).toBe(Number(accepted.json.data.metadata.pointsCharged));
  });
});

describe('location', () => {
  const solvers = suiteSolvers(() => stack.url);
  const GERMAN_PAGE = `<html><head><title>Seite</title></head><body><main><h1>Guten Tag</h1><p>${'Diese Seite kommt aus Deutschland. '.repeat(8)}</p></main></body></html>`;
  const fromGermany: Parameters<typeof solvers>[0] = {
    capabilities: ['proxy_fetch', 'screenshot'].map((taskType) => ({
      task_type: taskType, tier: 'standard', billing_type: 'per_request', fulfillment_path: 'http', provider_name: 'fake', model_name: 'fake',
      marginal_cost: 0, min_price_points: '1', max_concurrent: 4, country: 'DE',
    })),
    behaviour: (frame: TaskFrame, self: FakeSolver) => {
      self.send({ type: 'accept', attempt_id: frame.attempt_id });
      const url = frame.payload.url as string;
      const result = frame.task_type === 'proxy_fetch' ? { url, final_url: url, status_code: 200, content_type: 'html', content: GERMAN_PAGE, title: 'Seite' } : SAMPLE_RESULTS[frame.task_type]!(frame.payload);
      self.send({ type: 'result', attempt_id: frame.attempt_id, result });
    },
  };

  test('with no solver declaring the country online, the scrape is refused naming location, before anything is held', async () => {
    const payer = await registerAccount(stack.url, '100');
    const firecrawl = new Firecrawl({ apiKey: payer.api_key, apiUrl: base() });
    await expect(firecrawl.scrape(`${site.url}/click.html`, { location: { country: 'DE' } })).rejects.toMatchObject({ status: 400, code: 'location_unavailable', message: expect.stringContaining('location.country') });
    const v1 = await api(stack.url, 'POST', '/v1/compat/scraper/v1/scrape', { headers: payer.auth, body: { url: `${site.url}/click.html`, location: { country: 'FR' } } });
    expect([v1.status, v1.json]).toEqual([400, { success: false, code: 'location_unavailable', option: 'location', country: 'FR', error: expect.stringContaining('fetches from FR (location.country)') }]);
    // Firecrawl's default country is the US: location without one asks for it.
    const us = await api(stack.url, 'POST', '/v2/scrape', { headers: payer.auth, body: { url: `${site.url}/click.html`, location: {} } });
    expect([us.status, us.json.country]).toEqual([400, 'US']);
    // An invalid code is a validation error, as Firecrawl's is.
    const invalid = await api(stack.url, 'POST', '/v2/scrape', { headers: payer.auth, body: { url: `${site.url}/click.html`, location: { country: 'Germany' } } });
    expect(invalid.status).toBe(422);
    expect(await getBalance(stack.db, payer.account_id)).toMatchObject({ available_points: '100', held_points: '0' });
  });

  test('location.country routes every task of the scrape to solvers that declare it; others never see it', async () => {
    const german = await solvers(fromGermany);
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: base() });
    const doc = await firecrawl.scrape(`${site.url}/click.html`, { formats: ['markdown', 'screenshot'], location: { country: 'de' } });
    expect(doc.markdown).toContain('Guten Tag');
    expect(german.received.map((frame) => frame.task_type).sort()).toEqual(['proxy_fetch', 'screenshot']);
    // The record lists its country; a country that is not an upper-case ISO 3166-1 alpha-2 code is refused.
    const auth = { Authorization: `Bearer ${german.apiKey}` };
    const registered = (await api(stack.url, 'GET', '/v1/solver/stats', { headers: auth })).json.capabilities as Array<{ country?: string }>;
    expect(registered.map((record) => record.country)).toEqual(['DE', 'DE']);
    const lower = await api(stack.url, 'POST', '/v1/solver/capabilities', { headers: auth, body: [{ ...fromGermany.capabilities![0], country: 'de' }] });
    expect([lower.status, lower.json.detail[0].loc]).toEqual([422, ['body', 0, 'country']]);
    // The bundled solver (no country) would answer with the real page: it never gets a located task.
    for (let i = 0; i < 3; i++) expect((await firecrawl.scrape(`${site.url}/click.html`, { location: { country: 'DE' } })).markdown).toContain('Guten Tag');
    // A browser is needed for actions, and no solver in Germany offers one.
    await expect(firecrawl.scrape(`${site.url}/click.html`, { location: { country: 'DE' }, actions: [{ type: 'scrape' }] })).rejects.toMatchObject({ status: 400, message: expect.stringContaining('page_snapshot') });
  });
});

describe('location in the queue', () => {
  const solvers = suiteSolvers(() => stack.url);

  test('a located task waiting for a slot is not handed to a solver of no (or another) country, nor holds up tasks behind it', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const page = (country: string) => `<html><body><main><p>${`Fetched from ${country}. `.repeat(20)}</p></main></body></html>`;
    const answering = (country: string, hold?: Promise<void>) => async (frame: TaskFrame, self: FakeSolver) => {
      self.send({ type: 'accept', attempt_id: frame.attempt_id });
      if (hold && self.received.length === 1) await hold;
      const url = frame.payload.url as string;
      self.send({ type: 'result', attempt_id: frame.attempt_id, result: { url, final_url: url, status_code: 200, content_type: 'html', content: page(country), title: country } });
    };
    const capability = (country?: string) => ({
      task_type: 'proxy_fetch', tier: 'standard', billing_type: 'per_request', fulfillment_path: 'http', provider_name: 'fake', model_name: 'fake',
      marginal_cost: 0, min_price_points: '1', max_concurrent: 1, ...(country ? { country } : {}),
    });
    const german = await solvers({ capabilities: [capability('DE')], behaviour: answering('DE', held) });
    const body = { url: `${site.url}/click.html`, location: { country: 'DE' } };
    const first = api(stack.url, 'POST', '/v2/scrape', { headers: client.auth, body });
    await waitFor(() => german.received.length === 1);
    // The German slot is taken: this one waits in the queue.
    const second = api(stack.url, 'POST', '/v2/scrape', { headers: client.auth, body });
    await new Promise((resolve) => setTimeout(resolve, 300));
    // New slots elsewhere are handed to waiting tasks they fit: not to these.
    const french = await solvers({ capabilities: [capability('FR')], behaviour: answering('FR') });
    const nowhere = await solvers({ capabilities: [capability()], behaviour: answering('nowhere') });
    await new Promise((resolve) => setTimeout(resolve, 300));
    // A task for any country is not held up behind the located one that no free slot fits.
    const plain = await api(stack.url, 'POST', '/v2/scrape', { headers: client.auth, body: { url: `${site.url}/click.html`, timeout: 10_000 } });
    expect(plain.status).toBe(200);
    expect(plain.json.data.markdown).not.toContain('Fetched from DE');
    release();
    for (const answer of await Promise.all([first, second])) {
      expect(answer.status).toBe(200);
      expect(answer.json.data.markdown).toContain('Fetched from DE');
    }
    // Germany ran both located tasks; the others at most the plain one (the bundled solver may have taken it).
    expect(german.received).toHaveLength(2);
    expect(french.received.length + nowhere.received.length).toBeLessThanOrEqual(1);
  });
});

describe.each(FIRECRAWL_PY_MAJORS)('Python SDK firecrawl-py %i.x', (major) => {
  const call = (request: Record<string, unknown>) => runFirecrawlPy(major, { api_url: base(), api_key: client.api_key, ...request });

  test('a script-filled page is rendered; a click and a script value come back where the SDK reads them', async () => {
    const rendered = await call({ call: 'scrape', url: `${site.url}/app.html`, options: { formats: ['markdown'] } });
    expect(rendered.raised).toBeUndefined();
    expect(rendered.result.markdown).toContain('The application script wrote this paragraph.');

    const clicked = await call({
      call: 'scrape',
      url: `${site.url}/click.html`,
      options: { formats: ['markdown'], actions: [{ type: 'click', selector: '#more' }, { type: 'screenshot' }, { type: 'executeJavascript', script: 'document.title' }] },
    });
    expect(clicked.raised).toBeUndefined();
    const doc = clicked.result;
    expect(doc.markdown).toContain('Inserted after the click');
    expect(doc.actions.screenshots[0]).toMatch(/\/v1\/tasks\/task_[^/]+\/artifacts\/actions\.screenshots\.0$/);
    expect(doc.actions.javascriptReturns ?? doc.actions.javascript_returns).toEqual([{ type: 'string', value: 'Click' }]);
  });

  test('an unknown action type and a refused option are reported by the SDK, named', async () => {
    // maxAge 0: the account's page from Germany, scraped above, would be answered from the page cache
    // (firecrawl-py 4.x sends a maxAge of 4 hours), which needs no solver in Germany.
    const option = await call({ call: 'scrape', url: `${site.url}/click.html`, options: { location: { country: 'DE' }, ...(major >= 4 ? { max_age: 0 } : {}) } });
    expect(option.raised).toBeDefined();
    expect(option.message).toContain('location');
    if (major < 4) {
      // 4.x checks action types itself, before sending; 1.x sends them as they are.
      const action = await call({ call: 'scrape', url: `${site.url}/click.html`, options: { actions: [{ type: 'hover', selector: '#more' }] } });
      expect(action.raised).toBeDefined();
      expect(action.message).toContain('hover');
    }
  });
});
