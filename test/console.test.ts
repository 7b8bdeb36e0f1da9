import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { chromium, type Browser, type Page } from 'playwright-core';
import { sql } from 'slonik';
import { auditLedger, PLATFORM_ACCOUNT_ID } from '../src/db/ledger';
import { finishDelivery } from '../src/db/webhooks';
import { createTemporalClient } from '../src/temporal/connection';
import { auditTest } from '../src/trust/chat-audit';
import { suiteSolvers, waitFor, type FakeSolver, type TaskFrame } from './support/fake-solver';
import { ADMIN_KEY, api, registerAccount, startTestStack, testEndpoints, type TestStack } from './support/stack';

/**
 * The market console (docs/console.md) in real Chromium against a real stack: what an operator, a
 * client and a solver see and do, each through the API's own routes. Each test keeps a screenshot of
 * the page it checked under SHOTS.
 */

jest.setTimeout(180_000);

const admin = { 'X-Admin-API-Key': ADMIN_KEY };
const SHOTS = fs.mkdtempSync(path.join(os.tmpdir(), 'console-test-'));
let stack: TestStack;
let browser: Browser;
const pages: Page[] = [];
/** What the page reported as wrong: script errors and refused loads (a CSP violation is one). */
const problems: string[] = [];

beforeAll(async () => {
  // Every client web task is run again by a second solver, so that two screenshots can disagree; a
  // solver's pay is held for an hour (no check vests it sooner), so that held and vested pay differ.
  stack = await startTestStack({
    env: { REDUNDANT_RUN_FRACTION: '1', REDUNDANT_RUN_SWEEP_SECONDS: '3600', EARNINGS_VESTING_SECONDS: '3600', EARNINGS_VESTING_CHECKS: '0', TEMPORAL_UI_URL: 'http://127.0.0.1:8233' },
  });
  const funded = await api(stack.url, 'POST', '/v1/admin/deposit', { body: { account_id: PLATFORM_ACCOUNT_ID, amount_points: '1000' }, headers: admin });
  expect(funded.status).toBe(200);
  browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', headless: true, args: ['--no-sandbox'] });
});
afterEach(async () => {
  await Promise.all(pages.splice(0).map((page) => page.context().close()));
  expect(problems.splice(0)).toEqual([]);
});
afterAll(async () => {
  await browser?.close();
  await stack?.close();
  process.stdout.write(`console screenshots: ${SHOTS}\n`);
});

const startSolver = suiteSolvers(() => stack.url);

async function openConsole(role: 'operator' | 'client' | 'solver', key: string, viewport = { width: 1280, height: 900 }): Promise<Page> {
  const context = await browser.newContext({ viewport });
  const page = await context.newPage();
  pages.push(page);
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error' && !/status of 4\d\d/.test(message.text())) problems.push(`console: ${message.text()}`);
  });
  await page.goto(`${stack.url}/console`);
  await page.getByLabel('Role').selectOption(role);
  await page.getByLabel('Key').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.locator('#nav a').first().waitFor();
  return page;
}

async function keep(page: Page, name: string) {
  await page.screenshot({ path: path.join(SHOTS, `${name}.png`), fullPage: true });
}

