import { suiteSolvers } from './support/fake-solver';
import { api, registerAccount, startTestStack, type TestStack } from './support/stack';

/** Exact sum of decimal strings (12 fractional digits suffice for points here). */
function decimalSum(values: string[]): string {
  const SCALE = 12;
  const total = values.reduce((sum, value) => {
    const negative = value.startsWith('-');
    const [whole, fraction = ''] = value.replace('-', '').split('.');
    const scaled = BigInt(whole + fraction.padEnd(SCALE, '0'));
    return sum + (negative ? -scaled : scaled);
  }, 0n);
  const sign = total < 0n ? '-' : '';
  const digits = (total < 0n ? -total : total).toString().padStart(SCALE + 1, '0');
  const fraction = digits.slice(-SCALE).replace(/0+$/, '');
  return `${sign}${digits.slice(0, -SCALE)}${fraction ? `.${fraction}` : ''}`;
}

describe('usage history: GET /v1/account/ledger and its summary', () => {
  let stack: TestStack;
  const solver = suiteSolvers(() => stack.url);

  beforeAll(async () => {
    stack = await startTestStack({ env: { PLATFORM_FEE_PERCENT: '10' } });
  });
  afterAll(async () => {
    await stack.close();
  });

  const history = async (auth: Record<string, string>, query = '') => {
    const entries: any[] = [];
    let cursor: string | null = null;
    do {
      const page = await api(stack.url, 'GET', `/v1/account/ledger?limit=2${query}${cursor ? `&cursor=${cursor}` : ''}`, { headers: auth });
      expect(page.status).toBe(200);
      entries.push(...page.json.data);
      cursor = page.json.next_cursor;
    } while (cursor);
    return entries;
  };

  test('every entry that moved the points, with task ids and times, sums to the balance; the solver sees its earnings', async () => {
    const worker = await solver({ price: '1.5', taskTypes: ['proxy_fetch'] });
    const client = await registerAccount(stack.url, '100');
    await api(stack.url, 'POST', '/v1/admin/deposit', { headers: { 'X-Admin-API-Key': 'test-admin-key' }, body: { account_id: client.account_id, amount_points: '0.25' } });
    const taskIds: string[] = [];
    for (let i = 0; i < 3; i++) {
      const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: `https://example.com/h${i}` } });
      expect(fetched.status).toBe(200);
      taskIds.push(fetched.json.task_id);
    }
    // No search solver: this one stays queued, its hold open.
    const queued = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'x' } } });
    expect(queued.status).toBe(200);

    const entries = await history(client.auth);
    expect(new Set(entries.map((entry) => entry.entry_id)).size).toBe(entries.length);
    // 2 deposits, then per fetch a hold, a capture and a release; the queued task's hold.
    expect(entries.map((entry) => entry.kind).sort()).toEqual(['capture', 'capture', 'capture', 'deposit', 'deposit', 'hold', 'hold', 'hold', 'hold', 'release', 'release', 'release']);
    expect(entries.map((entry) => Number(entry.entry_id))).toEqual([...entries.map((entry) => Number(entry.entry_id))].sort((a, b) => b - a));
    for (const entry of entries) {
      expect(new Date(entry.created_at).toISOString()).toBe(entry.created_at);
      if (entry.kind === 'deposit') expect(entry).toMatchObject({ task_id: null, task_type: null });
      else expect([...taskIds, queued.json.task_id]).toContain(entry.task_id);
    }
    expect(entries.find((entry) => entry.kind === 'capture')).toMatchObject({ amount: '1.5', available_change: '0', held_change: '-1.5', task_type: 'proxy_fetch' });

    const balance = (await api(stack.url, 'GET', '/v1/balance', { headers: client.auth })).json;
    expect(balance).toMatchObject({ available_points: '85.75', held_points: '10' });
    expect(decimalSum(entries.map((entry) => entry.available_change))).toBe(balance.available_points);
    expect(decimalSum(entries.map((entry) => entry.held_change))).toBe(balance.held_points);

    const earnings = await history({ Authorization: `Bearer ${worker.apiKey}` });
    expect(earnings.map((entry) => [entry.kind, entry.amount, entry.task_type])).toEqual(taskIds.map(() => ['payout', '1.35', 'proxy_fetch']));
    const solverBalance = (await api(stack.url, 'GET', '/v1/balance', { headers: { Authorization: `Bearer ${worker.apiKey}` } })).json;
    expect(decimalSum(earnings.map((entry) => entry.available_change))).toBe(solverBalance.available_points);
    expect(solverBalance.lifetime_earned_points).toBe('4.05');

    // Filters: one task's entries, one kind.
    expect((await history(client.auth, `&task_id=${taskIds[0]}`)).map((entry) => entry.kind).sort()).toEqual(['capture', 'hold', 'release']);
    expect((await history(client.auth, '&kind=deposit')).map((entry) => entry.amount).sort()).toEqual(['0.25', '100']);

    const summary = (await api(stack.url, 'GET', '/v1/account/ledger/summary', { headers: client.auth })).json.data;
    const today = new Date().toISOString().slice(0, 10);
    expect(summary).toEqual([
      { day: today, task_type: null, tasks: 0, entries: 2, amounts: { deposit: '100.25', hold: '0', capture: '0', release: '0', payout: '0', fee: '0', forfeit: '0', fee_return: '0', refund: '0' }, available_change: '100.25', held_change: '0' },
      { day: today, task_type: 'proxy_fetch', tasks: 3, entries: 9, amounts: { deposit: '0', hold: '30', capture: '4.5', release: '25.5', payout: '0', fee: '0', forfeit: '0', fee_return: '0', refund: '0' }, available_change: '-4.5', held_change: '0' },
      { day: today, task_type: 'web_search', tasks: 1, entries: 1, amounts: { deposit: '0', hold: '10', capture: '0', release: '0', payout: '0', fee: '0', forfeit: '0', fee_return: '0', refund: '0' }, available_change: '-10', held_change: '10' },
    ]);
  });

  test('bad parameters are 422 at their query parameter', async () => {
    const client = await registerAccount(stack.url);
    const detail = async (query: string) => (await api(stack.url, 'GET', `/v1/account/ledger?${query}`, { headers: client.auth })).json.detail;
    expect(await detail('kind=bonus')).toMatchObject([{ type: 'literal_error', loc: ['query', 'kind'] }]);
    expect(await detail(`cursor=${Buffer.from('["x"]').toString('base64url')}`)).toMatchObject([{ type: 'value_error', loc: ['query', 'cursor'] }]);
    expect(await detail('limit=101')).toMatchObject([{ type: 'less_than_equal', loc: ['query', 'limit'] }]);
  });
});
