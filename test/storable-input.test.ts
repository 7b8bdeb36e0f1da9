import { ADMIN_KEY, api, registerAccount, startTestStack, type TestStack } from './support/stack';

/** Text PostgreSQL cannot store (NUL, unpaired surrogates) and negative prices are a 422, never a 500. */

const ADMIN = { 'X-Admin-API-Key': ADMIN_KEY };
const NUL = '\u0000';
const LONE_HIGH = '\ud800';
const LONE_LOW = '\udc00';
// A character outside the BMP (a surrogate pair in UTF-16) and accents: accepted and kept as sent.
const FAITHFUL = 'caf\u00e9 \ud83d\ude00 \u200b\u00a0end';

const capability = (overrides: Record<string, unknown> = {}) => ({
  task_type: 'proxy_fetch',
  tier: 'basic',
  billing_type: 'per_request',
  fulfillment_path: 'http',
  provider_name: 'test',
  model_name: 'fetcher',
  marginal_cost: '0',
  min_price_points: '1',
  max_concurrent: 1,
  ...overrides,
});

const nulIssue = (loc: (string | number)[]) => expect.objectContaining({ type: 'string_pattern_mismatch', loc, ctx: { pattern: '^[^\\x00]*$' } });
const unicodeIssue = (loc: (string | number)[]) => expect.objectContaining({ type: 'string_unicode', loc });

