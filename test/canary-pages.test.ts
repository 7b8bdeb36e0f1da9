import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { sql } from 'slonik';
import { z } from 'zod';
import { auditLedger, getBalance, PLATFORM_ACCOUNT_ID } from '../src/db/ledger';
import { awaitLocalProbation, fundLocalPlatform, LOCAL_PLATFORM_POINTS, startLocalSolver } from '../src/runtime/local-solver';
import { fetchesOnlyLikelyChecks, fetchesOnlyNewHosts, learnsCanaryDomain } from './support/cheats';
import { suiteSolvers, waitFor, type FakeSolver, type TaskFrame } from './support/fake-solver';
import { ADMIN_KEY, api, registerAccount, startTestStack, testConfig, type TestStack } from './support/stack';
import { canariesSettled } from './support/trust';

/**
 * Canary pages with no tell (docs/trust.md, "Canary pages"): served under host names of their own (here,
 * with no CANARY_HOSTS on a stack that allows private networks, names under localhost on the API's
 * port), at paths like any site's, with text drawn for each page; never the API's origin or a /canary/
 * path. The cheat of issue 35, which fetches honestly only what looks like a check, is caught by its
 * probation canary; a cheat that fetches only new hosts honestly is caught when a canary comes back
 * to a site it saw; a cheat that learns the canary domain from its probation canary is not.
 */

jest.setTimeout(240_000);

const EVERY = 4;
let stack: TestStack;
let site: http.Server;
let siteUrl: string;
const admin = { 'X-Admin-API-Key': ADMIN_KEY };

beforeAll(async () => {
  stack = await startTestStack({ env: { TRUST_PROBATION_CANARIES: '1', CANARY_EVERY_TASKS: String(EVERY), CANARY_SWEEP_SECONDS: '3600' } });
  const funded = await api(stack.url, 'POST', '/v1/admin/deposit', { body: { account_id: PLATFORM_ACCOUNT_ID, amount_points: '1000' }, headers: admin });
  expect(funded.status).toBe(200);
  // The clients' pages: another site on this machine, as in the issue's runs (40 distinct pages).
  site = http.createServer((req, res) => res.end(`<html><body><h1>Client page</h1><p>This is ${req.url}, a page a client wants.</p></body></html>`));
  await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
  siteUrl = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await stack.close();
  await new Promise((resolve) => site.close(resolve));
});

const startSolver = suiteSolvers(() => stack.url);
const trustOf = async (solverId: string) => (await api(stack.url, 'GET', `/v1/admin/solvers/${solverId}/trust`, { headers: admin })).json;
const canaryTasks = async (solverId: string) =>
  new Set(await stack.db.anyFirst(sql.type(z.object({ task_id: z.string() }))`SELECT task_id FROM canaries WHERE solver_id = ${solverId}`));
const apiPort = () => new URL(stack.url).port;

/** A GET to the API node with the Host header a canary host name's DNS record would bring. */
function getWithHost(host: string, path: string): Promise<{ status: number; type: string; body: string }> {
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port: apiPort(), path, headers: { host: `${host}:${apiPort()}` } }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode!, type: String(res.headers['content-type']), body }));
      })
      .on('error', reject);
  });
}

