import { balanceFromEntries, getBalance } from '../src/db/ledger';
import { ADMIN_KEY, api, capturingLogger, registerAccount, startTestStack, type TestStack } from './support/stack';

describe('HTTP foundation through the real app on a real port', () => {
  let stack: TestStack;
  const captured = capturingLogger('info');

  beforeAll(async () => {
    stack = await startTestStack({ worker: false, logger: captured.logger });
  });
  afterAll(async () => {
    await stack.close();
  });

  test('health answers without credentials, with string values', async () => {
    const response = await api(stack.url, 'GET', '/health');
    expect(response.status).toBe(200);
    expect(response.json.status).toBe('ok');
    for (const value of Object.values(response.json)) expect(typeof value).toBe('string');
  });

  test('register returns account_id and an api_key that authenticates', async () => {
    const registered = await api(stack.url, 'POST', '/v1/register');
    expect(registered.status).toBe(200);
    expect(registered.json.account_id).toMatch(/^acct_/);
    expect(registered.json.api_key).toMatch(/^tmk_/);
    for (const value of Object.values(registered.json)) expect(typeof value).toBe('string');
    const profile = await api(stack.url, 'GET', '/v1/profile', { headers: { Authorization: `Bearer ${registered.json.api_key}` } });
    expect(profile.status).toBe(200);
    expect(profile.json.account_id).toBe(registered.json.account_id);
    expect(profile.json.settings).toEqual({ prompt_safety_scan: false });
  });

  test('api keys are stored hashed, never in clear', async () => {
    const account = await registerAccount(stack.url);
    const { sql } = await import('slonik');
    const rows = await stack.db.any(sql.unsafe`SELECT key_hash, key_prefix FROM api_keys WHERE account_id = ${account.account_id}`);
    expect(rows).toHaveLength(1);
    expect(Buffer.from(rows[0].key_hash as Buffer).toString('utf8')).not.toContain(account.api_key);
    expect(account.api_key.startsWith(String(rows[0].key_prefix))).toBe(true);
  });

  test('balance starts at zero with the four keys, every value a string; earnings not vested are a solver route', async () => {
    const account = await registerAccount(stack.url);
    const balance = await api(stack.url, 'GET', '/v1/balance', { headers: account.auth });
    expect(balance.status).toBe(200);
    expect(balance.json).toEqual({
      account_id: account.account_id,
      available_points: '0',
      held_points: '0',
      lifetime_earned_points: '0',
      lifetime_spent_points: '0',
    });
    expect(Object.values(balance.json).every((value) => typeof value === 'string')).toBe(true);
    const earnings = await api(stack.url, 'GET', '/v1/solver/earnings', { headers: account.auth });
    expect(earnings.status).toBe(200);
    expect(earnings.json).toEqual({ solver_id: account.account_id, unvested_points: '0', unvested_tasks: 0, frozen: false, next_vesting_at: null });
  });

  test('missing, malformed and unknown credentials are 401 with distinct types', async () => {
    expect((await api(stack.url, 'GET', '/v1/balance')).json.error.type).toBe('authentication_required');
    const malformed = await api(stack.url, 'GET', '/v1/balance', { headers: { Authorization: 'Basic abc' } });
    expect(malformed.status).toBe(401);
    expect(malformed.json.error.type).toBe('invalid_api_key');
    const unknown = await api(stack.url, 'GET', '/v1/balance', { headers: { Authorization: 'Bearer tmk_nope' } });
    expect(unknown.status).toBe(401);
    expect(unknown.json.error).toEqual({ type: 'invalid_api_key', message: expect.any(String) });
  });

  test('account settings toggle prompt_safety_scan and reject anything else', async () => {
    const account = await registerAccount(stack.url);
    const on = await api(stack.url, 'PATCH', '/v1/account/settings', { headers: account.auth, body: { prompt_safety_scan: true } });
    expect(on.status).toBe(200);
    expect(on.json).toEqual({ prompt_safety_scan: true });
    const profile = await api(stack.url, 'GET', '/v1/profile', { headers: account.auth });
    expect(profile.json.settings.prompt_safety_scan).toBe(true);
    const extra = await api(stack.url, 'PATCH', '/v1/account/settings', { headers: account.auth, body: { prompt_safety_scan: false, theme: 'dark' } });
    expect(extra.status).toBe(422);
    expect(extra.json.detail).toEqual([{ type: 'extra_forbidden', loc: ['body', 'theme'], msg: 'Extra inputs are not permitted', input: 'dark' }]);
  });

  test('admin deposit accepts the key in each of the three headers', async () => {
    const account = await registerAccount(stack.url);
    const headers: Record<string, string>[] = [{ Authorization: `Bearer ${ADMIN_KEY}` }, { ADMIN_API_KEY: ADMIN_KEY }, { 'X-Admin-API-Key': ADMIN_KEY }];
    for (const header of headers) {
      const response = await api(stack.url, 'POST', '/v1/admin/deposit', { headers: header, body: { account_id: account.account_id, amount_points: '1.25' } });
      expect(response.status).toBe(200);
    }
    const balance = await api(stack.url, 'GET', '/v1/balance', { headers: account.auth });
    expect(balance.json.available_points).toBe('3.75');
  });

  test('admin routes refuse missing and wrong keys, and user keys', async () => {
    const account = await registerAccount(stack.url);
    const body = { account_id: account.account_id, amount_points: 5 };
    const missing = await api(stack.url, 'POST', '/v1/admin/deposit', { body });
    expect(missing.status).toBe(401);
    expect(missing.json.error.type).toBe('admin_authentication_required');
    const wrong = await api(stack.url, 'POST', '/v1/admin/deposit', { body, headers: { 'X-Admin-API-Key': 'nope' } });
    expect(wrong.status).toBe(401);
    expect(wrong.json.error.type).toBe('invalid_admin_key');
    const userKey = await api(stack.url, 'POST', '/v1/admin/deposit', { body, headers: account.auth });
    expect(userKey.json.error.type).toBe('invalid_admin_key');
  });

  test('a deposit retried with the same Idempotency-Key applies once', async () => {
    const account = await registerAccount(stack.url);
    const headers = { 'X-Admin-API-Key': ADMIN_KEY, 'Idempotency-Key': 'dep-1' };
    await api(stack.url, 'POST', '/v1/admin/deposit', { headers, body: { account_id: account.account_id, amount_points: 7 } });
    const retried = await api(stack.url, 'POST', '/v1/admin/deposit', { headers, body: { account_id: account.account_id, amount_points: 7 } });
    expect(retried.json.applied).toBe('false');
    expect(retried.json.available_points).toBe('7');
    // The same key and account with another amount is another request: refused, nothing deposited.
    for (const amount of [70, '7.5']) {
      const other = await api(stack.url, 'POST', '/v1/admin/deposit', { headers, body: { account_id: account.account_id, amount_points: amount } });
      expect([other.status, other.json.error?.type]).toEqual([422, 'idempotency_key_reused']);
    }
    // The same amount written another way is the same deposit.
    expect((await api(stack.url, 'POST', '/v1/admin/deposit', { headers, body: { account_id: account.account_id, amount_points: '7.00' } })).json.applied).toBe('false');
    expect(await getBalance(stack.db, account.account_id)).toEqual(await balanceFromEntries(stack.db, account.account_id));
    expect((await getBalance(stack.db, account.account_id))?.available_points).toBe('7');
  });

  test('deposit validation: every violated field is reported in the pydantic shape', async () => {
    const response = await api(stack.url, 'POST', '/v1/admin/deposit', {
      headers: { 'X-Admin-API-Key': ADMIN_KEY },
      body: { amount_points: 'ten', extra: true },
    });
    expect(response.status).toBe(422);
    expect(response.json.detail).toEqual(
      expect.arrayContaining([
        { type: 'missing', loc: ['body', 'account_id'], msg: 'Field required', input: { amount_points: 'ten', extra: true } },
        { type: 'decimal_parsing', loc: ['body', 'amount_points'], msg: 'Input should be a valid decimal', input: 'ten' },
        { type: 'extra_forbidden', loc: ['body', 'extra'], msg: 'Extra inputs are not permitted', input: true },
      ]),
    );
    expect(response.json.detail).toHaveLength(3);
  });

  test('deposit to an unknown account is 404', async () => {
    const response = await api(stack.url, 'POST', '/v1/admin/deposit', {
      headers: { 'X-Admin-API-Key': ADMIN_KEY },
      body: { account_id: 'acct_missing', amount_points: 1 },
    });
    expect(response.status).toBe(404);
    expect(response.json.error.type).toBe('account_not_found');
  });

  test('malformed JSON is a 422 json_invalid with the byte offset', async () => {
    const account = await registerAccount(stack.url);
    const response = await api(stack.url, 'PATCH', '/v1/account/settings', { headers: { ...account.auth, 'content-type': 'application/json' }, raw: '{"prompt_safety_scan": tru}' });
    expect(response.status).toBe(422);
    expect(response.json.detail[0]).toMatchObject({ type: 'json_invalid', loc: ['body', 23], msg: 'JSON decode error' });
  });

  test('a missing body is a 422 missing at loc ["body"]', async () => {
    const account = await registerAccount(stack.url);
    const response = await api(stack.url, 'PATCH', '/v1/account/settings', { headers: account.auth });
    expect(response.status).toBe(422);
    expect(response.json.detail).toEqual([{ type: 'missing', loc: ['body'], msg: 'Field required', input: null }]);
  });

  test('bodies over the limit are 413 payload_too_large', async () => {
    const account = await registerAccount(stack.url);
    const response = await api(stack.url, 'PATCH', '/v1/account/settings', {
      headers: account.auth,
      raw: JSON.stringify({ prompt_safety_scan: true, pad: 'x'.repeat(1024 * 1024 + 10) }),
    });
    expect(response.status).toBe(413);
    expect(response.json.error.type).toBe('payload_too_large');
  });

  test('unknown routes are 404 in the error shape', async () => {
    const response = await api(stack.url, 'GET', '/v1/nowhere');
    expect(response.status).toBe(404);
    expect(response.json).toEqual({ error: { type: 'not_found', message: expect.stringContaining('/v1/nowhere') } });
  });

  test('admin status reports database and Temporal reachability and counts', async () => {
    const response = await api(stack.url, 'GET', '/v1/admin/status', { headers: { 'X-Admin-API-Key': ADMIN_KEY } });
    expect(response.status).toBe(200);
    expect(response.json).toMatchObject({ status: 'ok', database: 'ok', temporal: 'ok' });
    expect(response.json.counts.accounts).toBeGreaterThan(0);
  });

  test('models: the list, the id with a slash, the alias, and 404 for others', async () => {
    const list = await api(stack.url, 'GET', '/v1/models');
    expect(list.json.data.map((model: { id: string }) => model.id)).toEqual(['service/strong']);
    const byId = await api(stack.url, 'GET', '/v1/models/service/strong');
    const byAlias = await api(stack.url, 'GET', '/v1/models/strong');
    expect(byId.status).toBe(200);
    expect(byAlias.json).toEqual(byId.json);
    const unknown = await api(stack.url, 'GET', '/v1/models/gpt-2');
    expect(unknown.status).toBe(404);
    expect(unknown.json.error.type).toBe('model_not_found');
  });

  test('openapi.json is OpenAPI 3.1.0 version 0.1.0 covering every route of the spec', async () => {
    const response = await api(stack.url, 'GET', '/openapi.json');
    expect(response.json.openapi).toBe('3.1.0');
    expect(response.json.info.version).toBe('0.1.0');
    const paths = Object.keys(response.json.paths);
    for (const expected of [
      '/health', '/v1/register', '/v1/profile', '/v1/balance', '/v1/account/settings', '/v1/tasks', '/v1/tasks/{task_id}',
      '/v1/fetch', '/v1/search', '/v1/screenshot', '/v1/snapshot', '/v1/chat/completions', '/v1/inference/chat/completions',
      '/v1/models', '/v1/models/{model}', '/v1/compat/scraper/scrape', '/v1/solver/capabilities', '/v1/solver/stats',
      '/v1/solver/connect', '/v1/admin/deposit', '/v1/admin/domain-policy/reload', '/v1/admin/reset-rate-limit',
      '/v1/admin/simulate-rate-limit', '/v1/admin/status', '/v1/admin/tasks/{task_id}/complete',
    ]) {
      expect(paths).toContain(expected);
    }
    const search = response.json.components.schemas.SearchRequest;
    expect(search.properties.count).toMatchObject({ type: 'integer', minimum: 1, maximum: 10, default: 5 });
    expect(search.additionalProperties).toBe(false);
  });

  test('/docs renders the OpenAPI document', async () => {
    const page = await api(stack.url, 'GET', '/docs');
    expect(page.status).toBe(200);
    expect(page.text).toContain('/openapi.json');
    const asset = await fetch(`${stack.url}/docs/assets/swagger-ui-bundle.js`);
    expect(asset.status).toBe(200);
  });

  test('every response carries a request id, and an incoming one is echoed', async () => {
    const generated = await api(stack.url, 'GET', '/health');
    expect(generated.headers.get('x-request-id')).toMatch(/^req_/);
    const echoed = await api(stack.url, 'GET', '/health', { headers: { 'X-Request-Id': 'trace-123' } });
    expect(echoed.headers.get('x-request-id')).toBe('trace-123');
  });

  test('logs are JSON with request ids and never contain an api key', async () => {
    const account = await registerAccount(stack.url);
    await api(stack.url, 'GET', '/v1/balance', { headers: { ...account.auth, 'X-Request-Id': 'log-check-1' } });
    const lines = captured.lines.map((line) => JSON.parse(line));
    expect(lines.some((line) => line.request_id === 'log-check-1' && line.path === '/v1/balance' && line.status === 200)).toBe(true);
    expect(captured.lines.join('\n')).not.toContain(account.api_key);
    expect(captured.lines.join('\n')).not.toContain(ADMIN_KEY);
  });
});

describe('admin routes without ADMIN_API_KEY', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startTestStack({ worker: false, env: { ADMIN_API_KEY: '' } });
  });
  afterAll(async () => {
    await stack.close();
  });

  test('are off', async () => {
    const response = await api(stack.url, 'GET', '/v1/admin/status', { headers: { 'X-Admin-API-Key': 'anything' } });
    expect(response.status).toBe(403);
    expect(response.json.error.type).toBe('admin_disabled');
  });
});
