import { createScreenshotHandler } from '../../src/solver/handlers/screenshot';
import { createPageSnapshotHandler } from '../../src/solver/handlers/page-snapshot';
import { SolverError } from '../../src/solver/errors';
import { ScreenshotResult, SnapshotResult } from '../../src/schemas/frames';
import { pngSize } from '../../src/solver/png';
import { sharedBrowser } from './helpers/browser';

/** One shared browser for the whole file. */
const browser = sharedBrowser();
const { policy, pool, snapshot, screenshot, signal } = browser;

function decodePng(result: Record<string, unknown>) {
  const parsed = ScreenshotResult.parse(result);
  const png = Buffer.from(parsed.image_base64, 'base64');
  return { parsed, size: pngSize(png) };
}

describe('screenshot', () => {
  test('captures the asked viewport as a PNG of that size', async () => {
    const result = await screenshot({ url: `${browser.server.baseUrl}/article.html`, viewport: { width: 800, height: 600 } }, { signal: signal() });
    const { parsed, size } = decodePng(result);
    expect(size).toEqual({ width: 800, height: 600 });
    expect(parsed).toMatchObject({ mime_type: 'image/png', width: 800, height: 600 });
  });

  test('accepts viewport_width and viewport_height', async () => {
    const result = await screenshot({ url: `${browser.server.baseUrl}/article.html`, viewport_width: 640, viewport_height: 480 }, { signal: signal() });
    expect(decodePng(result).size).toEqual({ width: 640, height: 480 });
  });

  test('defaults to a 1280x800 viewport', async () => {
    const result = await screenshot({ url: `${browser.server.baseUrl}/article.html` }, { signal: signal() });
    expect(decodePng(result).size).toEqual({ width: 1280, height: 800 });
  });

  test('a full-page screenshot is taller than the viewport', async () => {
    const result = await screenshot({ url: `${browser.server.baseUrl}/tall.html`, full_page: true, viewport: { width: 800, height: 600 } }, { signal: signal() });
    const { size } = decodePng(result);
    expect(size.width).toBe(800);
    expect(size.height).toBeGreaterThan(600);
    expect(result.height).toBe(size.height);
  });

  test('an unreachable page is a retryable navigation failure', async () => {
    const closedPort = `http://127.0.0.1:9/`;
    await expect(screenshot({ url: closedPort }, { signal: signal() })).rejects.toMatchObject({ type: 'navigation_failed', retryable: true });
  });

  test('an empty error page is reported as an HTTP error, not retried', async () => {
    await expect(screenshot({ url: `${browser.server.baseUrl}/empty-404` }, { signal: signal() })).rejects.toMatchObject({ type: 'http_error', retryable: false });
  });

  test('an aborted attempt stops with the abort reason', async () => {
    const controller = new AbortController();
    const pending = screenshot({ url: `${browser.server.baseUrl}/hang` }, { signal: controller.signal });
    setTimeout(() => controller.abort(new SolverError('cancelled', 'test')), 200);
    await expect(pending).rejects.toMatchObject({ type: 'cancelled' });
  });

  test('private targets are refused when private networks are not allowed', async () => {
    const guarded = createScreenshotHandler({ pool, policy: { allowPrivateNetworks: false }, timeoutMs: 5_000 });
    await expect(guarded({ url: `${browser.server.baseUrl}/article.html` }, { signal: signal() })).rejects.toMatchObject({ type: 'target_blocked', retryable: false });
  });
});