describe('input PostgreSQL cannot store is refused with 422', () => {
  let stack: TestStack;
  let client: Awaited<ReturnType<typeof registerAccount>>;

  beforeAll(async () => {
    stack = await startTestStack({ worker: false });
    client = await registerAccount(stack.url, '100');
  });
  afterAll(async () => {
    await stack.close();
  });

  test('plain text fields: NUL (string_pattern_mismatch) and unpaired surrogates (string_unicode) in a capability are 422 at their loc', async () => {
    const response = await api(stack.url, 'POST', '/v1/solver/capabilities', {
      headers: client.auth,
      body: [capability({ model_name: `gpt${NUL}`, provider_name: `x${LONE_HIGH}` }), capability({ task_type: 'web_search', model_name: `${LONE_LOW}y` })],
    });
    expect(response.status).toBe(422);
    expect(response.json.detail).toEqual(
      expect.arrayContaining([unicodeIssue(['body', 0, 'provider_name']), nulIssue(['body', 0, 'model_name']), unicodeIssue(['body', 1, 'model_name'])]),
    );
    expect(response.json.detail).toHaveLength(3);
  });

  test('plain text fields: other characters, astral ones included, are stored and returned as sent', async () => {
    const registered = await api(stack.url, 'POST', '/v1/solver/capabilities', { headers: client.auth, body: [capability({ model_name: FAITHFUL })] });
    expect(registered.status).toBe(200);
    const stats = await api(stack.url, 'GET', '/v1/solver/stats', { headers: client.auth });
    expect(stats.json.capabilities.map((entry: { model_name: string }) => entry.model_name)).toEqual([FAITHFUL]);
  });

  test('the escaped forms in the JSON text (\\u0000, \\ud800) are refused like the raw characters', async () => {
    const raw = '[{"task_type":"proxy_fetch","tier":"basic","billing_type":"per_request","fulfillment_path":"http","provider_name":"a\\u0000","model_name":"b\\ud800","marginal_cost":"0","min_price_points":"1","max_concurrent":1}]';
    const response = await api(stack.url, 'POST', '/v1/solver/capabilities', { headers: { ...client.auth, 'content-type': 'application/json' }, raw });
    expect(response.status).toBe(422);
    expect(response.json.detail).toEqual([nulIssue(['body', 0, 'provider_name']), unicodeIssue(['body', 0, 'model_name'])]);
  });

  test('task payloads (jsonb): strings and keys anywhere in the payload are checked', async () => {
    const response = await api(stack.url, 'POST', '/v1/tasks', {
      headers: client.auth,
      body: { task_type: 'web_search', payload: { query: `a${NUL}b`, [`k${LONE_HIGH}`]: 1 } },
    });
    expect(response.status).toBe(422);
    expect(response.json.detail).toEqual(
      expect.arrayContaining([nulIssue(['body', 'payload', 'query']), unicodeIssue(['body', 'payload', `k${LONE_HIGH}`, '[key]'])]),
    );
    const url = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: `https://example.com/${NUL}` } });
    expect(url.status).toBe(422);
    expect(url.json.detail).toEqual([nulIssue(['body', 'url'])]);
  });

  test('task payloads (jsonb): an accepted payload is stored and served back as sent', async () => {
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: FAITHFUL, count: 2 } } });
    expect(created.status).toBe(200);
    const polled = await api(stack.url, 'GET', `/v1/tasks/${created.json.task_id}`, { headers: client.auth });
    expect(polled.json.payload).toEqual({ query: FAITHFUL, count: 2 });
  });

  test('chat messages: content strings, content parts and extra message fields are checked before anything else', async () => {
    const response = await api(stack.url, 'POST', '/v1/chat/completions', {
      headers: client.auth,
      body: {
        model: 'service/strong',
        messages: [
          { role: 'system', content: `be brief${NUL}` },
          { role: 'user', content: [{ type: 'text', text: `hi ${LONE_LOW}` }], name: `n${NUL}` },
        ],
        user: LONE_HIGH,
      },
    });
    expect(response.status).toBe(422);
    expect(response.json.detail).toEqual(
      expect.arrayContaining([
        nulIssue(['body', 'messages', 0, 'content']),
        unicodeIssue(['body', 'messages', 1, 'content', 0, 'text']),
        nulIssue(['body', 'messages', 1, 'name']),
        unicodeIssue(['body', 'user']),
      ]),
    );
  });

  test('admin bodies: account ids and manual results are checked', async () => {
    const deposit = await api(stack.url, 'POST', '/v1/admin/deposit', { headers: ADMIN, body: { account_id: `acct_${NUL}`, amount_points: '1' } });
    expect(deposit.status).toBe(422);
    expect(deposit.json.detail).toEqual([nulIssue(['body', 'account_id'])]);
    const simulate = await api(stack.url, 'POST', '/v1/admin/simulate-rate-limit', { headers: ADMIN, body: { account_id: LONE_HIGH, trigger_after_n_requests: 1 } });
    expect(simulate.status).toBe(422);
    const complete = await api(stack.url, 'POST', '/v1/admin/tasks/task_x/complete', { headers: ADMIN, body: { solver_id: 's', result: { content: NUL } } });
    expect(complete.status).toBe(422);
    expect(complete.json.detail).toEqual([nulIssue(['body', 'result', 'content'])]);
  });

  test('path parameters: NUL is 422 at its loc, bytes that are not UTF-8 are 422 string_unicode, neither a 500', async () => {
    const nul = await api(stack.url, 'GET', '/v1/tasks/%00', { headers: client.auth });
    expect(nul.status).toBe(422);
    expect(nul.json.detail).toEqual([nulIssue(['path', 'task_id'])]);
    const notUtf8 = await api(stack.url, 'GET', '/v1/tasks/%FF', { headers: client.auth });
    expect(notUtf8.status).toBe(422);
    expect(notUtf8.json.detail[0]).toMatchObject({ type: 'string_unicode', loc: ['path'] });
    const encodedSurrogate = await api(stack.url, 'POST', '/v1/admin/tasks/%ED%A0%80/complete', { headers: ADMIN, body: { solver_id: 's', result: {} } });
    expect(encodedSurrogate.status).toBe(422);
    const model = await api(stack.url, 'GET', '/v1/models/%25FF');
    expect(model.status).toBe(404);
    expect(model.json.error.type).toBe('model_not_found');
  });
});