/** Client fetches of distinct pages of the clients' site, one at a time, until the solver is refused (quarantined) or `max` are served. */
async function serveClients(solver: FakeSolver, max: number): Promise<number> {
  const client = await registerAccount(stack.url, '1000');
  let served = 0;
  while (served < max) {
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${siteUrl}/page-${served}` }, headers: client.auth });
    if (fetched.status === 503) break;
    expect(fetched.status).toBe(200);
    served += 1;
    await canariesSettled(stack.db, solver.solverId);
  }
  return served;
}

test('a canary page is served by its host name and path only, looks like a site, and the API does not show there', async () => {
  const solver = await startSolver({ taskTypes: ['proxy_fetch'], behaviour: fetchesOnlyNewHosts() });
  await waitFor(async () => (await trustOf(solver.solverId)).reputation[0]?.client_work === true);
  const url = new URL(String(solver.received[0]!.payload.url));
  expect(url.hostname).toMatch(/^[a-z]+-[a-z]+(-\d+)?\.localhost$/);
  expect(url.port).toBe(apiPort());
  expect(url.pathname).not.toMatch(/canary/);
  const page = await getWithHost(url.hostname, url.pathname);
  expect(page).toMatchObject({ status: 200, type: expect.stringMatching(/^text\/html/) });
  expect(page.body).toMatch(/<nav|<header/);
  expect(page.body.toLowerCase()).not.toMatch(/canary|token/);
  // Its site has a home page and a page for each item of its menu, the same on every visit, as any site does.
  const home = await getWithHost(url.hostname, '/');
  expect(home).toMatchObject({ status: 200, type: expect.stringMatching(/^text\/html/) });
  expect((await getWithHost(url.hostname, '/')).body).toBe(home.body);
  const menu = [...home.body.matchAll(/<li><a href="(\/[a-z]+)">/g)].map((link) => link[1]!);
  expect(menu.length).toBeGreaterThan(0);
  for (const path of menu) expect((await getWithHost(url.hostname, path)).status).toBe(200);
  expect((home.body + page.body).toLowerCase()).not.toMatch(/canary|token/);
  // The same path on another name, the API's own paths on a canary name, a NUL: a site's 404 page, never the API.
  for (const [host, path] of [['other-site.localhost', url.pathname], [url.hostname, '/health'], [url.hostname, '/v1/balance'], [url.hostname, '/openapi.json'], [url.hostname, '/blog/a%00b']]) {
    const answer = await getWithHost(host!, path!);
    expect(answer.status).toBe(404);
    expect(answer.type).toMatch(/^text\/html/);
    expect(answer.body).not.toMatch(/"error"/);
  }
  // And the page is not on the API's origin, under its path or the old /canary/ one.
  expect((await api(stack.url, 'GET', url.pathname)).status).toBe(404);
  expect((await api(stack.url, 'GET', '/canary/anything')).json.error.type).toBe('not_found');
});

test("issue 35's cheat, which fetches honestly only /canary/ paths and the API's origin, is quarantined by its probation canary before any client task", async () => {
  const cheat = await startSolver({ taskTypes: ['proxy_fetch'], behaviour: fetchesOnlyLikelyChecks(stack.url) });
  const trust = await waitFor(async () => {
    const found = await trustOf(cheat.solverId);
    return found.quarantined ? found : null;
  });
  expect(cheat.received).toHaveLength(1);
  expect(trust.quarantines[0]).toMatchObject({ reason: 'canary_failed', evidence: { returned_excerpt: '# Hello', page: { similarity: 0 } } });
  expect(await serveClients(cheat, 5)).toBe(0);
  expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
});

test('a cheat that fetches honestly only hosts it has not seen is quarantined when a canary comes back to a site it was sent before', async () => {
  const cheat = await startSolver({ taskTypes: ['proxy_fetch'], behaviour: fetchesOnlyNewHosts() });
  await waitFor(async () => (await trustOf(cheat.solverId)).reputation[0]?.client_work === true);
  // Each canary after the first reuses one of its earlier canary hosts half of the time; a canary comes every 1 to 7 attempts.
  const served = await serveClients(cheat, 120);
  const trust = await trustOf(cheat.solverId);
  expect(trust.quarantined).toBe(true);
  const canaries = await canaryTasks(cheat.solverId);
  const hosts = cheat.received.filter((frame) => canaries.has(frame.task_id)).map((frame: TaskFrame) => new URL(String(frame.payload.url)).host);
  // The last canary was on a host it had been sent before, and it made that page up.
  expect(hosts.slice(0, -1)).toContain(hosts.at(-1));
  expect(trust.quarantines[0].evidence.returned_excerpt).toBe('# Hello');
  // eslint-disable-next-line no-console
  console.log(`fetchesOnlyNewHosts: ${served} client tasks served (all but the first made up) before ${canaries.size} canaries quarantined it`);
});

test('a cheat that learns the canary domain from its probation canary passes every canary (what canary pages do not catch)', async () => {
  const cheat = await startSolver({ taskTypes: ['proxy_fetch'], behaviour: learnsCanaryDomain() });
  await waitFor(async () => (await trustOf(cheat.solverId)).reputation[0]?.client_work === true);
  const served = await serveClients(cheat, 30);
  expect(served).toBe(30);
  const trust = await trustOf(cheat.solverId);
  expect(trust.quarantined).toBe(false);
  expect(trust.reputation[0].canary_passes).toBeGreaterThanOrEqual(1 + Math.floor(30 / (2 * EVERY - 1)));
});

test('the bundled solver, started as npm start starts it, passes its probation canaries and serves a client at once', async () => {
  const logger = pino({ level: 'warn' });
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'canary-pages-local-'));
  // The stack's settings (probation 1, private networks allowed: canary pages under names of localhost).
  const config = testConfig({ DATA_DIR: dataDir, TRUST_PROBATION_CANARIES: '1', CANARY_EVERY_TASKS: String(EVERY) });
  await fundLocalPlatform(stack.db, logger);
  expect(Number((await getBalance(stack.db, PLATFORM_ACCOUNT_ID))!.available_points)).toBeGreaterThanOrEqual(LOCAL_PLATFORM_POINTS);
  const bundled = await startLocalSolver({ config, apiUrl: stack.url, logger });
  try {
    await awaitLocalProbation(stack.db, stack.config.trust, bundled.solverId, logger);
    const trust = await trustOf(bundled.solverId);
    expect(trust.quarantined).toBe(false);
    const pageTypes = trust.reputation.filter((row: { task_type: string }) => ['proxy_fetch', 'page_snapshot', 'screenshot'].includes(row.task_type));
    expect(pageTypes.length).toBeGreaterThanOrEqual(bundled.taskTypes.includes('screenshot') ? 3 : 1);
    for (const row of pageTypes) expect(row).toMatchObject({ canary_passes: 1, canary_failures: 0, client_work: true });
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${siteUrl}/hello` }, headers: client.auth });
    expect(fetched.status).toBe(200);
    expect(fetched.json.data?.content ?? fetched.text).toContain('a page a client wants');
  } finally {
    await bundled.stop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});
