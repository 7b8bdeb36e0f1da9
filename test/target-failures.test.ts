import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { sql } from 'slonik';
import { z } from 'zod';
import { auditLedger, getBalance, PLATFORM_ACCOUNT_ID } from '../src/db/ledger';
import { claimsTargetFailed, honestFetch } from './support/cheats';
import { suiteSolvers, waitFor, type FakeSolver, type TaskFrame } from './support/fake-solver';
import type { Script } from './support/cheats';
import { ADMIN_KEY, api, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * Target failures (docs/trust.md, "Target failures"): a solver's claim that the target failed is held
 * against it only when nothing corroborates it; a client whose tasks keep failing on their targets is
 * limited instead; a cheat that claims the target failed to dodge work gains nothing; and a solver
 * excluded by its score is sent recovery canaries to earn its way back.
 */

jest.setTimeout(180_000);

const admin = { 'X-Admin-API-Key': ADMIN_KEY };
const RATE_LIMIT = 100;
// docs/trust.md: ten tasks failed on their target use up a minute's limit.
const TARGET_FAILURE_COST = RATE_LIMIT / 10;
const MIN_SCORE = 0.3;
let stack: TestStack;
let site: http.Server;
let siteUrl: string;

beforeAll(async () => {
  site = http.createServer((req, res) => {
    // A binary file, and a tarpit that never answers: what a client's own request makes a solver fail on.
    if (req.url?.startsWith('/binary')) return void res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(crypto.randomBytes(2048));
    if (req.url?.startsWith('/tarpit')) return;
    res.writeHead(200, { 'content-type': 'text/html' }).end('<html><body><h1>Tides</h1><p>The moon pulls the sea.</p></body></html>');
  });
  await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
  siteUrl = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
  // Canaries by count are rare here (1 to 1,999 attempts), but on: recovery canaries go with them.
  stack = await startTestStack({
    env: { CANARY_EVERY_TASKS: '1000', CANARY_SWEEP_SECONDS: '3600', TRUST_MIN_SCORE: String(MIN_SCORE), RATE_LIMIT_PER_MINUTE: String(RATE_LIMIT) },
  });
  const funded = await api(stack.url, 'POST', '/v1/admin/deposit', { body: { account_id: PLATFORM_ACCOUNT_ID, amount_points: '1000' }, headers: admin });
  expect(funded.status).toBe(200);
});
afterAll(async () => {
  await stack.close();
  site.closeAllConnections();
  await new Promise((resolve) => site.close(resolve));
});

const startSolver = suiteSolvers(() => stack.url);
const trustOf = async (solverId: string) => (await api(stack.url, 'GET', `/v1/admin/solvers/${solverId}/trust`, { headers: admin })).json;
const reputationOf = async (solverId: string, taskType: string) => (await trustOf(solverId)).reputation.find((row: { task_type: string }) => row.task_type === taskType);
/** Canary pages are served under names of localhost (no CANARY_HOSTS here); this file's clients fetch other hosts. */
const isCanary = (frame: TaskFrame) => frame.payload.url !== undefined && new URL(String(frame.payload.url)).hostname.endsWith('.localhost');
const clientFrames = (solver: FakeSolver) => solver.received.filter((frame) => !isCanary(frame));
const nowhere = (i: number) => `http://does-not-exist-${i}-${crypto.randomBytes(4).toString('hex')}.example/`;

const ClaimRow = z.object({ solver_id: z.string(), error_type: z.string(), verdict: z.string(), reason: z.string(), target: z.string() });
const claimsOn = (target: string) =>
  stack.db.any(sql.type(ClaimRow)`SELECT solver_id, error_type, verdict, reason, target FROM target_failures WHERE target = ${target} ORDER BY created_at`);
const claimsBy = (solverId: string) =>
  stack.db.any(sql.type(ClaimRow)`SELECT solver_id, error_type, verdict, reason, target FROM target_failures WHERE solver_id = ${solverId} ORDER BY created_at`);

/** A port on 127.0.0.1 that refuses connections. */
async function refusingOrigin(): Promise<string> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return `http://127.0.0.1:${port}`;
}