describe('page_snapshot', () => {
  test('aria mode lists the headings and links of the rendered page', async () => {
    const result = await snapshot({ url: `${browser.server.baseUrl}/snapshot.html`, mode: 'aria' }, { signal: signal() });
    expect(SnapshotResult.parse(result)).toMatchObject({ snapshot_format: 'aria', title: 'Snapshot Fixture', url: `${browser.server.baseUrl}/snapshot.html` });
    const yaml = result.snapshot as string;
    expect(yaml).toContain('heading "Snapshot Heading" [level=1]');
    expect(yaml).toContain('heading "Inside Main" [level=2]');
    expect(yaml).toContain('link "First link"');
    expect(yaml).toContain('button "Press me"');
    expect(yaml).toContain('Rendered by script');
    expect(yaml).not.toMatch(/\[ref=/);
  });

  test('ai mode adds element references', async () => {
    const result = await snapshot({ url: `${browser.server.baseUrl}/snapshot.html`, mode: 'ai' }, { signal: signal() });
    expect(result.snapshot_format).toBe('ai');
    expect(result.snapshot).toMatch(/link "Second link" \[ref=e\d+\]/);
  });

  test('a selector narrows the snapshot to that element', async () => {
    const aria = await snapshot({ url: `${browser.server.baseUrl}/snapshot.html`, mode: 'aria', selector: '#side' }, { signal: signal() });
    expect(aria.snapshot).toContain('Side Panel');
    expect(aria.snapshot).not.toContain('Snapshot Heading');
    const ai = await snapshot({ url: `${browser.server.baseUrl}/snapshot.html`, mode: 'ai', selector: 'main' }, { signal: signal() });
    expect(ai.snapshot).toContain('Press me');
    expect(ai.snapshot).toMatch(/\[ref=e\d+\]/);
    expect(ai.snapshot).not.toContain('Side Panel');
    const markdown = await snapshot({ url: `${browser.server.baseUrl}/snapshot.html`, selector: '#side' }, { signal: signal() });
    expect(markdown.snapshot).toContain('## Side Panel');
    expect(markdown.snapshot).toContain(`[Side link](${browser.server.baseUrl}/side)`);
    expect(markdown.snapshot).not.toContain('Inside Main');
  });

  test('without a mode the snapshot is markdown of the rendered DOM', async () => {
    const result = await snapshot({ url: `${browser.server.baseUrl}/snapshot.html` }, { signal: signal() });
    expect(result.snapshot_format).toBe('markdown');
    expect(result.snapshot).toContain('Inside Main');
    expect(result.snapshot).toContain('Rendered by script');
    expect(result.snapshot).toContain(`(${browser.server.baseUrl}/inside)`);
  });

  test('a selector that matches nothing is reported', async () => {
    await expect(snapshot({ url: `${browser.server.baseUrl}/snapshot.html`, selector: '#nope' }, { signal: signal() })).rejects.toMatchObject({
      type: 'selector_not_found',
      retryable: false,
    });
    await expect(snapshot({ url: `${browser.server.baseUrl}/snapshot.html`, selector: '[[[' }, { signal: signal() })).rejects.toMatchObject({
      type: 'invalid_selector',
    });
  });

  test('the final URL after redirects is reported', async () => {
    const result = await snapshot({ url: `${browser.server.baseUrl}/redirect/2`, mode: 'aria' }, { signal: signal() });
    expect(result.url).toBe(`${browser.server.baseUrl}/article.html`);
  });

  test('large snapshots are truncated with a marker', async () => {
    const small = createPageSnapshotHandler({ pool, policy, timeoutMs: 20_000, maxBytes: 100 });
    const result = await small({ url: `${browser.server.baseUrl}/snapshot.html`, mode: 'aria' }, { signal: signal() });
    expect(result.snapshot).toMatch(/\[snapshot truncated: 100 of \d+ bytes shown\]$/);
  });
});

describe('page_snapshot html mode and actions', () => {
  const url = () => `${browser.server.baseUrl}/actions.html`;

  test('without actions it answers the rendered HTML, its status and title', async () => {
    const result = SnapshotResult.parse(await snapshot({ url: url(), mode: 'html' }, { signal: signal() }));
    expect(result).toMatchObject({ snapshot_format: 'html', status_code: 200, title: 'Actions', url: url() });
    expect(result.snapshot).toContain('<h1>Actions page</h1>');
    expect(result.actions).toBeUndefined();
  });

  test('actions run in order; the HTML is the page after them; screenshots, scrapes and script values are returned', async () => {
    const result = SnapshotResult.parse(
      await snapshot(
        {
          url: url(),
          mode: 'html',
          viewport: { width: 600, height: 400 },
          actions: [
            { type: 'click', selector: '#query' },
            { type: 'write', text: 'gulls' },
            { type: 'press', key: 'Tab' },
            { type: 'click', selector: '#more' },
            { type: 'wait', selector: 'p.added' },
            { type: 'scroll', selector: '#box' },
            { type: 'scrape' },
            { type: 'screenshot', viewport: { width: 300, height: 200 } },
            { type: 'executeJavascript', script: 'document.getElementById("box").scrollTop' },
            { type: 'executeJavascript', script: 'const n = document.querySelectorAll("p.added").length; return new Promise((done) => setTimeout(() => done({ n }), 10));' },
            { type: 'executeJavascript', script: 'void 0' },
            { type: 'wait', milliseconds: 50 },
          ],
        },
        { signal: signal() },
      ),
    );
    expect(result.snapshot).toContain('Added for gulls');
    expect(result.actions!.scrapes).toEqual([{ url: url(), html: expect.stringContaining('Added for gulls') }]);
    expect(result.actions!.screenshots.map((png) => pngSize(Buffer.from(png, 'base64')))).toEqual([{ width: 300, height: 200 }]);
    expect(result.actions!.javascript_returns).toEqual([
      { type: 'number', value: 100 },
      { type: 'object', value: { n: 1 } },
      { type: 'undefined', value: null },
    ]);
  });

  test('a failing action fails the task, naming it, and is not retried elsewhere', async () => {
    const missing = snapshot({ url: url(), mode: 'html', actions: [{ type: 'wait', milliseconds: 1 }, { type: 'click', selector: '#absent' }] }, { signal: signal() });
    await expect(missing).rejects.toMatchObject({ type: 'action_failed', retryable: false, message: expect.stringContaining('action 1 (click "#absent") failed') });
    const thrown = snapshot({ url: url(), mode: 'html', actions: [{ type: 'executeJavascript', script: 'throw new Error("kaboom")' }] }, { signal: signal() });
    await expect(thrown).rejects.toMatchObject({ type: 'action_failed', message: expect.stringContaining('kaboom') });
  });

  test('actions outside html mode, or malformed, are an invalid payload', async () => {
    await expect(snapshot({ url: url(), actions: [{ type: 'scrape' }] }, { signal: signal() })).rejects.toMatchObject({ type: 'invalid_payload' });
    await expect(snapshot({ url: url(), mode: 'html', actions: [{ type: 'hover', selector: 'a' }] }, { signal: signal() })).rejects.toMatchObject({ type: 'invalid_payload' });
    await expect(snapshot({ url: url(), mode: 'html', actions: [{ type: 'wait', milliseconds: 15_000 }, { type: 'wait', milliseconds: 15_000 }] }, { signal: signal() })).rejects.toMatchObject({ type: 'invalid_payload' });
  });
});
