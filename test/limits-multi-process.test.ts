import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { waitFor } from './support/fake-solver';
import { spawnNode, type NodeProcess } from './support/processes';
import { ADMIN_KEY, api, QUIET_TRUST_ENV, registerAccount, testEndpoints } from './support/stack';

const LIMIT = 5;
const admin = { 'X-Admin-API-Key': ADMIN_KEY };

/** Rate limits and domain-policy reloads across two separate API processes sharing one PostgreSQL. */
describe('limits and policy shared by API processes', () => {
  const endpoints = testEndpoints();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'limits-'));
  const policyFile = path.join(dir, 'policy.json');
  const queue = `limits-${crypto.randomBytes(4).toString('hex')}`;
  const env = {
    DATABASE_URL: endpoints.databaseUrl,
    TEMPORAL_ADDRESS: endpoints.temporalAddress,
    TEMPORAL_TASK_QUEUE: queue,
    ADMIN_API_KEY: ADMIN_KEY,
    HOST: '127.0.0.1',
    LOCAL_SOLVER: 'off',
    ...QUIET_TRUST_ENV,
    RATE_LIMIT_PER_MINUTE: String(LIMIT),
    ALLOW_PRIVATE_NETWORKS: 'false',
    DOMAIN_POLICY_FILE: policyFile,
  };
  let nodeA: NodeProcess;
  let nodeB: NodeProcess;
  const urlOf = (node: NodeProcess) => {
    const line = node.output.join('').split('\n').find((entry) => entry.includes('api listening'));
    return JSON.parse(line!).url as string;
  };
  const urlA = () => urlOf(nodeA);
  const urlB = () => urlOf(nodeB);

  beforeAll(async () => {
    fs.writeFileSync(policyFile, JSON.stringify({ deny: [] }));
    [nodeA, nodeB] = await Promise.all([
      spawnNode('api', { ...env, PORT: '0', NODE_ID: `${queue}-a` }, /api listening/),
      spawnNode('api', { ...env, PORT: '0', NODE_ID: `${queue}-b` }, /api listening/),
    ]);
  }, 120_000);

  afterAll(async () => {
    await Promise.all([nodeA?.kill(), nodeB?.kill()]);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const reset = (accountId: string, base = urlA()) => api(base, 'POST', '/v1/admin/reset-rate-limit', { headers: admin, body: { account_id: accountId } });

  /**
   * Runs `attempt` inside one rate-limit window: windows are whole minutes of the database clock, so a
   * run that straddles a minute boundary (its responses name two reset times) is repeated.
   */
  async function withinOneWindow<T>(accountId: string, attempt: () => Promise<{ resets: string[]; value: T }>): Promise<T> {
    for (let tries = 0; tries < 3; tries++) {
      const secondOfMinute = new Date().getSeconds();
      if (secondOfMinute >= 50) await new Promise((resolve) => setTimeout(resolve, (61 - secondOfMinute) * 1000));
      await reset(accountId);
      const { resets, value } = await attempt();
      if (new Set(resets).size === 1) return value;
    }
    throw new Error('could not run inside one rate-limit window');
  }

  test('the per-minute limit is one counter for both nodes, with the rate-limit headers on every response', async () => {
    const client = await registerAccount(urlA());
    const responses = await withinOneWindow(client.account_id, async () => {
      const sequence = [];
      for (let i = 0; i < LIMIT + 2; i++) sequence.push(await api(i % 2 ? urlB() : urlA(), 'GET', '/v1/balance', { headers: client.auth }));
      return { resets: sequence.map((response) => response.headers.get('x-ratelimit-reset')!), value: sequence };
    });
    expect(responses.map((response) => response.status)).toEqual([200, 200, 200, 200, 200, 429, 429]);
    expect(responses.map((response) => response.headers.get('x-ratelimit-remaining'))).toEqual(['4', '3', '2', '1', '0', '0', '0']);
    for (const response of responses) expect(response.headers.get('x-ratelimit-limit')).toBe(String(LIMIT));
    const reset = Number(responses[0]!.headers.get('x-ratelimit-reset'));
    expect(reset % 60).toBe(0);
    expect(reset).toBeGreaterThan(Date.now() / 1000 - 5);
    const refused = responses[5]!;
    expect(refused.json).toEqual({ error: { type: 'rate_limited', message: expect.any(String), retry_after_seconds: expect.any(Number) } });
    const retryAfter = Number(refused.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(60);
  });

  test('concurrent requests on both nodes are counted exactly: the limit admits exactly LIMIT of them', async () => {
    const client = await registerAccount(urlB());
    const statuses = await withinOneWindow(client.account_id, async () => {
      const burst = await Promise.all(Array.from({ length: 12 }, (_, i) => api(i % 2 ? urlB() : urlA(), 'GET', '/v1/profile', { headers: client.auth })));
      return { resets: burst.map((response) => response.headers.get('x-ratelimit-reset')!), value: burst.map((response) => response.status) };
    });
    expect(statuses.filter((status) => status === 200)).toHaveLength(LIMIT);
    expect(statuses.filter((status) => status === 429)).toHaveLength(12 - LIMIT);
  });

  test('authenticated errors carry the headers; unauthenticated responses do not', async () => {
    const client = await registerAccount(urlA());
    await reset(client.account_id);
    const missing = await api(urlB(), 'GET', '/v1/tasks/task_nope', { headers: client.auth });
    expect(missing.status).toBe(404);
    expect(missing.headers.get('x-ratelimit-limit')).toBe(String(LIMIT));
    const invalid = await api(urlB(), 'POST', '/v1/search', { headers: client.auth, body: { query: '' } });
    expect(invalid.status).toBe(422);
    expect(invalid.headers.get('x-ratelimit-remaining')).not.toBeNull();
    const unknownKey = await api(urlA(), 'GET', '/v1/balance', { headers: { Authorization: 'Bearer tmk_not-a-key' } });
    expect(unknownKey.status).toBe(401);
    expect(unknownKey.json.error.type).toBe('invalid_api_key');
    for (const response of [await api(urlA(), 'GET', '/health'), await api(urlA(), 'GET', '/v1/balance'), unknownKey, await api(urlA(), 'GET', '/v1/models')]) {
      expect(response.headers.get('x-ratelimit-limit')).toBeNull();
    }
  });

  test('simulate-rate-limit on one node refuses after N more requests on any node, until reset-rate-limit on the other', async () => {
    const client = await registerAccount(urlA());
    await reset(client.account_id);
    const armed = await api(urlA(), 'POST', '/v1/admin/simulate-rate-limit', { headers: admin, body: { account_id: client.account_id, trigger_after_n_requests: 2 } });
    expect(armed.status).toBe(200);
    const statuses = [];
    for (const base of [urlB(), urlA(), urlB(), urlA()]) statuses.push((await api(base, 'GET', '/v1/balance', { headers: client.auth })).status);
    expect(statuses).toEqual([200, 200, 429, 429]);
    const refused = await api(urlB(), 'GET', '/v1/balance', { headers: client.auth });
    expect(refused.json.error.type).toBe('rate_limited');
    expect(refused.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(refused.headers.get('x-ratelimit-remaining')).toBe('0');

    const cleared = await reset(client.account_id, urlB());
    expect(cleared.status).toBe(200);
    expect((await api(urlA(), 'GET', '/v1/balance', { headers: client.auth })).status).toBe(200);

    await api(urlB(), 'POST', '/v1/admin/simulate-rate-limit', { headers: admin, body: { account_id: client.account_id, trigger_after_n_requests: 0 } });
    expect((await api(urlA(), 'GET', '/v1/balance', { headers: client.auth })).status).toBe(429);
    await reset(client.account_id);
    expect((await api(urlB(), 'GET', '/v1/balance', { headers: client.auth })).status).toBe(200);
  });

  test('the rate-limit admin operations: unknown account is 404, bad bodies are 422, admin key required', async () => {
    for (const route of ['/v1/admin/simulate-rate-limit', '/v1/admin/reset-rate-limit']) {
      const unknown = await api(urlA(), 'POST', route, { headers: admin, body: { account_id: 'acct_nope', trigger_after_n_requests: 1 } });
      expect(unknown.status).toBe(404);
      expect(unknown.json.error.type).toBe('account_not_found');
      expect((await api(urlA(), 'POST', route, { body: { account_id: 'acct_nope', trigger_after_n_requests: 1 } })).status).toBe(401);
    }
    const negative = await api(urlA(), 'POST', '/v1/admin/simulate-rate-limit', { headers: admin, body: { account_id: 'a', trigger_after_n_requests: -1 } });
    expect(negative.status).toBe(422);
    expect(negative.json.detail[0]).toMatchObject({ type: 'greater_than_equal', loc: ['body', 'trigger_after_n_requests'] });
    const missing = await api(urlA(), 'POST', '/v1/admin/reset-rate-limit', { headers: admin, body: {} });
    expect(missing.json.detail[0]).toMatchObject({ type: 'missing', loc: ['body', 'account_id'] });
  });

  test('a domain-policy reload on node A changes what node B refuses, without a restart', async () => {
    const client = await registerAccount(urlA(), '50');
    const target = { url: 'https://reloaded.example.com/page' };
    const before = await api(urlB(), 'POST', '/v1/fetch', { headers: client.auth, body: target });
    // Admitted by the policy (no solver is online for it here, so 503 rather than a result).
    expect(before.json?.error?.type).not.toBe('domain_blocked');
    const privateTarget = await api(urlB(), 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'http://127.0.0.1:1/' } });
    expect(privateTarget.json.error.type).toBe('domain_blocked');

    fs.writeFileSync(policyFile, JSON.stringify({ deny: ['*.example.com'], allow: ['open.example.com'] }));
    const reloaded = await api(urlA(), 'POST', '/v1/admin/domain-policy/reload', { headers: admin });
    expect(reloaded.status).toBe(200);
    expect(reloaded.json).toMatchObject({ reloaded: true, deny: ['*.example.com'], allow: ['open.example.com'] });
    // NOTIFY reaches node B at once; the bound is generous only because the machine may be busy.
    const refused = await waitFor(async () => {
      const response = await api(urlB(), 'POST', '/v1/fetch', { headers: client.auth, body: target });
      return response.status === 403 ? response : undefined;
    }, 5_000, 50);
    expect(refused.json.error).toMatchObject({ type: 'domain_blocked', url: target.url });
    expect((await api(urlA(), 'POST', '/v1/fetch', { headers: client.auth, body: target })).status).toBe(403);
    const allowed = await api(urlB(), 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://open.example.com/' } });
    expect(allowed.json?.error?.type).not.toBe('domain_blocked');

    // The private-network switch is part of the file, and follows reloads too.
    fs.writeFileSync(policyFile, JSON.stringify({ allow_private_networks: true }));
    expect((await api(urlB(), 'POST', '/v1/admin/domain-policy/reload', { headers: admin })).status).toBe(200);
    await waitFor(async () => {
      const response = await api(urlA(), 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'http://127.0.0.1:1/' } });
      return response.json?.error?.type !== 'domain_blocked';
    }, 5_000, 50);
    expect((await api(urlA(), 'POST', '/v1/fetch', { headers: client.auth, body: target })).json?.error?.type).not.toBe('domain_blocked');
  });
});
