import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { chromium } from 'playwright-core';
import { sql } from 'slonik';
import { z } from 'zod';
import { PLATFORM_ACCOUNT_ID } from '../src/db/ledger';
import { modelAnswer } from './support/chat-answers';
import { honestFetch } from './support/cheats';
import { strongChat, suiteSolvers, waitFor, type FakeSolver, type TaskFrame } from './support/fake-solver';
import { ADMIN_KEY, api, capturingLogger, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * A deployment without the bundled solver whose platform account was never funded (docs/trust.md, "Who
 * pays the checks"): a solver that would pass its checks connects and waits on probation; the operator
 * is told at start, in /v1/admin/status, in the console and in /metrics, and clients are refused with
 * solver_checks_unfunded, not "no solver online"; a deposit to the platform account starts the checks at
 * once (no sweep: CANARY_SWEEP_SECONDS is an hour) and the solver serves the next request.
 */

jest.setTimeout(240_000);

const admin = { 'X-Admin-API-Key': ADMIN_KEY };
// The worker's first canary sweep runs this long after it starts (its sweeps' period, shortened here from
// a deployment's 15 s); the deposit comes after it, so that only the deposit's announcement can start the checks.
const FIRST_SWEEP_MS = 3_000;
let stack: TestStack;
let startedAt: number;
const { logger, lines } = capturingLogger('warn');
let site: http.Server;
let pageUrl: string;

beforeAll(async () => {
  stack = await startTestStack({
    env: { TRUST_PROBATION_CANARIES: '1', CANARY_SWEEP_SECONDS: '3600' },
    logger,
    sweeps: { everyMs: FIRST_SWEEP_MS, unstartedAfterSeconds: 30 },
  });
  // The worker started before this.
  startedAt = Date.now();
  site = http.createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<html><head><title>Tide tables</title></head><body><p>High water at noon.</p></body></html>'));
  await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
  pageUrl = `http://127.0.0.1:${(site.address() as AddressInfo).port}/tides`;
});
afterAll(async () => {
  await stack?.close();
  site?.close();
});

const startSolver = suiteSolvers(() => stack.url);

/** Answers chat as a model would (audits included) and fetches pages as they are (canary pages included). */
async function honest(frame: TaskFrame, self: FakeSolver) {
  if (frame.task_type !== 'chat_completion') return honestFetch(frame as never, self);
  const answer = await modelAnswer(stack.db, frame.task_id, frame.payload);
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  answer.deltas.forEach((delta) => self.send({ type: 'chunk', attempt_id: frame.attempt_id, delta }));
  self.send({ type: 'result', attempt_id: frame.attempt_id, result: { finish_reason: answer.deltas[0]?.tool_calls ? 'tool_calls' : 'stop', usage: answer.usage, model: 'gpt-4o' } });
}

const fetchCapability = { task_type: 'proxy_fetch', tier: 'standard', billing_type: 'per_request', fulfillment_path: 'http', provider_name: 'fake', model_name: 'fake', marginal_cost: 0, min_price_points: '1', max_concurrent: 4 };

const chat = (auth: Record<string, string>) =>
  api(stack.url, 'POST', '/v1/chat/completions', { body: { model: 'strong', messages: [{ role: 'user', content: 'Say hello.' }], temperature: 0 }, headers: auth });
const fetchPage = (auth: Record<string, string>) => api(stack.url, 'POST', '/v1/fetch', { body: { url: pageUrl }, headers: auth });

/** One unlabelled sample of /metrics (read by its line: prom-client's own event-loop gauges may read `Nan` just after a start). */
const metric = async (name: string) => {
  const response = await fetch(`${stack.url}/metrics`, { headers: { Authorization: `Bearer ${ADMIN_KEY}` } });
  const line = (await response.text()).split('\n').find((entry) => entry.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.slice(name.length + 1));
};

const canaries = (solverId: string) =>
  stack.db.any(sql.type(z.object({ task_type: z.string(), verdict: z.string().nullable() }))`SELECT task_type, verdict FROM canaries WHERE solver_id = ${solverId}`);

test('an unfunded platform account is told at start, to the operator and to clients; once funded, the waiting solver passes its checks and serves', async () => {
  // At start: the API node's warning names the cause and the fix.
  expect(lines.join('')).toMatch(/the platform account has 0 points available, less than the 210 a new solver's check needs[^"]*POST \/v1\/admin\/deposit/);

  const solver = await startSolver({ behaviour: honest, capabilities: [...strongChat(), fetchCapability] });
  const client = await registerAccount(stack.url, '1000');

  // Clients: the cause, not "no solver online".
  const refused = await chat(client.auth);
  expect(refused.status).toBe(503);
  expect(refused.json.error).toMatchObject({ type: 'solver_checks_unfunded', task_type: 'chat_completion', solvers_on_probation: 1 });
  expect(refused.json.error.message).toMatch(/on probation.*platform account.*operator must fund/);
  // The openai SDK retries a 503 (twice by default), then raises it with our type as its code and the cause as its message.
  const sdkError = await new OpenAI({ apiKey: client.api_key, baseURL: `${stack.url}/v1` }).chat.completions
    .create({ model: 'service/strong', messages: [{ role: 'user', content: 'hi' }] })
    .catch((error: unknown) => error);
  expect(sdkError).toBeInstanceOf(OpenAI.InternalServerError);
  expect(sdkError).toMatchObject({ status: 503, code: 'solver_checks_unfunded' });
  expect((sdkError as Error).message).toMatch(/operator must fund the platform account/);
  const refusedFetch = await fetchPage(client.auth);
  expect(refusedFetch.status).toBe(503);
  expect(refusedFetch.json.error).toMatchObject({ type: 'solver_checks_unfunded', task_type: 'proxy_fetch' });
  // Firecrawl's dialect carries it too.
  const scraped = await api(stack.url, 'POST', '/v2/scrape', { body: { url: pageUrl, formats: ['markdown'] }, headers: client.auth });
  expect(scraped.status).toBe(503);
  expect(scraped.json).toMatchObject({ success: false, code: 'solver_checks_unfunded' });
  expect(JSON.stringify(scraped.json)).toMatch(/probation/);
  // Nothing was held or charged.
  expect((await api(stack.url, 'GET', '/v1/balance', { headers: client.auth })).json).toMatchObject({ available_points: '1000', held_points: '0' });

  // The operator: the status, the metrics and the console say why.
  const status = await api(stack.url, 'GET', '/v1/admin/status', { headers: admin });
  expect(status.json.platform).toEqual({
    account_id: PLATFORM_ACCOUNT_ID,
    available_points: '0',
    check_price_points: '210',
    recommended_points: '330',
    checks_unfunded: true,
    solvers_awaiting_checks: 1,
    task_types_awaiting_checks: ['chat_completion', 'proxy_fetch'],
  });
  expect(await metric('marketplace_checks_unfunded')).toBe(1);
  expect(await metric('marketplace_solvers_awaiting_checks')).toBe(1);
  expect(await metric('marketplace_platform_available_points')).toBe(0);

  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium', headless: true, args: ['--no-sandbox'] });
  try {
    const page = await browser.newPage();
    await page.goto(`${stack.url}/console`);
    await page.getByLabel('Role').selectOption('operator');
    await page.getByLabel('Key').fill(ADMIN_KEY);
    await page.getByRole('button', { name: 'Sign in' }).click();
    const alert = page.locator('#platform-alert');
    await alert.waitFor();
    const said = await alert.innerText();
    expect(said).toMatch(/Checks unfunded/);
    expect(said).toMatch(/1 solver online waits on probation \(chat_completion, proxy_fetch\)/);
    expect(said).toMatch(/Deposit at least 330 pts into account "platform"/);
    const shot = path.join(os.tmpdir(), `unfunded-checks-console-${process.pid}.png`);
    await page.screenshot({ path: shot, fullPage: true });
    process.stdout.write(`console screenshot: ${shot}\n`);
  } finally {
    await browser.close();
  }
  // No check was started meanwhile: none could be paid.
  expect(await canaries(solver.solverId)).toEqual([]);

  // Funded after the worker's first sweep: the deposit alone starts the checks, which the solver passes.
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, startedAt + FIRST_SWEEP_MS + 1000 - Date.now())));
  expect(await canaries(solver.solverId)).toEqual([]);
  const funded = await api(stack.url, 'POST', '/v1/admin/deposit', { body: { account_id: PLATFORM_ACCOUNT_ID, amount_points: status.json.platform.recommended_points }, headers: admin });
  expect(funded.status).toBe(200);
  const fundedAt = Date.now();
  const passed = await waitFor(async () => {
    const rows = await canaries(solver.solverId);
    return ['chat_completion', 'proxy_fetch'].every((type) => rows.some((row) => row.task_type === type && row.verdict === 'passed')) ? rows : null;
  }, 30_000).catch(async (error) => {
    throw new Error(`${(error as Error).message}: canaries ${JSON.stringify(await canaries(solver.solverId))}`);
  });
  // Later checks by count may be under way already; none failed.
  expect(passed.filter((row) => row.verdict !== null).every((row) => row.verdict === 'passed')).toBe(true);
  process.stdout.write(`checks passed ${Date.now() - fundedAt} ms after the deposit\n`);

  // Served now; the operator's alert is gone.
  const answered = await chat(client.auth);
  expect(answered.status).toBe(200);
  expect(answered.json.choices[0].message.content).toBeTruthy();
  const fetched = await fetchPage(client.auth);
  expect(fetched.status).toBe(200);
  expect(fetched.json.content).toMatch(/High water at noon/);
  const after = await api(stack.url, 'GET', '/v1/admin/status', { headers: admin });
  expect(after.json.platform).toMatchObject({ checks_unfunded: false, solvers_awaiting_checks: 0 });
  expect(await metric('marketplace_checks_unfunded')).toBe(0);
});

test('with no solver online at all, chat is still 402 no_strong_solver_available and a fetch 503 no_solver_available', async () => {
  const client = await registerAccount(stack.url, '1000');
  const refused = await chat(client.auth);
  expect(refused.status).toBe(402);
  expect(refused.json.error.type).toBe('no_strong_solver_available');
  const refusedFetch = await fetchPage(client.auth);
  expect(refusedFetch.status).toBe(503);
  expect(refusedFetch.json.error.type).toBe('no_solver_available');
});