/** A PNG of `width`×`height` whose pixel (x, y) has grey level shade(x, y). */
function png(width: number, height: number, shade: (x: number, y: number) => number): string {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (bytes: Buffer) => {
    let c = 0xffffffff;
    for (const byte of bytes) c = crcTable[(c ^ byte) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type: string, data: Buffer) => {
    const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
    const out = Buffer.alloc(body.length + 8);
    out.writeUInt32BE(data.length, 0);
    body.copy(out, 4);
    out.writeUInt32BE(crc(body), body.length + 4);
    return out;
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8; // bit depth
  header[9] = 0; // greyscale
  const rows = Buffer.alloc((width + 1) * height);
  for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) rows[y * (width + 1) + 1 + x] = shade(x, y);
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', header), chunk('IDAT', zlib.deflateSync(rows)), chunk('IEND', Buffer.alloc(0))]).toString('base64');
}

const screenshotSolver = (image: string) => (frame: TaskFrame, self: FakeSolver) => {
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  self.send({ type: 'result', attempt_id: frame.attempt_id, result: { mime_type: 'image/png', image_base64: image, width: 64, height: 48 } });
};

describe('the console page', () => {
  test('is served with a strict Content-Security-Policy and holds no inline script or style', async () => {
    const page = await api(stack.url, 'GET', '/console');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-type')).toMatch(/^text\/html/);
    const csp = page.headers.get('content-security-policy') ?? '';
    const directives = Object.fromEntries(csp.split(';').map((d) => d.trim().split(/\s+/)).map(([name, ...values]) => [name, values]));
    expect(directives['default-src']).toEqual(["'self'"]);
    expect(directives['script-src']).toEqual(["'self'"]);
    expect(directives['style-src']).toEqual(["'self'"]);
    expect(directives['img-src']).toEqual(["'self'", 'data:']);
    expect(directives['connect-src']).toEqual(["'self'"]);
    expect(directives['frame-ancestors']).toEqual(["'none'"]);
    expect(directives['object-src']).toEqual(["'none'"]);
    expect(csp).not.toMatch(/unsafe-|\*|https?:/);
    expect(page.headers.get('x-content-type-options')).toBe('nosniff');
    // Every script is a file of this origin; no style attribute or element to allow.
    expect(page.text).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(page.text).not.toMatch(/\sstyle=|<style/);
    expect(page.text).not.toMatch(/https?:\/\//);
    const module = await api(stack.url, 'GET', '/console/app.js');
    expect(module.headers.get('content-type')).toMatch(/javascript/);
    expect(module.headers.get('content-security-policy')).toBe(csp);
    // The page sets no cookie: the key lives in the tab's session storage only.
    expect(page.headers.get('set-cookie')).toBeNull();
  });

  test('an inline script injected into the page is refused by the policy', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    pages.push(page);
    const refused: string[] = [];
    page.on('console', (message) => refused.push(message.text()));
    await page.goto(`${stack.url}/console`);
    await page.evaluate(`(() => {
      const script = document.createElement('script');
      script.textContent = 'window.__injected = true';
      document.body.append(script);
    })()`);
    expect(await page.evaluate('window.__injected')).toBeUndefined();
    expect(refused.join('\n')).toMatch(/Content Security Policy/);
  });
});

describe('operators', () => {
  test('find a waiting task, then watch it served without reloading', async () => {
    const client = await registerAccount(stack.url, '100');
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'page_snapshot', payload: { url: 'https://example.com/wait' }, timeout_seconds: 120 } });
    expect(created.json.status).toBe('queued');
    const taskId = created.json.task_id as string;

    const page = await openConsole('operator', ADMIN_KEY);
    await page.locator('[data-queued="page_snapshot"]').filter({ hasText: /^[1-9]/ }).waitFor();
    await expect(page.locator('svg.chart polyline[data-type="page_snapshot"]').count()).resolves.toBe(1);
    await keep(page, 'operator-queues');
    await page.getByRole('link', { name: 'page_snapshot' }).click();
    await page.getByRole('link', { name: taskId }).click();
    await page.locator('#task-status', { hasText: 'queued' }).waitFor();
    const served = page.locator('#task-status', { hasText: 'completed' });
    expect(await served.count()).toBe(0);

    await startSolver({ taskTypes: ['page_snapshot'] });
    await served.waitFor({ timeout: 30_000 });
    const timeline = page.locator('.timeline li');
    await expect(timeline.count()).resolves.toBe(1);
    await expect(timeline.first().textContent()).resolves.toContain('completed');
    await page.locator('td', { hasText: 'payout' }).waitFor();
    const workflow = await page.getByRole('link', { name: /in the Temporal UI/ }).getAttribute('href');
    expect(workflow).toBe(`http://127.0.0.1:8233/namespaces/default/workflows/${encodeURIComponent(created.json.workflow_id)}`);
    await keep(page, 'operator-task-served');
  });

  test('open a quarantine and see both sides: the canary evidence and the two screenshots that disagree; clear it, and mark a verifier', async () => {
    const white = png(64, 48, () => 255);
    const halves = png(64, 48, (x) => (x < 32 ? 0 : 255));
    const first = await startSolver({ taskTypes: ['screenshot'], price: '1', behaviour: screenshotSolver(white) });
    // One price: a re-run is paid at most what the client was charged, so it needs a solver at that price.
    const second = await startSolver({ taskTypes: ['screenshot'], price: '1', behaviour: screenshotSolver(halves) });
    const client = await registerAccount(stack.url, '100');
    const shot = await api(stack.url, 'POST', '/v1/screenshot', { headers: client.auth, body: { url: 'https://example.com/shot' } });
    expect(shot.status).toBe(200);
    const taskId = shot.json.task_id as string;
    await waitFor(async () => (await stack.db.maybeOneFirst(sql.unsafe`SELECT status FROM redundant_runs WHERE task_id = ${taskId} AND status <> 'pending'`)) === 'disagreed', 45_000);
    // The second solver also failed a canary (as judgeCanaryIn records one): its quarantine's evidence.
    await stack.db.query(sql.unsafe`
      INSERT INTO solver_quarantines (solver_id, task_type, reason, evidence)
      VALUES (${second.solverId}, 'proxy_fetch', 'canary_failed',
              ${sql.jsonb({ canary_task_id: 'task_canary_x', task_type: 'proxy_fetch', expected_token: 'cnry-7f3a9c', returned_excerpt: 'Welcome to a page the solver made up' })})`);

    // Chat audits it answered with gpt-5, judged as judgeCanaryIn records them: passed, failed, passed.
    for (const [i, verdict] of ['passed', 'failed', 'passed'].entries()) {
      const auditId = `chat_console${i}`;
      await stack.db.query(sql.unsafe`
        INSERT INTO tasks (task_id, account_id, task_type, status, payload, max_price_points, timeout_seconds, workflow_id, workflow_started_at, purpose)
        VALUES (${auditId}, ${PLATFORM_ACCOUNT_ID}, 'chat_completion', 'completed', '{}'::jsonb, 100, 60, ${auditId}, now(), 'canary')`);
      await stack.db.query(sql.unsafe`
        INSERT INTO task_attempts (attempt_id, task_id, attempt_number, solver_id, task_type, model_name, node_id, price_points, outcome, ended_at)
        VALUES (${`${auditId}.a1`}, ${auditId}, 1, ${second.solverId}, 'chat_completion', 'gpt-5', 'node-x', 1, 'completed', now())`);
      await stack.db.query(sql.unsafe`
        INSERT INTO canaries (task_id, canary_id, solver_id, task_type, token, verdict, judged_at, audit)
        VALUES (${auditId}, ${auditId}, ${second.solverId}, 'chat_completion', '42', ${verdict}, now() - make_interval(secs => ${10 - i}), '{}'::jsonb)`);
    }

    const page = await openConsole('operator', ADMIN_KEY);
    await page.getByRole('link', { name: 'Trust' }).click();
    await page.getByRole('link', { name: second.solverId }).click();
    await page.getByText('Quarantined', { exact: true }).waitFor();
    const audits = page.locator('table', { has: page.locator('caption', { hasText: 'Chat audits per model' }) }).locator('tbody tr');
    await expect(audits.allInnerTexts()).resolves.toEqual([expect.stringMatching(/gpt-5\s+2\/1\s+66\.7 %\s+2\/1\s+66\.7 %/)]);
    const expectedTest = auditTest([true, false, true]);
    await expect(page.locator('#audit-test').textContent()).resolves.toBe(`Sequential test: continue, ratio ${expectedTest.llr} of ${expectedTest.threshold} to quarantine, over 3 audits (1 failed); expected pass rate 90.0 %.`);
    const panes = page.locator('.evidence .pair').first().locator('.pane');
    await expect(panes.nth(0).textContent()).resolves.toContain('cnry-7f3a9c');
    await expect(panes.nth(1).textContent()).resolves.toContain('a page the solver made up');
    await expect(panes.nth(0).locator('mark').count()).resolves.toBeGreaterThan(0);
    const images = page.locator('.shots img.shot');
    await expect(images.count()).resolves.toBe(2);
    const sizes = await images.evaluateAll((imgs) => imgs.map((img) => { const { complete, naturalWidth, naturalHeight } = img as unknown as { complete: boolean; naturalWidth: number; naturalHeight: number }; return [complete, naturalWidth, naturalHeight]; }));
    expect(sizes).toEqual([[true, 64, 48], [true, 64, 48]]);
    // Either solver may have served the client (equal offers share work); the other ran the check.
    const sides = (await page.locator('.shots h4').allTextContents()).map((text) => text.replace(/^\w+: (\S+).*$/, '$1')).sort();
    expect(sides).toEqual([first.solverId, second.solverId].sort());
    await keep(page, 'operator-quarantine');

    await page.getByLabel('Note (kept with the quarantine)').fill('checked by hand');
    await page.getByRole('button', { name: /Clear the quarantine/ }).click();
    await page.getByText('Not quarantined').waitFor();
    // Cleared: its audits count again from none.
    await expect(audits.allInnerTexts()).resolves.toEqual([expect.stringMatching(/gpt-5\s+2\/1\s+66\.7 %\s+0\/0\s+—/)]);
    const trust = await api(stack.url, 'GET', `/v1/admin/solvers/${second.solverId}/trust`, { headers: admin });
    expect(trust.json.quarantined).toBe(false);
    expect(trust.json.quarantines[0].cleared_note).toBe('checked by hand');

    // The operator trusts the first solver to verify others' client tasks.
    await page.goto(page.url().replace(second.solverId, first.solverId));
    await page.getByRole('button', { name: 'Mark verifier' }).click();
    await page.getByRole('button', { name: 'Unmark verifier' }).waitFor();
    expect((await api(stack.url, 'GET', `/v1/admin/solvers/${first.solverId}/trust`, { headers: admin })).json.verifier).toBe(true);
  });

  test('complete a task by hand: a result that breaks its schema is stopped, a good one completes it and the ledger moves', async () => {
    const client = await registerAccount(stack.url, '100');
    const payee = await registerAccount(stack.url);
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'by hand' }, max_price_points: '6', timeout_seconds: 120 } });
    const taskId = created.json.task_id as string;

    const page = await openConsole('operator', ADMIN_KEY);
    await page.getByRole('link', { name: 'Tasks' }).click();
    await page.getByLabel('Task id').fill(taskId);
    await page.getByRole('button', { name: 'Find' }).click();
    await page.getByRole('link', { name: taskId }).click();
    await page.locator('#task-status', { hasText: 'queued' }).waitFor();
    await expect(page.locator('td', { hasText: /^capture$/ }).count()).resolves.toBe(0);

    await page.getByLabel('Solver paid').fill(payee.account_id);
    await page.getByLabel('Result (JSON)').fill(JSON.stringify({ results: [{ title: 'Manual', url: 'https://example.com' }] }));
    await page.getByRole('button', { name: 'Complete task' }).click();
    await page.getByRole('alert').filter({ hasText: 'results.0.snippet: is required' }).waitFor();
    expect((await api(stack.url, 'GET', `/v1/tasks/${taskId}`, { headers: client.auth })).json.status).toBe('queued');

    await page.getByLabel('Result (JSON)').fill(JSON.stringify({ results: [{ title: 'Manual', url: 'https://example.com', snippet: 'by hand' }] }));
    await page.getByRole('button', { name: 'Complete task' }).click();
    await page.locator('#task-status', { hasText: 'completed' }).waitFor({ timeout: 30_000 });
    for (const kind of ['hold', 'capture', 'payout', 'fee']) await page.locator('td', { hasText: new RegExp(`^${kind}$`) }).first().waitFor();
    const payout = page.locator('tr', { has: page.locator('td', { hasText: /^payout$/ }) });
    await expect(payout.textContent()).resolves.toContain(payee.account_id);
    await expect(payout.textContent()).resolves.toContain('5.4');
    await keep(page, 'operator-complete');
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  });

  test('markup in a result is shown as text, never run', async () => {
    const client = await registerAccount(stack.url, '100');
    const payee = await registerAccount(stack.url);
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com/x' }, timeout_seconds: 120 } });
    const markup = '<img id="pwn" src="x" onerror="window.__pwned = 1"><b id="bold">bold</b>';
    const result = { url: 'https://example.com/x', final_url: 'https://example.com/x', status_code: 200, content_type: 'html', content: markup, title: '<script>window.__pwned = 2</script>' };
    expect((await api(stack.url, 'POST', `/v1/admin/tasks/${created.json.task_id}/complete`, { headers: admin, body: { solver_id: payee.account_id, result } })).status).toBe(200);
    const page = await openConsole('operator', ADMIN_KEY);
    await page.goto(`${stack.url}/console#/task/${created.json.task_id}`);
    await page.locator('pre', { hasText: 'onerror' }).waitFor();
    expect(await page.locator('#pwn, #bold').count()).toBe(0);
    expect(await page.evaluate('window.__pwned')).toBeUndefined();
  });

  test('deposit points and reload the domain policy from the console', async () => {
    const account = await registerAccount(stack.url);
    const page = await openConsole('operator', ADMIN_KEY);
    await page.getByRole('link', { name: 'Money & policy' }).click();
    await page.getByLabel('Account').fill(account.account_id);
    await page.getByLabel('Points').fill('25');
    await page.getByRole('button', { name: 'Deposit' }).click();
    await page.getByText(/Deposited 25 into/).waitFor();
    expect((await api(stack.url, 'GET', '/v1/balance', { headers: account.auth })).json.available_points).toBe('25');
    await page.getByRole('button', { name: 'Reload the domain policy' }).click();
    await page.getByText(/Reloaded from .* on every node/).waitFor();
    await keep(page, 'operator-tools');
  });
});

