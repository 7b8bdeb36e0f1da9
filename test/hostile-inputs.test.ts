import zlib from 'node:zlib';
import { sql } from 'slonik';
import { auditLedger } from '../src/db/ledger';
import { ADMIN_KEY, api, registerAccount, startTestStack, type TestStack } from './support/stack';
import { answeredType, HOSTILE_CASES, LONG_FRACTION, sendHostile } from './support/hostile-inputs';

describe('hostile inputs answer 4xx in the documented shape and change nothing', () => {
  let stack: TestStack;
  let client: Awaited<ReturnType<typeof registerAccount>>;

  beforeAll(async () => {
    stack = await startTestStack({ worker: false });
    client = await registerAccount(stack.url, '100');
  });
  afterAll(async () => {
    await stack.close();
  });

  test.each(HOSTILE_CASES.map((hostile) => [hostile.name, hostile] as const))('%s', async (_name, hostile) => {
    const answer = await sendHostile(stack.url, hostile, { accountId: client.account_id, apiKey: client.api_key, adminKey: ADMIN_KEY });
    expect({ status: answer.status, type: answeredType(answer) }).toEqual({ status: hostile.status, type: hostile.type });
    if (answer.status !== 404) {
      const documented = answer.status === 422 ? Array.isArray(answer.json?.detail) : typeof answer.json?.error?.message === 'string';
      expect(documented).toBe(true);
    }
  });

  test('nothing was stored: no deposit, no task, no key, no capability, and the ledger audits exact', async () => {
    const balance = await api(stack.url, 'GET', '/v1/balance', { headers: client.auth });
    expect(balance.json.available_points).toBe('100');
    const tasks = await api(stack.url, 'GET', '/v1/tasks', { headers: client.auth });
    expect(tasks.json.data).toEqual([]);
    const keys = await api(stack.url, 'GET', '/v1/account/keys', { headers: client.auth });
    expect(keys.json.data).toHaveLength(1);
    const capabilities = await stack.db.oneFirst(sql.unsafe`SELECT count(*)::int FROM solver_capabilities WHERE solver_id = ${client.account_id}`);
    expect(capabilities).toBe(0);
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  });

  test('1e400 is never stored as "0" or "Infinity", and the digit bounds name the limit', async () => {
    const limit = await api(stack.url, 'POST', '/v1/account/keys', { headers: client.auth, raw: '{"name":"k","spend_limit":{"points":1e400,"period":"total"}}' });
    expect(limit.json.detail).toEqual([{ type: 'finite_number', loc: ['body', 'spend_limit', 'points'], msg: 'Input should be a finite number', input: 'Infinity' }]);
    const price = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, raw: '{"task_type":"web_search","payload":{"query":"q"},"max_price_points":1e400}' });
    expect(price.json.detail).toEqual([{ type: 'finite_number', loc: ['body', 'max_price_points'], msg: 'Input should be a finite number', input: 'Infinity' }]);
    const timeout = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, raw: '{"task_type":"web_search","payload":{"query":"q"},"timeout_seconds":1e400}' });
    expect(timeout.json.detail).toEqual([{ type: 'finite_number', loc: ['body', 'timeout_seconds'], msg: 'Input should be a finite number', input: 'Infinity' }]);
    const places = await api(stack.url, 'POST', '/v1/admin/deposit', { headers: { 'X-Admin-API-Key': ADMIN_KEY }, body: { account_id: client.account_id, amount_points: LONG_FRACTION } });
    expect(places.json.detail).toEqual([
      { type: 'decimal_max_places', loc: ['body', 'amount_points'], msg: 'Decimal input should have no more than 1000 decimal places', input: LONG_FRACTION, ctx: { decimal_places: 1000 } },
    ]);
  });

  test('amounts at the digit bounds are kept exactly', async () => {
    const amount = `${'9'.repeat(1000)}.${'0'.repeat(999)}1000`;
    const other = await registerAccount(stack.url);
    const deposit = await api(stack.url, 'POST', '/v1/admin/deposit', { headers: { 'X-Admin-API-Key': ADMIN_KEY }, body: { account_id: other.account_id, amount_points: amount } });
    expect(deposit.status).toBe(200);
    expect(deposit.json.deposited_points).toBe(`${'9'.repeat(1000)}.${'0'.repeat(999)}1`);
    const tiny = await api(stack.url, 'POST', '/v1/admin/deposit', { headers: { 'X-Admin-API-Key': ADMIN_KEY }, body: { account_id: other.account_id, amount_points: 5e-324 } });
    expect(tiny.status).toBe(200);
    expect(tiny.json.deposited_points).toBe(`0.${'0'.repeat(323)}5`);
  });

  test('a gzip or deflate body is decoded, and bytes that are not UTF-8 are refused, never replaced', async () => {
    for (const [encoding, encode] of [['gzip', zlib.gzipSync], ['deflate', zlib.deflateSync]] as const) {
      const response = await fetch(`${stack.url}/v1/account/keys`, {
        method: 'POST',
        headers: { ...client.auth, 'content-type': 'application/json', 'content-encoding': encoding },
        body: encode(JSON.stringify({ name: `via ${encoding}` })),
      });
      expect(response.status).toBe(200);
      expect(((await response.json()) as { name: string }).name).toBe(`via ${encoding}`);
    }
    const latin1 = await fetch(`${stack.url}/v1/account/keys`, {
      method: 'POST',
      headers: { ...client.auth, 'content-type': 'application/json; charset=latin1' },
      body: Buffer.concat([Buffer.from('{"name":"caf'), Buffer.from([0xe9]), Buffer.from('"}')]),
    });
    expect(((await latin1.json()) as { name: string }).name).toBe('café');
    const notUtf8 = await fetch(`${stack.url}/v1/account/keys`, {
      method: 'POST',
      headers: { ...client.auth, 'content-type': 'application/json' },
      body: Buffer.concat([Buffer.from('{"name":"caf'), Buffer.from([0xe9]), Buffer.from('"}')]),
    });
    expect(notUtf8.status).toBe(422);
    expect(((await notUtf8.json()) as { detail: unknown[] }).detail[0]).toMatchObject({ type: 'string_unicode', loc: ['body'] });
    const names = (await api(stack.url, 'GET', '/v1/account/keys', { headers: client.auth })).json.data.map((key: { name: string }) => key.name);
    expect(names.some((name: string) => name.includes('\uFFFD'))).toBe(false);
  });

  test('nesting up to the bound is accepted, one level more is json_invalid at its offset', async () => {
    // The body opens the first level, the arrays the others.
    const body = (depth: number) => `{"name":"k","x":${'['.repeat(depth)}${']'.repeat(depth)}}`;
    const within = await api(stack.url, 'POST', '/v1/account/keys', { headers: client.auth, raw: body(127) });
    expect(within.json.detail[0]).toMatchObject({ type: 'extra_forbidden', loc: ['body', 'x'] });
    const beyond = await api(stack.url, 'POST', '/v1/account/keys', { headers: client.auth, raw: body(128) });
    expect(beyond.status).toBe(422);
    expect(beyond.json.detail[0]).toMatchObject({ type: 'json_invalid', loc: ['body', body(128).indexOf('[') + 127] });
  });

  test('a cursor a page returned still pages', async () => {
    const first = await api(stack.url, 'GET', '/v1/tasks?limit=1', { headers: client.auth });
    expect(first.status).toBe(200);
    if (first.json.next_cursor) {
      const next = await api(stack.url, 'GET', `/v1/tasks?limit=1&cursor=${first.json.next_cursor}`, { headers: client.auth });
      expect(next.status).toBe(200);
    }
  });
});