describe('numbers beyond what a column or a timer holds are 422', () => {
  let stack: TestStack;
  let client: Awaited<ReturnType<typeof registerAccount>>;

  beforeAll(async () => {
    stack = await startTestStack({ worker: false });
    client = await registerAccount(stack.url, '100');
  });
  afterAll(async () => {
    await stack.close();
  });

  test('timeouts above a day, huge viewports and simulations are less_than_equal, never a 500', async () => {
    const cases: [string, string, Record<string, unknown>, (string | number)[]][] = [
      ['/v1/tasks', 'POST', { task_type: 'proxy_fetch', payload: { url: 'https://example.com' }, timeout_seconds: 13204643137 }, ['body', 'timeout_seconds']],
      ['/v1/fetch', 'POST', { url: 'https://example.com', timeout: 9.437012120559467e26 }, ['body', 'timeout']],
      ['/v1/compat/scraper/scrape', 'POST', { url: 'https://example.com', timeout: 86_400_001 }, ['body', 'timeout']],
      ['/v1/screenshot', 'POST', { url: 'https://example.com', viewport: { width: 16_385, height: 10 } }, ['body', 'viewport', 'width']],
    ];
    for (const [path, method, body, loc] of cases) {
      const response = await api(stack.url, method, path, { headers: client.auth, body });
      expect(response.status).toBe(422);
      expect(response.json.detail).toEqual([expect.objectContaining({ type: 'less_than_equal', loc })]);
    }
    const simulate = await api(stack.url, 'POST', '/v1/admin/simulate-rate-limit', { headers: ADMIN, body: { account_id: client.account_id, trigger_after_n_requests: 1e27 } });
    expect(simulate.status).toBe(422);
    expect(simulate.json.detail).toEqual([expect.objectContaining({ type: 'less_than_equal', loc: ['body', 'trigger_after_n_requests'] })]);
  });
});

describe('every price field refuses negatives with 422', () => {
  let stack: TestStack;
  let client: Awaited<ReturnType<typeof registerAccount>>;

  beforeAll(async () => {
    stack = await startTestStack({ worker: false });
    client = await registerAccount(stack.url, '100');
  });
  afterAll(async () => {
    await stack.close();
  });

  const ge0 = (loc: (string | number)[], input: unknown) => ({ type: 'greater_than_equal', loc, msg: 'Input should be greater than or equal to 0', input, ctx: { ge: 0 } });

  test('capabilities: negative decimal strings and numbers for min_price_points and marginal_cost', async () => {
    const response = await api(stack.url, 'POST', '/v1/solver/capabilities', {
      headers: client.auth,
      body: [capability({ min_price_points: '-1', marginal_cost: '-0.5' }), capability({ task_type: 'web_search', min_price_points: -2, marginal_cost: '-.1' })],
    });
    expect(response.status).toBe(422);
    expect(response.json.detail).toEqual([
      ge0(['body', 0, 'marginal_cost'], '-0.5'),
      ge0(['body', 0, 'min_price_points'], '-1'),
      ge0(['body', 1, 'marginal_cost'], '-.1'),
      ge0(['body', 1, 'min_price_points'], -2),
    ]);
  });

  test('tasks: a negative max_price_points is 422 and nothing is held', async () => {
    const response = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com' }, max_price_points: '-3' } });
    expect(response.status).toBe(422);
    expect(response.json.detail).toEqual([ge0(['body', 'max_price_points'], '-3')]);
    expect((await api(stack.url, 'GET', '/v1/balance', { headers: client.auth })).json).toMatchObject({ available_points: '100', held_points: '0' });
  });

  test('zero written with a minus sign is zero, and malformed decimals stay decimal_parsing', async () => {
    const zero = await api(stack.url, 'POST', '/v1/solver/capabilities', { headers: client.auth, body: [capability({ min_price_points: '-0.0', marginal_cost: '+0' })] });
    expect(zero.status).toBe(200);
    expect(zero.json.capabilities[0]).toMatchObject({ min_price_points: '0', marginal_cost: '0' });
    const malformed = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com' }, max_price_points: '-' } });
    expect(malformed.status).toBe(422);
    expect(malformed.json.detail).toEqual([{ type: 'decimal_parsing', loc: ['body', 'max_price_points'], msg: 'Input should be a valid decimal', input: '-' }]);
  });

  test('deposits: zero and negative amounts are greater_than, in both forms', async () => {
    for (const amount of ['-1', '0.000', -5, 0]) {
      const response = await api(stack.url, 'POST', '/v1/admin/deposit', { headers: ADMIN, body: { account_id: client.account_id, amount_points: amount } });
      expect(response.status).toBe(422);
      expect(response.json.detail).toEqual([{ type: 'greater_than', loc: ['body', 'amount_points'], msg: 'Input should be greater than 0', input: amount, ctx: { gt: 0 } }]);
    }
  });

  test('a huge amount given as a number keeps its digits', async () => {
    const response = await api(stack.url, 'POST', '/v1/admin/deposit', { headers: ADMIN, body: { account_id: client.account_id, amount_points: 1e21 } });
    expect(response.status).toBe(200);
    expect(response.json.deposited_points).toBe('1000000000000000000000');
  });
});