describe('clients', () => {
  test('revoke a key on a phone-sized screen, and the next call with it fails', async () => {
    const client = await registerAccount(stack.url, '10');
    const spare = await api(stack.url, 'POST', '/v1/account/keys', { headers: client.auth, body: { name: 'laptop' } });
    const spareAuth = { Authorization: `Bearer ${spare.json.api_key}` };
    expect((await api(stack.url, 'GET', '/v1/balance', { headers: spareAuth })).status).toBe(200);

    const page = await openConsole('client', client.api_key, { width: 390, height: 844 });
    await page.getByRole('link', { name: 'Keys' }).click();
    await page.getByRole('button', { name: 'Revoke laptop' }).click();
    await page.getByText(/revoked \d{4}-/).waitFor();
    const refused = await api(stack.url, 'GET', '/v1/balance', { headers: spareAuth });
    expect(refused.status).toBe(401);
    expect(refused.json.error.type).toBe('invalid_api_key');
    // Nothing wider than the screen but the tables, which scroll inside their box.
    expect(await page.evaluate('document.documentElement.scrollWidth')).toBeLessThanOrEqual(390);
    await keep(page, 'client-keys-phone');
  });

  test('by keyboard alone: sign in, open a view and revoke a key', async () => {
    const client = await registerAccount(stack.url, '10');
    const spare = await api(stack.url, 'POST', '/v1/account/keys', { headers: client.auth, body: { name: 'tablet' } });
    const spareAuth = { Authorization: `Bearer ${spare.json.api_key}` };
    const page = await (await browser.newContext()).newPage();
    pages.push(page);
    await page.goto(`${stack.url}/console`);
    // The sign-in form takes the focus on its role.
    await page.waitForFunction('document.activeElement?.getAttribute("name") === "role"');
    await page.keyboard.press('ArrowDown');
    expect(await page.getByLabel('Role').inputValue()).toBe('client');
    await page.keyboard.press('Tab');
    await page.keyboard.type(client.api_key);
    // The home view's data is held until the keyboard has reached another link: a view drawn late must
    // not take the focus from where the reader has since gone.
    let release = () => {};
    const held = new Promise<void>((resolve) => { release = resolve; });
    await page.route('**/v1/balance', async (route) => { await held; await route.continue(); });
    await page.keyboard.press('Enter');
    await page.locator('#nav a').first().waitFor();
    const tabTo = async (name: string) => {
      for (let i = 0; i < 80; i++) {
        await page.keyboard.press('Tab');
        const focused = await page.evaluate('(document.activeElement?.getAttribute("aria-label") ?? document.activeElement?.textContent ?? "").trim()');
        if (focused === name) return;
      }
      throw new Error(`Tab never reached ${name}`);
    };
    await tabTo('Keys');
    release();
    await page.locator('#available').waitFor();
    await page.keyboard.press('Enter');
    await page.getByRole('button', { name: 'Revoke tablet' }).waitFor();
    await tabTo('Revoke tablet');
    await page.keyboard.press('Enter');
    await page.getByText(/revoked \d{4}-/).waitFor();
    expect((await api(stack.url, 'GET', '/v1/balance', { headers: spareAuth })).status).toBe(401);
    await keep(page, 'client-keys-keyboard');
  });

  test('set a webhook, then see their tasks, spend per day and each delivery with its attempts', async () => {
    const received: string[] = [];
    const receiver = http.createServer((req, res) => {
      received.push(String(req.headers['webhook-id']));
      res.writeHead(204).end();
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    try {
      const solver = await startSolver({ taskTypes: ['proxy_fetch'] });
      const client = await registerAccount(stack.url, '50');
      const page = await openConsole('client', client.api_key);
      await page.getByRole('link', { name: 'Webhook' }).click();
      await page.getByLabel('URL').fill(`http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`);
      await page.getByRole('button', { name: 'Save' }).click();
      await page.getByText(/Every new task tells http:\/\/127\.0\.0\.1/).waitFor();

      const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/spend' } });
      expect(fetched.status).toBe(200);
      await waitFor(() => received.length === 1);
      await page.getByRole('link', { name: 'Tasks & spend' }).click();
      await expect(page.locator('.bars li').first().textContent()).resolves.toContain('1 pts');
      await keep(page, 'client-tasks');
      await page.getByRole('link', { name: fetched.json.task_id }).click();
      await page.getByText('completed → delivered').waitFor();
      await page.locator('td', { hasText: /^204$/ }).waitFor();
      expect(solver.received).toHaveLength(1);
    } finally {
      await new Promise((resolve) => receiver.close(resolve));
    }
  });
  test('send a failed webhook delivery again from its task\'s page', async () => {
    let accept = false;
    const answered: number[] = [];
    const receiver = http.createServer((req, res) => {
      req.resume();
      answered.push(accept ? 204 : 500);
      res.writeHead(answered.at(-1)!).end();
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    const temporal = await createTemporalClient(testEndpoints().temporalAddress, stack.config.temporalNamespace);
    try {
      await startSolver({ taskTypes: ['proxy_fetch'] });
      const client = await registerAccount(stack.url, '50');
      const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;
      const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com/resend' }, webhook: { url, events: ['completed'] } } });
      const taskId = created.json.task_id as string;
      // Its receiver refused it until its time was up: its workflow ended and the delivery failed.
      const workflow = temporal.workflow.getHandle(`webhook-${taskId}-completed`);
      await waitFor(async () => (await workflow.describe().then(() => true, () => false)) || undefined);
      await workflow.terminate('its time is up');
      await finishDelivery(stack.db, `whd_${taskId}_completed`, 'failed');
      await new Promise((resolve) => setTimeout(resolve, 500));
      const refused = answered.length;

      const page = await openConsole('client', client.api_key);
      await page.getByRole('link', { name: taskId }).click();
      await page.getByText('completed → failed').waitFor();
      await keep(page, 'client-delivery-failed');
      accept = true;
      await page.getByRole('button', { name: 'Send the completed delivery again' }).click();
      await page.getByText('The completed delivery is being sent again.').waitFor();
      await waitFor(() => answered.includes(204));
      await page.reload();
      await page.getByText('completed → delivered').waitFor();
      await page.locator('td', { hasText: /^204$/ }).waitFor();
      await expect(page.locator('td', { hasText: /^500$/ }).count()).resolves.toBe(refused);
      expect(await page.getByRole('button', { name: /delivery again/ }).count()).toBe(0);
      await keep(page, 'client-delivery-resent');
      expect(answered.filter((code) => code === 204)).toHaveLength(1);
    } finally {
      await temporal.connection.close();
      await new Promise((resolve) => receiver.close(resolve));
    }
  });
});

describe('solvers', () => {
  test('see their earnings, reputation per task type, and why an attempt failed', async () => {
    let failNext = true;
    const solver = await startSolver({
      taskTypes: ['proxy_fetch'],
      price: '2',
      behaviour: (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        if (failNext) {
          failNext = false;
          self.send({ type: 'error', attempt_id: frame.attempt_id, error: { type: 'upstream_failed', message: 'the site answered 503' }, retryable: false });
        } else {
          self.send({ type: 'result', attempt_id: frame.attempt_id, result: { url: frame.payload.url, final_url: frame.payload.url, status_code: 200, content_type: 'markdown', content: '# Earned', title: 'Earned' } });
        }
      },
    });
    const client = await registerAccount(stack.url, '50');
    await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/fail' } });
    expect((await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/earn' } })).status).toBe(200);

    const attempts = await api(stack.url, 'GET', '/v1/solver/attempts', { headers: { Authorization: `Bearer ${solver.apiKey}` } });
    expect(attempts.json.data.map((a: { outcome: string }) => a.outcome)).toEqual(['completed', 'error']);
    expect(attempts.json.data[1].error).toMatchObject({ message: 'the site answered 503' });
    // Only its own: another solver's list holds none of these.
    const other = await registerAccount(stack.url);
    expect((await api(stack.url, 'GET', '/v1/solver/attempts', { headers: other.auth })).json.data).toEqual([]);

    const page = await openConsole('solver', solver.apiKey);
    // 2 points less the platform's 10 %.
    await page.locator('#earned', { hasText: '1.8 pts' }).waitFor();
    await expect(page.locator('.bars li').first().textContent()).resolves.toContain('1.8 pts');
    await expect(page.locator('td', { hasText: /^proxy_fetch$/ }).count()).resolves.toBeGreaterThanOrEqual(2);
    await page.locator('td', { hasText: 'the site answered 503' }).waitFor();
    await keep(page, 'solver-earnings');
  });
});

describe('escrow and refunds', () => {
  test('a solver sees held pay beside vested pay; an operator confirms its quarantine and sees the refund; the client sees its task refunded', async () => {
    const solver = await startSolver({ taskTypes: ['proxy_fetch'], price: '2' });
    const client = await registerAccount(stack.url, '50');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/escrowed' } });
    expect(fetched.status).toBe(200);
    const taskId = fetched.json.task_id as string;
    // An admin completion is not escrowed: its pay is vested at once.
    const byHand = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'vested' }, max_price_points: '6', timeout_seconds: 120 } });
    const completed = await api(stack.url, 'POST', `/v1/admin/tasks/${byHand.json.task_id}/complete`, { headers: admin, body: { solver_id: solver.solverId, result: { results: [{ title: 'Vested', url: 'https://example.com', snippet: 'by hand' }] } } });
    expect(completed.status).toBe(200);

    const solverPage = await openConsole('solver', solver.apiKey);
    await solverPage.locator('#vested', { hasText: /^5\.4 pts$/ }).waitFor();
    await expect(solverPage.locator('#unvested').textContent()).resolves.toMatch(/^1\.8 pts over 1 tasks; the oldest vests by \d{4}-/);
    await keep(solverPage, 'solver-held-and-vested');

    await stack.db.query(sql.unsafe`
      INSERT INTO solver_quarantines (solver_id, task_type, reason, evidence)
      VALUES (${solver.solverId}, 'proxy_fetch', 'canary_failed', ${sql.jsonb({ canary_task_id: 'task_canary_y', task_type: 'proxy_fetch', expected_token: 'cnry-00aa11', returned_excerpt: 'made up' })})`);
    await solverPage.reload();
    await solverPage.locator('#unvested', { hasText: '1.8 pts over 1 tasks: frozen while quarantined' }).waitFor();

    const operator = await openConsole('operator', ADMIN_KEY);
    await operator.goto(`${stack.url}/console#/solver/${solver.solverId}`);
    await operator.getByLabel('Note (kept with the quarantine)').fill('made-up pages');
    await operator.getByRole('button', { name: /Confirm the quarantine/ }).click();
    await operator.locator('#decided', { hasText: 'Quarantine confirmed: 1 task(s) refunded, 2 pts given back to their clients (1.8 pts forfeited by the solver).' }).waitFor();
    await operator.getByText(/confirmed \d{4}-.*: made-up pages/).waitFor();
    await operator.getByText('Quarantined', { exact: true }).waitFor();
    await keep(operator, 'operator-quarantine-confirmed');
    // Confirming again refunds nothing twice.
    await operator.getByRole('button', { name: /Confirm the quarantine/ }).click();
    await operator.locator('#decided', { hasText: 'Quarantine confirmed: 0 task(s) refunded, 0 pts' }).waitFor();
    const balance = await api(stack.url, 'GET', '/v1/balance', { headers: client.auth });
    // 50 deposited, 6 for the task completed by hand, the fetch's 2 given back.
    expect(balance.json.available_points).toBe('44');
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });

    const clientPage = await openConsole('client', client.api_key);
    const row = clientPage.locator('tr', { has: clientPage.getByRole('link', { name: taskId }) });
    await expect(row.first().locator('[data-verification]').getAttribute('data-verification')).resolves.toBe('refunded');
    const refund = clientPage.locator('section', { hasText: 'Refunds' }).locator('tr', { hasText: taskId });
    await expect(refund.textContent()).resolves.toContain('2 pts');
    await keep(clientPage, 'client-refunds');
    await clientPage.getByRole('link', { name: taskId }).first().click();
    await clientPage.locator('#verification', { hasText: 'refunded' }).waitFor();
    const entry = clientPage.locator('tr', { has: clientPage.locator('td', { hasText: /^refund$/ }) });
    await expect(entry.textContent()).resolves.toContain('2 pts');
    await keep(clientPage, 'client-task-refunded');
  });
});