/**
 * Waits, if need be, for the start of the next minute: rate limits count in fixed windows of the
 * database's clock (this machine's), and a test that reads what its requests were charged must not see
 * a window turn in its middle.
 */
async function earlyInMinute(): Promise<void> {
  const second = (Date.now() / 1000) % 60;
  if (second > 40) await new Promise((resolve) => setTimeout(resolve, (61 - second) * 1000));
}

const audited = async () => expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });

test('the three-call attack: snapshots of hosts that do not exist leave the only snapshot solver its score and its client work', async () => {
  const only = await startSolver({ taskTypes: ['page_snapshot'], price: '1', behaviour: honestFetch });
  const attacker = await registerAccount(stack.url, '100');
  await earlyInMinute();
  for (let i = 0; i < 3; i++) {
    const snapped = await api(stack.url, 'POST', '/v1/snapshot', { body: { url: nowhere(i) }, headers: attacker.auth });
    expect(snapped.status).toBe(502);
    expect(snapped.json.error).toMatchObject({ type: 'solver_failed', solver_error_type: 'host_not_found' });
  }
  // The service could not resolve those hosts either: the failures are the targets', not the solver's.
  const claims = await claimsBy(only.solverId);
  expect(claims).toHaveLength(3);
  for (const claim of claims) expect(claim).toMatchObject({ error_type: 'host_not_found', verdict: 'target', reason: 'service_check' });
  const reputation = await reputationOf(only.solverId, 'page_snapshot');
  expect(reputation).toMatchObject({ failures: 0, client_work: true });
  expect(reputation.score).toBeGreaterThanOrEqual(MIN_SCORE);

  // Every client, the attacker included, is still served.
  const client = await registerAccount(stack.url, '100');
  const snapped = await api(stack.url, 'POST', '/v1/snapshot', { body: { url: `${siteUrl}/tides` }, headers: client.auth });
  expect(snapped.status).toBe(200);
  expect(clientFrames(only)).toHaveLength(4);
  // Failed tasks cost the attacker nothing, but its rate limit: three tasks' worth of requests.
  expect(await getBalance(stack.db, attacker.account_id)).toMatchObject({ available_points: '100', held_points: '0' });
  const limit = await api(stack.url, 'GET', '/v1/balance', { headers: attacker.auth });
  expect(Number(limit.headers.get('x-ratelimit-remaining'))).toBeLessThanOrEqual(RATE_LIMIT - 4 - 3 * TARGET_FAILURE_COST);
  await audited();
});

