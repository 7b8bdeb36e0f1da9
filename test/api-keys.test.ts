import crypto from 'node:crypto';
import { auditLedger, getBalance } from '../src/db/ledger';
import { finishTask } from '../src/db/tasks';
import { taskFailure } from '../src/tasks/lifecycle';
import { spawnNode, type NodeProcess } from './support/processes';
import { ADMIN_KEY, api, registerAccount, startTestStack, testEndpoints, type TestStack } from './support/stack';

/** Named API keys: created, listed without their secret, revoked on every API process at once. */
describe('API keys', () => {
  let stack: TestStack;
  let other: NodeProcess;
  let otherUrl: string;

  beforeAll(async () => {
    const endpoints = testEndpoints();
    const queue = `keys-${crypto.randomBytes(4).toString('hex')}`;
    [stack, other] = await Promise.all([
      startTestStack({ worker: false }),
      spawnNode(
        'api',
        { DATABASE_URL: endpoints.databaseUrl, TEMPORAL_ADDRESS: endpoints.temporalAddress, TEMPORAL_TASK_QUEUE: queue, ADMIN_API_KEY: ADMIN_KEY, HOST: '127.0.0.1', LOCAL_SOLVER: 'off', PORT: '0', NODE_ID: `${queue}-b` },
        /api listening/,
      ),
    ]);
    const line = other.output.join('').split('\n').find((entry) => entry.includes('api listening'));
    otherUrl = JSON.parse(line!).url;
  }, 120_000);
  afterAll(async () => {
    await other?.kill();
    await stack?.close();
  });

  const bearer = (key: string) => ({ Authorization: `Bearer ${key}` });

  test('a named key is created once with its secret, listed with prefix, name and last use, and revoked at once on another API process', async () => {
    const client = await registerAccount(stack.url);
    const created = await api(stack.url, 'POST', '/v1/account/keys', { headers: client.auth, body: { name: 'ci' } });
    expect(created.status).toBe(200);
    expect(created.json).toMatchObject({ key_id: expect.stringMatching(/^key_/), name: 'ci', api_key: expect.stringMatching(/^tmk_/), last_used_at: null, revoked_at: null });
    const ci = created.json;
    expect(ci.prefix).toBe(ci.api_key.slice(0, 8));

    // Both keys work on both processes; a request marks its key used.
    for (const base of [stack.url, otherUrl]) expect((await api(base, 'GET', '/v1/balance', { headers: bearer(ci.api_key) })).status).toBe(200);
    const listed = await api(stack.url, 'GET', '/v1/account/keys', { headers: client.auth });
    expect(listed.json.data).toHaveLength(2);
    expect(listed.text).not.toContain(ci.api_key);
    expect(listed.text).not.toContain(client.api_key);
    expect(listed.json.data.find((key: { key_id: string }) => key.key_id === ci.key_id)).toMatchObject({ name: 'ci', prefix: ci.prefix, last_used_at: expect.any(String), revoked_at: null });
    expect(listed.json.data.find((key: { key_id: string }) => key.key_id !== ci.key_id)).toMatchObject({ name: 'default', prefix: client.api_key.slice(0, 8) });

    const revoked = await api(stack.url, 'DELETE', `/v1/account/keys/${ci.key_id}`, { headers: client.auth });
    expect(revoked.status).toBe(200);
    expect(revoked.json.revoked_at).toEqual(expect.any(String));
    // The other process reads the key per request: the very next request there is refused.
    const refused = await api(otherUrl, 'GET', '/v1/balance', { headers: bearer(ci.api_key) });
    expect(refused.status).toBe(401);
    expect(refused.json.error.type).toBe('invalid_api_key');
    expect((await api(otherUrl, 'GET', '/v1/balance', { headers: client.auth })).status).toBe(200);

    // Revoking again answers the same revocation.
    const again = await api(otherUrl, 'DELETE', `/v1/account/keys/${ci.key_id}`, { headers: client.auth });
    expect(again.json).toEqual(revoked.json);
  }, 60_000);

  test('the last live key is not revoked without allow_last=true; another account\'s key is 404', async () => {
    const client = await registerAccount(stack.url);
    const stranger = await registerAccount(stack.url);
    const [only] = (await api(stack.url, 'GET', '/v1/account/keys', { headers: client.auth })).json.data;
    const refused = await api(stack.url, 'DELETE', `/v1/account/keys/${only.key_id}`, { headers: client.auth });
    expect(refused.status).toBe(409);
    expect(refused.json.error).toMatchObject({ type: 'last_api_key', key_id: only.key_id });
    expect(refused.json.error.message).toContain('allow_last=true');
    expect((await api(stack.url, 'DELETE', `/v1/account/keys/${only.key_id}`, { headers: stranger.auth })).json.error.type).toBe('api_key_not_found');

    // Two keys revoked at once: one of the two revocations finds the other key gone and refuses.
    const second = (await api(stack.url, 'POST', '/v1/account/keys', { headers: client.auth, body: { name: 'second' } })).json;
    const both = await Promise.all([only.key_id, second.key_id].map((keyId) => api(stack.url, 'DELETE', `/v1/account/keys/${keyId}`, { headers: bearer(second.api_key) })));
    expect(both.map((answer) => answer.status).sort()).toEqual([200, 409]);

    const survivor = both[0].status === 409 ? client.api_key : second.api_key;
    const survivorId = both[0].status === 409 ? only.key_id : second.key_id;
    const forced = await api(stack.url, 'DELETE', `/v1/account/keys/${survivorId}?allow_last=true`, { headers: bearer(survivor) });
    expect(forced.status).toBe(200);
    expect((await api(stack.url, 'GET', '/v1/balance', { headers: bearer(survivor) })).status).toBe(401);
  });

  test('a key\'s spend limit admits exactly the tasks that fit under concurrent requests, refuses the rest with 402, and gets back what settlement returns', async () => {
    const client = await registerAccount(stack.url, '1000');
    const created = await api(stack.url, 'POST', '/v1/account/keys', { headers: client.auth, body: { name: 'capped', spend_limit: { points: '10.5', period: 'total' } } });
    expect(created.json.spend_limit).toEqual({ points: '10.5', period: 'total', spent_points: '0' });
    const capped = bearer(created.json.api_key);
    // No solver is online: each task waits in the queue with its hold of 1.5 points; 7 fit in 10.5.
    const task = { task_type: 'web_search', payload: { query: 'limit' }, max_price_points: '1.5' };
    const answers = await Promise.all(Array.from({ length: 40 }, () => api(stack.url, 'POST', '/v1/tasks', { headers: capped, body: task })));
    const admitted = answers.filter((answer) => answer.status === 200);
    expect(admitted).toHaveLength(7);
    const refused = answers.filter((answer) => answer.status !== 200);
    expect(new Set(refused.map((answer) => `${answer.status} ${answer.json.error.type}`))).toEqual(new Set(['402 key_spend_limit_reached']));
    expect(refused[0].json.error).toMatchObject({ key_id: created.json.key_id, required_points: '1.5', spend_limit: { points: '10.5', period: 'total', spent_points: '10.5' } });
    expect(refused[0].json.error.message).toContain(`PATCH /v1/account/keys/${created.json.key_id}`);
    expect((await getBalance(stack.db, client.account_id))?.held_points).toBe('10.5');
    // The account's other key has no limit.
    expect((await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: task })).status).toBe(200);

    // A released hold is given back to the key: one more task fits.
    await finishTask(stack.db, admitted[0].json.task_id, { failure: taskFailure('task_cancelled', 'Cancelled by the test.') });
    let listed = (await api(stack.url, 'GET', '/v1/account/keys', { headers: client.auth })).json.data.find((key: { key_id: string }) => key.key_id === created.json.key_id);
    expect(listed.spend_limit).toEqual({ points: '10.5', period: 'total', spent_points: '9' });
    const again = await Promise.all(Array.from({ length: 5 }, () => api(stack.url, 'POST', '/v1/tasks', { headers: capped, body: task })));
    expect(again.filter((answer) => answer.status === 200)).toHaveLength(1);

    // Raising the limit (per UTC day now, which starts empty) admits more; removing it admits any.
    const raised = await api(stack.url, 'PATCH', `/v1/account/keys/${created.json.key_id}`, { headers: client.auth, body: { spend_limit: { points: 3, period: 'day' } } });
    expect(raised.json.spend_limit).toEqual({ points: '3', period: 'day', spent_points: '0' });
    const daily = await Promise.all(Array.from({ length: 5 }, () => api(stack.url, 'POST', '/v1/tasks', { headers: capped, body: task })));
    expect(daily.filter((answer) => answer.status === 200)).toHaveLength(2);
    listed = (await api(stack.url, 'PATCH', `/v1/account/keys/${created.json.key_id}`, { headers: client.auth, body: { spend_limit: null, name: 'uncapped' } })).json;
    expect(listed).toMatchObject({ name: 'uncapped', spend_limit: null });
    expect((await api(stack.url, 'POST', '/v1/tasks', { headers: capped, body: task })).status).toBe(200);

    expect((await getBalance(stack.db, client.account_id))?.held_points).toBe(String(1.5 * (7 - 1 + 1 + 1 + 2 + 1)));
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
    const stranger = await registerAccount(stack.url);
    expect((await api(stack.url, 'PATCH', `/v1/account/keys/${created.json.key_id}`, { headers: stranger.auth, body: { name: 'mine' } })).json.error.type).toBe('api_key_not_found');
  }, 60_000);

  test('a key needs a name of 1 to 100 characters', async () => {
    const client = await registerAccount(stack.url);
    const missing = await api(stack.url, 'POST', '/v1/account/keys', { headers: client.auth, body: {} });
    expect(missing.status).toBe(422);
    expect(missing.json.detail).toMatchObject([{ type: 'missing', loc: ['body', 'name'] }]);
  });

  test('a zero written with a sign and no whole part ("-.0") is a limit of 0, as a price of "-.0" is 0', async () => {
    const client = await registerAccount(stack.url);
    const created = await api(stack.url, 'POST', '/v1/account/keys', { headers: client.auth, body: { name: 'zero', spend_limit: { points: '-.0', period: 'day' } } });
    expect(created.status).toBe(200);
    expect(created.json.spend_limit).toEqual({ points: '0', period: 'day', spent_points: '0' });
  });
});