describe('the API behind it', () => {
  test('a manual result that does not match its task type\'s schema is refused with 422 at its loc, and nothing is paid', async () => {
    const client = await registerAccount(stack.url, '100');
    const payee = await registerAccount(stack.url);
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com/bad' }, timeout_seconds: 120 } });
    const bad = await api(stack.url, 'POST', `/v1/admin/tasks/${created.json.task_id}/complete`, { headers: admin, body: { solver_id: payee.account_id, result: { content: 'not a fetch result' } } });
    expect(bad.status).toBe(422);
    expect(bad.json.detail.map((d: { loc: unknown[] }) => d.loc)).toContainEqual(['body', 'result', 'final_url']);
    const task = await api(stack.url, 'GET', `/v1/tasks/${created.json.task_id}`, { headers: client.auth });
    expect(task.json.status).toBe('queued');
    expect((await api(stack.url, 'GET', '/v1/balance', { headers: payee.auth })).json.available_points).toBe('0');
  });

  test('the task finder and a task in full are for the admin key only', async () => {
    const client = await registerAccount(stack.url, '10');
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'whose' }, timeout_seconds: 60 } });
    for (const route of ['/v1/admin/tasks', `/v1/admin/tasks/${created.json.task_id}`, '/v1/admin/solvers', '/v1/admin/events']) {
      const asClient = await api(stack.url, 'GET', route, { headers: client.auth });
      expect([route, asClient.status, asClient.json?.error?.type]).toEqual([route, 401, "invalid_admin_key"]);
    }
    const found = await api(stack.url, 'GET', `/v1/admin/tasks?account_id=${client.account_id}`, { headers: admin });
    expect(found.json.data.map((t: { task_id: string }) => t.task_id)).toEqual([created.json.task_id]);
    expect(found.json.data[0].account_id).toBe(client.account_id);
    const missing = await api(stack.url, 'GET', '/v1/admin/tasks/task_nope', { headers: admin });
    expect(missing.status).toBe(404);
    expect(missing.json.error.type).toBe('task_not_found');
    const snapshot = await api(stack.url, 'GET', '/v1/admin/events', { headers: admin });
    expect(snapshot.headers.get('content-type')).toMatch(/application\/json/);
    expect(snapshot.json.samples.at(-1).queues.web_search.queued).toBeGreaterThanOrEqual(1);
  });

  test('the event stream sends the queues at once and each task as it ends', async () => {
    const controller = new AbortController();
    const response = await fetch(`${stack.url}/v1/admin/events`, { headers: { ...admin, Accept: 'text/event-stream' }, signal: controller.signal });
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    const until = async (pattern: RegExp) => {
      while (!pattern.test(text)) {
        const { value, done } = await reader.read();
        if (done) throw new Error(`stream ended before ${pattern}: ${text}`);
        text += value;
      }
    };
    await until(/event: history\n/);
    await until(/event: status\ndata: \{"at"/);
    const solver = await startSolver({ taskTypes: ['web_search'] });
    const client = await registerAccount(stack.url, '10');
    const searched = await api(stack.url, 'POST', '/v1/search', { headers: client.auth, body: { query: 'events' } });
    await until(new RegExp(`event: task_finished\\ndata: \\{"task_id":"${searched.json.task_id}","status":"completed"\\}`));
    controller.abort();
    expect(solver.received.length).toBeGreaterThanOrEqual(1);
  });
});