test.each(['host_not_found', 'connection_refused', 'unsupported_content', 'response_too_large'])(
  'a solver that claims the target failed (%s) to dodge work gains nothing: its claims count as failures, and the client is answered by another solver',
  async (claimed) => {
    // The cheat undercuts the honest solver, so it is offered every task first.
    const cheat = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: claimsTargetFailed(claimed) });
    const honest = await startSolver({ taskTypes: ['proxy_fetch'], price: '2', behaviour: honestFetch });
    const client = await registerAccount(stack.url, '100');
    for (let i = 0; i < 4; i++) {
      const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${siteUrl}/tides?i=${i}` }, headers: client.auth });
      expect(fetched.status).toBe(200);
      expect(fetched.json.content).toContain('The moon pulls the sea');
    }
    // Its first two claims: nothing corroborated them, and the honest solver then answered the task.
    expect(clientFrames(cheat)).toHaveLength(2);
    expect(clientFrames(honest)).toHaveLength(4);
    expect((await claimsBy(cheat.solverId)).filter((claim) => !['platform_task', 'canary_name'].includes(claim.reason))).toEqual([
      expect.objectContaining({ error_type: claimed, verdict: 'contradicted', reason: 'answered_by_another' }),
      expect.objectContaining({ error_type: claimed, verdict: 'contradicted', reason: 'answered_by_another' }),
    ]);
    // Two failures, as if it had failed plainly: below the threshold, no client work (its recovery
    // canary, claimed failed too, counts a third).
    const reputation = await reputationOf(cheat.solverId, 'proxy_fetch');
    expect(reputation.failures).toBeGreaterThanOrEqual(2 - 1e-3);
    expect(reputation.score).toBeLessThan(MIN_SCORE);
    expect(reputation.client_work).toBe(false);
    expect(await reputationOf(honest.solverId, 'proxy_fetch')).toMatchObject({ failures: 0 });
    // The client paid the honest solver's price for each; the cheat earned nothing.
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ lifetime_spent_points: '8', held_points: '0' });
    expect(await getBalance(stack.db, cheat.solverId)).toMatchObject({ lifetime_earned_points: '0' });
    await audited();
  },
);

test('a cheat alone claiming the target failed is held to it: the service can resolve the host, so the claim counts, and it is excluded', async () => {
  const cheat = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: claimsTargetFailed('host_not_found') });
  const client = await registerAccount(stack.url, '100');
  for (let i = 0; i < 2; i++) {
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${siteUrl}/tides?alone=${i}` }, headers: client.auth });
    expect(fetched.status).toBe(502);
  }
  expect((await claimsBy(cheat.solverId)).slice(0, 2)).toEqual([
    expect.objectContaining({ verdict: 'solver', reason: 'uncorroborated' }),
    expect.objectContaining({ verdict: 'solver', reason: 'uncorroborated' }),
  ]);
  expect((await reputationOf(cheat.solverId, 'proxy_fetch')).score).toBeLessThan(MIN_SCORE);
  const refused = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${siteUrl}/tides?alone=2` }, headers: client.auth });
  expect(refused.status).toBe(503);
  expect(clientFrames(cheat)).toHaveLength(2);
});

test("a target that fails for two solvers is the target's fault: the first claim is taken back, and the client's rate limit is charged", async () => {
  const first = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: honestFetch });
  const second = await startSolver({ taskTypes: ['proxy_fetch'], price: '2', behaviour: honestFetch });
  const client = await registerAccount(stack.url, '100');
  const origin = await refusingOrigin();
  await earlyInMinute();
  const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${origin}/` }, headers: client.auth });
  expect(fetched.status).toBe(502);
  expect(fetched.json.error).toMatchObject({ type: 'solver_failed', solver_error_type: 'connection_refused' });
  // The service does not connect to targets itself: the first claim counted until the second solver's corroborated it.
  expect(await claimsOn(origin)).toEqual([
    expect.objectContaining({ solver_id: first.solverId, error_type: 'connection_refused', verdict: 'target', reason: 'corroborated' }),
    expect.objectContaining({ solver_id: second.solverId, error_type: 'connection_refused', verdict: 'target', reason: 'corroborated' }),
  ]);
  for (const solver of [first, second]) {
    const reputation = await reputationOf(solver.solverId, 'proxy_fetch');
    expect(reputation.failures).toBeCloseTo(0, 6);
    expect(reputation.client_work).toBe(true);
  }
  // A later claim on that origin is corroborated at once: the task ends without a second opinion.
  const again = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${origin}/again` }, headers: client.auth });
  expect(again.status).toBe(502);
  expect(clientFrames(first)).toHaveLength(2);
  expect(clientFrames(second)).toHaveLength(1);
  const limit = await api(stack.url, 'GET', '/v1/balance', { headers: client.auth });
  expect(Number(limit.headers.get('x-ratelimit-remaining'))).toBeLessThanOrEqual(RATE_LIMIT - 3 - 2 * TARGET_FAILURE_COST);
  expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '100', held_points: '0' });
  await audited();
});

test('a client whose tasks keep failing on bad targets is limited (429 with Retry-After), not the solver, and other clients are served', async () => {
  const solver = await startSolver({ taskTypes: ['page_snapshot'], price: '1', behaviour: honestFetch });
  const attacker = await registerAccount(stack.url, '100');
  let limited: Awaited<ReturnType<typeof api>> | undefined;
  let failed = 0;
  await earlyInMinute();
  for (let i = 0; i < 30 && !limited; i++) {
    const snapped = await api(stack.url, 'POST', '/v1/snapshot', { body: { url: nowhere(100 + i) }, headers: attacker.auth });
    if (snapped.status === 429) limited = snapped;
    else {
      expect(snapped.status).toBe(502);
      failed += 1;
    }
  }
  expect(limited).toBeDefined();
  expect(limited!.json.error.type).toBe('rate_limited');
  expect(Number(limited!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
  // A minute's worth: each failed task counted its request and ten more.
  expect(failed).toBeLessThanOrEqual(10);
  const reputation = await reputationOf(solver.solverId, 'page_snapshot');
  expect(reputation).toMatchObject({ failures: 0, client_work: true });
  const client = await registerAccount(stack.url, '100');
  expect((await api(stack.url, 'POST', '/v1/snapshot', { body: { url: `${siteUrl}/tides` }, headers: client.auth })).status).toBe(200);
  await audited();
});

test('a solver excluded by its score is sent a recovery canary, passes it, and gets client work again', async () => {
  let clientTasks = 0;
  // Fails its first two client tasks, then works (as after a bad upstream recovers); canaries are answered honestly.
  const solver = await startSolver({
    taskTypes: ['proxy_fetch'],
    price: '1',
    behaviour: async (frame, self) => {
      if (!isCanary(frame) && ++clientTasks <= 2) {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        self.send({ type: 'error', attempt_id: frame.attempt_id, error: { type: 'upstream_failed', message: 'scripted failure' }, retryable: true });
        return;
      }
      await honestFetch(frame, self);
    },
  });
  const client = await registerAccount(stack.url, '100');
  for (let i = 0; i < 2; i++) {
    expect((await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${siteUrl}/tides?r=${i}` }, headers: client.auth })).status).toBe(502);
  }
  // Below the threshold at once (1/4); the failure that took it there made it due a recovery canary.
  const canary = await waitFor(() => solver.received.find(isCanary), 45_000);
  expect(canary.task_type).toBe('proxy_fetch');
  const reputation = await waitFor(async () => {
    const row = await reputationOf(solver.solverId, 'proxy_fetch');
    return row.canary_passes === 1 ? row : null;
  }, 45_000);
  expect(reputation.score).toBeGreaterThanOrEqual(MIN_SCORE);
  expect(reputation.client_work).toBe(true);
  const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${siteUrl}/tides?r=2` }, headers: client.auth });
  expect(fetched.status).toBe(200);
  expect(clientFrames(solver)).toHaveLength(3);
  await audited();
});

/**
 * An honest fetcher as the bundled solver behaves: a body that is not text is `unsupported_content`, and a
 * target that does not answer within a second is `timeout` (retryable: another solver may do better).
 */
const fetchesText: Script = async (frame, self) => {
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  const url = String(frame.payload.url);
  const fail = (type: string, retryable: boolean) => self.send({ type: 'error', attempt_id: frame.attempt_id, error: { type, message: `${type}: ${url}` }, retryable });
  let response: Response;
  try {
    response = await fetch(url, { signal: AbortSignal.timeout(1000) });
  } catch {
    return fail('timeout', true);
  }
  if (!String(response.headers.get('content-type')).startsWith('text/')) return fail('unsupported_content', false);
  await honestFetch(frame, self);
};

describe('failures the client\'s own request causes', () => {
  test('a client that fetches a binary file 16 times knocks nobody out: the verifier\'s claims are its own proof, the client pays on its rate limit and is refused, other clients are served', async () => {
    // The bundled solver's role: the only fetcher, marked verifier.
    const verifier = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: fetchesText });
    const marked = await api(stack.url, 'POST', `/v1/admin/solvers/${verifier.solverId}/verifier`, { body: { verifier: true }, headers: admin });
    expect(marked.status).toBe(200);
    const attacker = await registerAccount(stack.url, '100');
    await earlyInMinute();
    const statuses: number[] = [];
    for (let i = 0; i < 16; i++) {
      const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${siteUrl}/binary?i=${i}` }, headers: attacker.auth });
      statuses.push(fetched.status);
      if (fetched.status === 502) expect(fetched.json.error).toMatchObject({ solver_error_type: 'unsupported_content' });
    }
    // Each failed task costs its request and a tenth of the minute's limit: refused (429) after ten at most.
    const failed = statuses.filter((status) => status === 502).length;
    expect(failed).toBeLessThanOrEqual(10);
    expect(statuses.filter((status) => status === 429).length).toBe(16 - failed);
    const claims = await claimsBy(verifier.solverId);
    expect(claims).toHaveLength(failed);
    for (const claim of claims) expect(claim).toMatchObject({ error_type: 'unsupported_content', verdict: 'target', reason: 'verifier' });
    expect(claims[0]!.target).toBe(`${siteUrl}/binary?i=0`);
    const reputation = await reputationOf(verifier.solverId, 'proxy_fetch');
    expect(reputation).toMatchObject({ failures: 0, client_work: true });
    const client = await registerAccount(stack.url, '100');
    expect((await api(stack.url, 'POST', '/v1/fetch', { body: { url: `${siteUrl}/tides` }, headers: client.auth })).status).toBe(200);
    await audited();
  });

  test('two honest solvers that both find a body binary corroborate each other: neither takes a failure', async () => {
    const first = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: fetchesText });
    const second = await startSolver({ taskTypes: ['proxy_fetch'], price: '2', behaviour: fetchesText });
    const client = await registerAccount(stack.url, '100');
    const url = `${siteUrl}/binary/two`;
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url }, headers: client.auth });
    expect(fetched.status).toBe(502);
    expect(await claimsOn(url)).toEqual([
      expect.objectContaining({ solver_id: first.solverId, error_type: 'unsupported_content', verdict: 'target', reason: 'corroborated' }),
      expect.objectContaining({ solver_id: second.solverId, error_type: 'unsupported_content', verdict: 'target', reason: 'corroborated' }),
    ]);
    for (const solver of [first, second]) expect((await reputationOf(solver.solverId, 'proxy_fetch')).failures).toBeCloseTo(0, 6);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '100', held_points: '0' });
    await audited();
  });

  test('a tarpit that stalls every solver: the first one\'s timeout is corroborated by the next one\'s, and neither takes a failure', async () => {
    const first = await startSolver({ taskTypes: ['proxy_fetch'], price: '1', behaviour: fetchesText });
    const second = await startSolver({ taskTypes: ['proxy_fetch'], price: '2', behaviour: fetchesText });
    const client = await registerAccount(stack.url, '100');
    const url = `${siteUrl}/tarpit/one`;
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { body: { url }, headers: client.auth });
    expect(fetched.status).toBe(502);
    expect(fetched.json.error).toMatchObject({ solver_error_type: 'timeout' });
    expect(await claimsOn(url)).toEqual([
      expect.objectContaining({ solver_id: first.solverId, error_type: 'timeout', verdict: 'target', reason: 'corroborated' }),
      expect.objectContaining({ solver_id: second.solverId, error_type: 'timeout', verdict: 'target', reason: 'corroborated' }),
    ]);
    for (const solver of [first, second]) expect((await reputationOf(solver.solverId, 'proxy_fetch')).failures).toBeCloseTo(0, 6);
    await audited();
  });
});
