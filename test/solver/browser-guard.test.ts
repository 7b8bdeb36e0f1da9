import net from 'node:net';
import { BrowserPool, openPage } from '../../src/solver/browser/browser-pool';
import { createPageSnapshotHandler } from '../../src/solver/handlers/page-snapshot';
import { createScreenshotHandler } from '../../src/solver/handlers/screenshot';
import { SolverError } from '../../src/solver/errors';
import { startFixtureServer, type FixtureServer } from './helpers/fixture-server';

/**
 * page.route does not see redirects, so Chromium's traffic goes through the guard proxy. Here the
 * proxy refuses 127.0.0.2 (standing in for an internal network) while 127.0.0.1 plays the public web.
 */
const policy = { allowPrivateNetworks: true };
const pool = new BrowserPool({
  executablePath: '/usr/bin/chromium',
  pages: 1,
  policy,
  timeoutMs: 15_000,
  proxyResolver: async (host) => {
    if (host === '127.0.0.2') throw new SolverError('target_blocked', 'refused to connect to 127.0.0.2: test internal network');
    if (host.endsWith('.invalid')) throw new SolverError('host_not_found', `the host ${host} does not resolve`);
    return host;
  },
});
let publicSite: FixtureServer;
let internalSite: FixtureServer;

beforeAll(async () => {
  publicSite = await startFixtureServer('127.0.0.1');
  internalSite = await startFixtureServer('127.0.0.2');
  await pool.start();
});
afterAll(async () => {
  await pool.close();
  await publicSite.close();
  await internalSite.close();
});

test('allowed pages load through the guard proxy', async () => {
  const opened = await pool.withPage({ width: 800, height: 600 }, new AbortController().signal, async (page) => {
    const result = await openPage(page, `${publicSite.baseUrl}/article.html`, policy, 15_000);
    return { ...result, title: await page.title() };
  });
  expect(opened).toMatchObject({ finalUrl: `${publicSite.baseUrl}/article.html`, status: 200, title: 'Fixture Article' });
});

test('a redirect to a refused host is blocked before it reaches that host', async () => {
  const target = encodeURIComponent(`${internalSite.baseUrl}/article.html`);
  const navigation = pool.withPage({ width: 800, height: 600 }, new AbortController().signal, (page) =>
    openPage(page, `${publicSite.baseUrl}/redirect-to?target=${target}`, policy, 15_000),
  );
  await expect(navigation).rejects.toMatchObject({ type: 'target_blocked' });
  expect(internalSite.requests).toEqual([]);
});

test('subresources on a refused host are never requested', async () => {
  const title = await pool.withPage({ width: 800, height: 600 }, new AbortController().signal, async (page) => {
    await openPage(page, `${publicSite.baseUrl}/embeds?target=${encodeURIComponent(internalSite.baseUrl)}`, policy, 15_000);
    await page.waitForTimeout(300);
    return page.title();
  });
  expect(title).toBe('Embeds');
  expect(internalSite.requests).toEqual([]);
});

describe('a page the proxy could not load is a failed attempt, never the proxy\'s error page', () => {
  const open = (url: string) => pool.withPage({ width: 800, height: 600 }, new AbortController().signal, (page) => openPage(page, url, policy, 15_000));
  // A port nothing listens on (Chromium refuses well-known ones such as 9 before any connection).
  let closed = '';
  beforeAll(async () => {
    const server = net.createServer();
    await new Promise<void>((ready) => server.listen(0, '127.0.0.1', ready));
    closed = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}/`;
    await new Promise((done) => server.close(done));
  });

  test('a plain-http target whose connection fails', async () => {
    await expect(open(closed)).rejects.toMatchObject({ type: 'navigation_failed', message: `could not load ${closed}: could not connect to ${new URL(closed).host}: ECONNREFUSED` });
  });

  test('a name that does not resolve', async () => {
    await expect(open('http://nowhere.invalid/')).rejects.toMatchObject({ type: 'host_not_found', retryable: false });
  });

  test('a redirect to a host whose connection fails', async () => {
    await expect(open(`${publicSite.baseUrl}/redirect-to?target=${encodeURIComponent(closed)}`)).rejects.toMatchObject({ type: 'navigation_failed' });
  });

  test('the screenshot and snapshot handlers fail the attempt', async () => {
    const screenshot = createScreenshotHandler({ pool, policy, timeoutMs: 15_000 });
    const snapshot = createPageSnapshotHandler({ pool, policy, timeoutMs: 15_000, maxBytes: 100_000 });
    await expect(screenshot({ url: closed }, { signal: new AbortController().signal })).rejects.toMatchObject({ type: 'navigation_failed' });
    await expect(snapshot({ url: 'http://nowhere.invalid/' }, { signal: new AbortController().signal })).rejects.toMatchObject({ type: 'host_not_found' });
  });

  test('a target cannot pass its own page off as the proxy\'s failure', async () => {
    const opened = await open(`${publicSite.baseUrl}/claims-proxy-error`);
    expect(opened).toMatchObject({ status: 200 });
  });
});

test('actions run behind the same guard: a script or a click cannot reach a refused host', async () => {
  const snapshot = createPageSnapshotHandler({ pool, policy, timeoutMs: 15_000, maxBytes: 200 * 1024 });
  const internal = `${internalSite.baseUrl}/article.html`;
  const result = await snapshot(
    {
      url: `${publicSite.baseUrl}/actions.html`,
      mode: 'html',
      actions: [
        { type: 'executeJavascript', script: `return fetch(${JSON.stringify(internal)}).then(() => 'reached', () => 'blocked')` },
        { type: 'executeJavascript', script: `const a = document.createElement('a'); a.id = 'inside'; a.href = ${JSON.stringify(internal)}; a.textContent = 'inside'; document.body.appendChild(a); return 1` },
        { type: 'click', selector: '#inside' },
        { type: 'wait', milliseconds: 300 },
      ],
    },
    { signal: new AbortController().signal },
  );
  expect((result.actions as { javascript_returns: unknown[] }).javascript_returns[0]).toEqual({ type: 'string', value: 'blocked' });
  expect(internalSite.requests).toEqual([]);
});
