import crypto from 'node:crypto';
import http from 'node:http';
import WebSocket from 'ws';
import { auditLedger } from '../src/db/ledger';
import { ADMIN_KEY, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * Limits per client address, with the shipped defaults (REGISTER_LIMIT_PER_HOUR 20,
 * UNAUTHENTICATED_LIMIT_PER_MINUTE 60, SOLVER_CONNECT_LIMIT_PER_MINUTE 120), on two API nodes sharing
 * one PostgreSQL. Each test speaks from an address of its own in 127.0.0.0/8, so no other request of the
 * suite counts against it.
 */
describe('limits per client address', () => {
  let stack: TestStack;
  beforeAll(async () => {
    // '' is "not set": the defaults apply, not the open limits every other stack of the suite takes.
    stack = await startTestStack({ apiNodes: 2, worker: false, env: { REGISTER_LIMIT_PER_HOUR: '', UNAUTHENTICATED_LIMIT_PER_MINUTE: '', SOLVER_CONNECT_LIMIT_PER_MINUTE: '' } });
  }, 120_000);
  afterAll(async () => {
    await stack?.close();
  });

  const nodes = () => stack.api.map((node) => node.url);
  const freshAddress = () => `127.${crypto.randomInt(1, 255)}.${crypto.randomInt(0, 256)}.${crypto.randomInt(1, 255)}`;

  /** One HTTP request sent from `localAddress`. */
  function send(base: string, method: string, path: string, options: { localAddress: string; headers?: Record<string, string> }) {
    return new Promise<{ status: number; headers: http.IncomingHttpHeaders; json: any }>((resolve, reject) => {
      const request = http.request(`${base}${path}`, { method, localAddress: options.localAddress, headers: options.headers }, (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          resolve({ status: response.statusCode!, headers: response.headers, json: text ? JSON.parse(text) : undefined });
        });
      });
      request.on('error', reject);
      request.end();
    });
  }

  /** Waits out the last seconds of a minute, so that a burst of one-minute windows fits in one window. */
  async function awayFromMinuteEnd() {
    const second = new Date().getSeconds();
    if (second >= 50) await new Promise((resolve) => setTimeout(resolve, (61 - second) * 1000));
  }

  function expectLimited(answer: { status: number; headers: http.IncomingHttpHeaders; json?: any }, limit: number, windowSeconds: number) {
    expect(answer.status).toBe(429);
    expect(answer.json.error.type).toBe('rate_limited');
    const retryAfter = Number(answer.headers['retry-after']);
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(windowSeconds);
    expect(answer.json.error.retry_after_seconds).toBe(retryAfter);
    expect(answer.headers['x-ratelimit-limit']).toBe(String(limit));
    expect(answer.headers['x-ratelimit-remaining']).toBe('0');
  }

  test('60 registrations at once from one address, on two nodes: exactly 20 accounts, the rest 429 with Retry-After; another address still registers', async () => {
    const address = freshAddress();
    const answers = await Promise.all(Array.from({ length: 60 }, (_, i) => send(nodes()[i % 2]!, 'POST', '/v1/register', { localAddress: address })));
    expect(answers.filter((answer) => answer.status === 200)).toHaveLength(20);
    for (const answer of answers.filter((answer) => answer.status !== 200)) expectLimited(answer, 20, 3600);
    expect((await send(nodes()[1]!, 'POST', '/v1/register', { localAddress: freshAddress() })).status).toBe(200);
  }, 60_000);

  test('a forged X-Forwarded-For does not buy a fresh counter: without TRUST_PROXY the socket\'s address is counted', async () => {
    const address = freshAddress();
    const statuses: number[] = [];
    for (let i = 0; i < 24; i++) {
      const forged = `198.51.100.${i + 1}`;
      statuses.push((await send(nodes()[i % 2]!, 'POST', '/v1/register', { localAddress: address, headers: { 'X-Forwarded-For': forged, 'X-Real-IP': forged, Forwarded: `for=${forged}` } })).status);
    }
    expect(statuses.slice(0, 20)).toEqual(Array(20).fill(200));
    expect(statuses.slice(20)).toEqual(Array(4).fill(429));
  }, 60_000);

  test('requests with a missing or unknown key count against their address: 429 after 60 a minute on any node, while a valid key from there still works', async () => {
    const client = await registerAccount(stack.url);
    const address = freshAddress();
    await awayFromMinuteEnd();
    const tries: Record<string, string>[] = [{ Authorization: 'Bearer tmk_guess' }, {}, { 'X-Admin-API-Key': 'guess' }];
    const answers = [];
    for (let i = 0; i < 66; i++) {
      const path = i % 3 === 2 ? '/v1/admin/status' : '/v1/balance';
      answers.push(await send(nodes()[i % 2]!, 'GET', path, { localAddress: address, headers: tries[i % 3] }));
    }
    expect(answers.slice(0, 60).map((answer) => answer.status)).toEqual(Array(60).fill(401));
    for (const answer of answers.slice(60)) expectLimited(answer, 60, 60);
    // A real key is counted against its account, not the address.
    const valid = await send(nodes()[0]!, 'GET', '/v1/balance', { localAddress: address, headers: client.auth });
    expect(valid.status).toBe(200);
    expect(valid.headers['x-ratelimit-limit']).toBe(String(stack.config.rateLimitPerMinute));
    expect(await send(nodes()[1]!, 'GET', '/v1/balance', { localAddress: freshAddress(), headers: { Authorization: 'Bearer tmk_guess' } })).toMatchObject({ status: 401 });
  }, 60_000);

  test('solver socket upgrades count against their address: 429 with Retry-After after 120 a minute, before the key is read', async () => {
    const solver = await registerAccount(stack.url);
    const address = freshAddress();
    await awayFromMinuteEnd();
    const upgrade = (base: string, key: string) =>
      new Promise<{ status: number; headers: http.IncomingHttpHeaders; json?: any }>((resolve) => {
        const socket = new WebSocket(`${base.replace(/^http/, 'ws')}/v1/solver/connect`, { localAddress: address, headers: { Authorization: `Bearer ${key}` } });
        socket.once('open', () => {
          socket.close();
          resolve({ status: 101, headers: {} });
        });
        socket.once('unexpected-response', (_request, response) => {
          const chunks: Buffer[] = [];
          response.on('data', (chunk: Buffer) => chunks.push(chunk));
          response.on('end', () => resolve({ status: response.statusCode!, headers: response.headers, json: JSON.parse(Buffer.concat(chunks).toString()) }));
        });
      });
    const answers = [];
    // Mostly guessed keys (refused after the count), and a real one now and then.
    for (let i = 0; i < 122; i++) answers.push(await upgrade(nodes()[i % 2]!, i % 40 === 0 ? solver.api_key : 'tmk_guess'));
    expect(answers.slice(0, 120).map((answer) => answer.status)).toEqual(Array.from({ length: 120 }, (_, i) => (i % 40 === 0 ? 101 : 401)));
    for (const answer of answers.slice(120)) expectLimited(answer, 120, 60);
    expect((await upgrade(nodes()[0]!, solver.api_key)).status).toBe(429);
  }, 120_000);

  test('the ledger is exact after the bursts', async () => {
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  });

  test('the admin key still works from an address over its limit of failed attempts', async () => {
    const address = freshAddress();
    await awayFromMinuteEnd();
    for (let i = 0; i < 61; i++) await send(nodes()[i % 2]!, 'GET', '/v1/admin/status', { localAddress: address, headers: { 'X-Admin-API-Key': 'guess' } });
    expect((await send(nodes()[0]!, 'GET', '/v1/admin/status', { localAddress: address, headers: { 'X-Admin-API-Key': ADMIN_KEY } })).status).toBe(200);
  }, 60_000);
});
