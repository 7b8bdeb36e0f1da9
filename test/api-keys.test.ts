import crypto from 'node:crypto';
import { auditLedger, getBalance } from '../src/db/ledger';
import { finishTask } from '../src/tasks/finish';
import { taskFailure } from '../src/contract/lifecycle';
import { FakeSolver, waitFor } from './support/fake-solver';
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
      startTestStack(),
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
    await finishTask(stack.db, stack.config.trust, admitted[0].json.task_id, { failure: taskFailure('task_cancelled', 'Cancelled by the test.'), feePercent: '0' });
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

  test('a restricted key cannot lift its limit, mint keys, list them or revoke the owner\'s: the attack sequence of issue 39 is refused at every step', async () => {
    const owner = await registerAccount(stack.url, '100');
    const created = await api(stack.url, 'POST', '/v1/account/keys', { headers: owner.auth, body: { name: 'intern', spend_limit: { points: '3', period: 'total' } } });
    expect(created.json).toMatchObject({ restricted: true, spend_limit: { points: '3', period: 'total', spent_points: '0' } });
    const intern = bearer(created.json.api_key);
    const [ownerKey] = (await api(stack.url, 'GET', '/v1/account/keys', { headers: owner.auth })).json.data.filter((key: { name: string }) => key.name === 'default');
    expect(ownerKey.restricted).toBe(false);

    const expectRestricted = (answer: Awaited<ReturnType<typeof api>>) => {
      expect(answer.status).toBe(403);
      expect(answer.json.error).toMatchObject({ type: 'restricted_api_key', key_id: created.json.key_id });
    };
    // 1. Lift its own limit; 2. mint an unlimited key; 3. list the keys to find the others; 4. revoke the owner's.
    expectRestricted(await api(otherUrl, 'PATCH', `/v1/account/keys/${created.json.key_id}`, { headers: intern, body: { spend_limit: null } }));
    expectRestricted(await api(otherUrl, 'POST', '/v1/account/keys', { headers: intern, body: { name: 'unlimited' } }));
    expectRestricted(await api(otherUrl, 'GET', '/v1/account/keys', { headers: intern }));
    expectRestricted(await api(otherUrl, 'DELETE', `/v1/account/keys/${ownerKey.key_id}?allow_last=true`, { headers: intern }));

    // Nothing changed: the owner's key works, the account has its two keys, and the limit still holds.
    const keys = (await api(stack.url, 'GET', '/v1/account/keys', { headers: owner.auth })).json.data;
    expect(keys.map((key: { revoked_at: string | null }) => key.revoked_at)).toEqual([null, null]);
    expect(keys.find((key: { key_id: string }) => key.key_id === created.json.key_id).spend_limit.points).toBe('3');
    const task = { task_type: 'web_search', payload: { query: 'restricted' }, max_price_points: '2' };
    expect((await api(stack.url, 'POST', '/v1/tasks', { headers: intern, body: task })).status).toBe(200);
    expect((await api(stack.url, 'POST', '/v1/tasks', { headers: intern, body: task })).json.error.type).toBe('key_spend_limit_reached');

    // The owner's key is the last unrestricted one: revoking it would leave nobody to manage keys.
    const last = await api(stack.url, 'DELETE', `/v1/account/keys/${ownerKey.key_id}`, { headers: owner.auth });
    expect(last.status).toBe(409);
    expect(last.json.error).toMatchObject({ type: 'last_api_key', key_id: ownerKey.key_id });
    expect(last.json.error.message).toContain('unrestricted');

    // A restricted key may give itself up.
    const gaveUp = await api(stack.url, 'DELETE', `/v1/account/keys/${created.json.key_id}?allow_last=true`, { headers: intern });
    expect(gaveUp.status).toBe(200);
    expect((await api(stack.url, 'GET', '/v1/balance', { headers: owner.auth })).status).toBe(200);
    expect(await getBalance(stack.db, owner.account_id)).toMatchObject({ available_points: '98', held_points: '2' });
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  });

  test('restricted is asked for by name too, and a key with a limit made unrestricted on purpose manages keys', async () => {
    const owner = await registerAccount(stack.url);
    const marked = (await api(stack.url, 'POST', '/v1/account/keys', { headers: owner.auth, body: { name: 'ci', restricted: true } })).json;
    expect(marked).toMatchObject({ restricted: true, spend_limit: null });
    expect((await api(stack.url, 'POST', '/v1/account/keys', { headers: bearer(marked.api_key), body: { name: 'more' } })).json.error.type).toBe('restricted_api_key');
    const budget = (await api(stack.url, 'POST', '/v1/account/keys', { headers: owner.auth, body: { name: 'budget', restricted: false, spend_limit: { points: '5', period: 'day' } } })).json;
    expect(budget).toMatchObject({ restricted: false, spend_limit: { points: '5' } });
    expect((await api(stack.url, 'GET', '/v1/account/keys', { headers: bearer(budget.api_key) })).json.data).toHaveLength(3);
    const wrong = await api(stack.url, 'POST', '/v1/account/keys', { headers: owner.auth, body: { name: 'x', restricted: 'yes' } });
    expect(wrong.status).toBe(422);
  });

  test('revoking a key closes the solver socket opened with it on another API process at once; the solver gets no task after', async () => {
    const solverAccount = await registerAccount(stack.url);
    const newKey = async (name: string) => (await api(stack.url, 'POST', '/v1/account/keys', { headers: solverAccount.auth, body: { name } })).json;
    const [spare, socketKey] = [await newKey('spare'), await newKey('socket')];
    const solver = new FakeSolver(otherUrl);
    solver.solverId = solverAccount.account_id;
    solver.apiKey = socketKey.api_key;
    const capability = { task_type: 'proxy_fetch', tier: 'standard', billing_type: 'per_request', fulfillment_path: 'http', provider_name: 'fake', model_name: 'fake', marginal_cost: 0, min_price_points: '1', max_concurrent: 4 };
    expect((await api(otherUrl, 'POST', '/v1/solver/capabilities', { headers: bearer(socketKey.api_key), body: [capability] })).status).toBe(200);
    await solver.connect();

    // The socket on the other process serves a task created through this one.
    const client = await registerAccount(stack.url, '100');
    const served = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/before' } });
    expect(served.status).toBe(200);
    expect(solver.received).toHaveLength(1);

    // Another key of the same account going leaves this socket alone.
    expect((await api(stack.url, 'DELETE', `/v1/account/keys/${spare.key_id}`, { headers: solverAccount.auth })).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(solver.socket.readyState).toBe(solver.socket.OPEN);

    const closed = new Promise<{ code: number; at: number }>((resolve) => solver.socket.once('close', (code) => resolve({ code, at: Date.now() })));
    const revokedAt = Date.now();
    expect((await api(stack.url, 'DELETE', `/v1/account/keys/${socketKey.key_id}`, { headers: solverAccount.auth })).status).toBe(200);
    const timeout = new Promise<never>((_resolve, reject) => setTimeout(() => reject(new Error('the socket outlived its key')), 5_000));
    const { code, at } = await Promise.race([closed, timeout]);
    expect(code).toBe(4003);
    expect(at - revokedAt).toBeLessThan(2_000);

    // The solver is offline on every node: a new task waits for another solver, and none reached this one.
    await waitFor(async () => (await api(stack.url, 'GET', '/v1/solver/stats', { headers: solverAccount.auth })).json.connected === false, 5_000, 50);
    const after = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com/after' } } });
    expect(after.status).toBe(200);
    expect(after.json).toMatchObject({ status: 'queued' });
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect(solver.received).toHaveLength(1);
    expect((await api(stack.url, 'GET', `/v1/tasks/${after.json.task_id}`, { headers: client.auth })).json.status).toBe('queued');
    // Reconnecting with the revoked key is refused before the upgrade.
    await expect(solver.connect()).rejects.toThrow(/401/);

    expect((await api(stack.url, 'POST', `/v1/tasks/${after.json.task_id}/cancel`, { headers: client.auth })).json.status).toBe('cancelled');
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '99', held_points: '0', lifetime_spent_points: '1' });
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  }, 60_000);
});
