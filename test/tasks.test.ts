import WebSocket from 'ws';
import { balanceFromEntries, getBalance } from '../src/db/ledger';
import { FakeSolver, suiteSolvers, waitFor } from './support/fake-solver';
import { createTemporalClient } from '../src/temporal/connection';
import { AccountIdAttribute, TaskStatusAttribute, TaskTypeAttribute } from '../src/contract/workflows';
import { ADMIN_KEY, api, registerAccount, startTestStack, testEndpoints, type TestStack } from './support/stack';

const FAST = { ACCEPT_TIMEOUT_MS: '1000', ATTEMPT_TIMEOUT_SECONDS: '3', HEARTBEAT_INTERVAL_MS: '1000', PLATFORM_FEE_PERCENT: '10' };

describe('web tasks through Temporal and solver WebSockets', () => {
  let stack: TestStack;
  const solver = suiteSolvers(() => stack.url);

  beforeAll(async () => {
    stack = await startTestStack({ env: FAST });
  });
  afterAll(async () => {
    await stack.close();
  });

  const poll = (client: { auth: Record<string, string> }, taskId: string, until: (status: string) => boolean = (s) => ['completed', 'failed', 'timed_out'].includes(s)) =>
    waitFor(async () => {
      const response = await api(stack.url, 'GET', `/v1/tasks/${taskId}`, { headers: client.auth });
      return until(response.json.status) ? response.json : undefined;
    });

  const expectLedgerExact = async (accountId: string) => {
    expect(await getBalance(stack.db, accountId)).toEqual(await balanceFromEntries(stack.db, accountId));
  };

  test.each([
    ['proxy_fetch', { url: 'https://example.com/a' }],
    ['web_search', { query: 'marketplace', count: 3 }],
    ['screenshot', { url: 'https://example.com/a', viewport: { width: 800, height: 600 } }],
    ['page_snapshot', { url: 'https://example.com/a', mode: 'aria' }],
  ])('%s: POST /v1/tasks then polling returns the completed record, charged at the solver price', async (taskType, payload) => {
    const worker = await solver({ price: '2' });
    const client = await registerAccount(stack.url, '100');
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: taskType, payload } });
    expect(created.status).toBe(200);
    expect(created.json).toMatchObject({ task_type: taskType, status: expect.stringMatching(/queued|assigned|completed/), max_price_points: '10', workflow_id: `task-${created.json.task_id}` });
    const done = await poll(client, created.json.task_id);
    expect(created.json).toMatchObject({ held_points: '10', hold_status: 'open', charged_points: '0' });
    expect(done).toMatchObject({ status: 'completed', price_points: '2', solver_id: worker.solverId, error: null, held_points: '10', hold_status: 'settled', charged_points: '2' });
    expect(done.result).toBeTruthy();
    expect(done.attempts).toEqual([{ solver_id: worker.solverId, outcome: 'completed', started_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/), ended_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/) }]);
    for (const key of ['created_at', 'updated_at', 'completed_at']) expect(new Date(done[key]).toISOString()).toBe(done[key]);
    expect((await api(stack.url, 'GET', '/v1/balance', { headers: client.auth })).json).toMatchObject({ available_points: '98', held_points: '0', lifetime_spent_points: '2' });
    expect((await getBalance(stack.db, worker.solverId))?.available_points).toBe('1.8');
  });

  test('a key\'s spend keeps what its settled tasks were charged and gets the rest of their holds back', async () => {
    await solver({ price: '2', taskTypes: ['web_search'] });
    const client = await registerAccount(stack.url, '100');
    const key = (await api(stack.url, 'POST', '/v1/account/keys', { headers: client.auth, body: { name: 'capped', spend_limit: { points: '12', period: 'day' } } })).json;
    const capped = { auth: { Authorization: `Bearer ${key.api_key}` } };
    const created = await api(stack.url, 'POST', '/v1/search', { headers: capped.auth, body: { query: 'spend' } });
    expect([created.status, created.headers.get('x-points-charged'), created.headers.get('x-points-held')]).toEqual([200, '2', '10']);
    const listed = (await api(stack.url, 'GET', '/v1/account/keys', { headers: client.auth })).json.data.find((entry: { key_id: string }) => entry.key_id === key.key_id);
    expect(listed.spend_limit).toEqual({ points: '12', period: 'day', spent_points: '2' });
    // 2 charged + a hold of 10 fit in 12; a second hold of 10 on top would not.
    const second = await api(stack.url, 'POST', '/v1/tasks', { headers: capped.auth, body: { task_type: 'web_search', payload: { query: 'fits' } } });
    expect(second.status).toBe(200);
    await poll(capped, second.json.task_id);
    // 4 charged now: a hold of 10 no longer fits, one of 8 does.
    const over = await api(stack.url, 'POST', '/v1/tasks', { headers: capped.auth, body: { task_type: 'web_search', payload: { query: 'over' } } });
    expect(over.status).toBe(402);
    const third = await api(stack.url, 'POST', '/v1/tasks', { headers: capped.auth, body: { task_type: 'web_search', payload: { query: 'fits too' }, max_price_points: '8' } });
    expect(third.status).toBe(200);
    await poll(capped, third.json.task_id);
    const refused = await api(stack.url, 'POST', '/v1/tasks', { headers: capped.auth, body: { task_type: 'web_search', payload: { query: 'over' }, max_price_points: '6.5' } });
    expect([refused.status, refused.json.error.type, refused.json.error.spend_limit.spent_points]).toEqual([402, 'key_spend_limit_reached', '6']);
    await expectLedgerExact(client.account_id);
  });

  test('ops find each task in Temporal by its workflow id, with task type, account and final status as search attributes', async () => {
    await solver();
    const client = await registerAccount(stack.url, '100');
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'ops' } } });
    await poll(client, created.json.task_id);
    const temporal = await createTemporalClient(testEndpoints().temporalAddress, 'default');
    // The task's row reads completed as it settles; the workflow sets its final status just after.
    const description = await waitFor(async () => {
      const described = await temporal.workflow.getHandle(`task-${created.json.task_id}`).describe();
      return described.typedSearchAttributes.get(TaskStatusAttribute) === 'completed' ? described : undefined;
    });
    expect(description.typedSearchAttributes.get(TaskTypeAttribute)).toBe('web_search');
    expect(description.typedSearchAttributes.get(AccountIdAttribute)).toBe(client.account_id);
    expect(description.typedSearchAttributes.get(TaskStatusAttribute)).toBe('completed');
    await temporal.connection.close();
  });

  test('each task workflow carries a one-line summary for the Temporal UI\'s list: type, account, short target, no query string', async () => {
    await solver();
    const client = await registerAccount(stack.url, '100');
    const query = 'a long search query that names something private about the client and goes on';
    const fetched = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com/private/page?token=s3cret#part' } } });
    const searched = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query } } });
    const temporal = await createTemporalClient(testEndpoints().temporalAddress, 'default');
    try {
      const summaryOf = async (taskId: string) => (await temporal.workflow.getHandle(`task-${taskId}`).describe()).staticSummary();
      expect(await summaryOf(fetched.json.task_id)).toBe(`proxy_fetch · ${client.account_id} · \`example.com/private/page\``);
      const searchSummary = await summaryOf(searched.json.task_id);
      expect(searchSummary).toBe(`web_search · ${client.account_id} · \`${query.slice(0, 39)}…\``);
      expect(await summaryOf(fetched.json.task_id)).not.toContain('s3cret');
      await poll(client, fetched.json.task_id);
      await poll(client, searched.json.task_id);
    } finally {
      await temporal.connection.close();
    }
  });

  test('convenience endpoints answer with the documented shapes', async () => {
    await solver();
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/x' } });
    expect(fetched.status).toBe(200);
    expect(fetched.json).toEqual({
      url: 'https://example.com/x', final_url: 'https://example.com/x', status_code: 200, content_type: 'markdown',
      content: '# Hello', title: 'Hello', elapsed_ms: expect.any(Number), task_id: expect.stringMatching(/^task_/),
    });
    const searched = await api(stack.url, 'POST', '/v1/search', { headers: client.auth, body: { query: 'cats', count: 3 } });
    expect(searched.json).toEqual({ query: 'cats', results: expect.any(Array), elapsed_ms: expect.any(Number), task_id: expect.any(String) });
    expect(searched.json.results).toHaveLength(3);
    const shot = await api(stack.url, 'POST', '/v1/screenshot', { headers: client.auth, body: { url: 'https://example.com/x', full_page: true } });
    expect(shot.json).toEqual({
      url: 'https://example.com/x', mime_type: 'image/png', image_base64: expect.any(String), width: 1, height: 1, full_page: true,
      elapsed_ms: expect.any(Number), task_id: expect.any(String),
    });
    const png = await fetch(`${stack.url}/v1/screenshot`, { method: 'POST', headers: { ...client.auth, Accept: 'image/png', 'content-type': 'application/json' }, body: JSON.stringify({ url: 'https://example.com/x' }) });
    expect(png.headers.get('content-type')).toBe('image/png');
    expect(Buffer.from(await png.arrayBuffer()).subarray(1, 4).toString()).toBe('PNG');
    const snap = await api(stack.url, 'POST', '/v1/snapshot', { headers: client.auth, body: { url: 'https://example.com/x', mode: 'aria' } });
    expect(snap.json).toEqual({ url: 'https://example.com/x', snapshot: expect.any(String), snapshot_format: 'aria', title: 'Hello', elapsed_ms: expect.any(Number), task_id: expect.any(String) });
    // Every one-call answer names its task in its body and in X-Task-Id, the same one.
    for (const answer of [fetched, searched, shot, snap]) expect(answer.json.task_id).toBe(answer.headers.get('x-task-id'));
    expect(png.headers.get('x-task-id')).toMatch(/^task_/);
  });

  test('payloads are validated per task type, with loc pointing into the payload', async () => {
    const client = await registerAccount(stack.url, '100');
    const response = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: '', count: 11 } } });
    expect(response.status).toBe(422);
    expect(response.json.detail).toEqual([
      expect.objectContaining({ type: 'string_too_short', loc: ['body', 'payload', 'query'] }),
      expect.objectContaining({ type: 'less_than_equal', loc: ['body', 'payload', 'count'], ctx: { le: 10 } }),
    ]);
    const badType = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'chat', payload: {} } });
    expect(badType.json.detail[0]).toMatchObject({ type: 'literal_error', loc: ['body', 'task_type'] });
    expect((await getBalance(stack.db, client.account_id))?.held_points).toBe('0');
  });

  test('a task that would overdraw the account is 402 insufficient_balance and creates nothing', async () => {
    await solver();
    const client = await registerAccount(stack.url, '5');
    const response = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com' } } });
    expect(response.status).toBe(402);
    expect(response.json.error.type).toBe('insufficient_balance');
    expect(response.json.error.message).toContain('deposit points or lower max_price_points');
    expect((await getBalance(stack.db, client.account_id))?.available_points).toBe('5');
  });

  test('where the request cannot set max_price_points, the 402 says only to deposit points', async () => {
    await solver();
    const client = await registerAccount(stack.url, '5');
    const response = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com' } });
    expect(response.status).toBe(402);
    expect(response.json.error).toMatchObject({ type: 'insufficient_balance', required_points: '10' });
    expect(response.json.error.message).toContain('deposit points');
    expect(response.json.error.message).not.toContain('max_price_points');
  });

  test('another account\'s task and unknown ids are 404 task_not_found', async () => {
    await solver();
    const owner = await registerAccount(stack.url, '100');
    const other = await registerAccount(stack.url, '100');
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: owner.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com' } } });
    expect((await api(stack.url, 'GET', `/v1/tasks/${created.json.task_id}`, { headers: other.auth })).json.error.type).toBe('task_not_found');
    expect((await api(stack.url, 'GET', '/v1/tasks/task_nope', { headers: owner.auth })).status).toBe(404);
    // Let the task finish here, so it cannot be reassigned to the next test's solvers.
    await poll(owner, created.json.task_id);
  });

  test('a solver that errors is replaced; the task is charged once at the second solver\'s price', async () => {
    const failing = await solver({ behaviour: 'error', price: '1' });
    const good = await solver({ price: '3' });
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/r' } });
    expect(fetched.status).toBe(200);
    const record = (await api(stack.url, 'GET', `/v1/tasks/${fetched.json.task_id}`, { headers: client.auth })).json;
    expect(record.attempts.map((attempt: { solver_id: string; outcome: string }) => [attempt.solver_id, attempt.outcome])).toEqual([
      [failing.solverId, 'error'],
      [good.solverId, 'completed'],
    ]);
    expect(record.price_points).toBe('3');
    expect((await getBalance(stack.db, client.account_id))).toMatchObject({ available_points: '97', held_points: '0', lifetime_spent_points: '3' });
    expect((await getBalance(stack.db, failing.solverId))?.available_points).toBe('0');
    expect((await getBalance(stack.db, good.solverId))?.available_points).toBe('2.7');
  });

  test('a solver that never accepts is replaced after the acceptance deadline and told to cancel', async () => {
    const silent = await solver({ behaviour: 'never_accept', price: '1' });
    const good = await solver({ price: '2' });
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/s' } });
    expect(fetched.status).toBe(200);
    const record = (await api(stack.url, 'GET', `/v1/tasks/${fetched.json.task_id}`, { headers: client.auth })).json;
    expect(record.attempts.map((attempt: { outcome: string }) => attempt.outcome)).toEqual(['rejected', 'completed']);
    expect(record.solver_id).toBe(good.solverId);
    expect(silent.cancels.map((cancel) => cancel.reason)).toEqual(['accept_timeout']);
  });

  test('a solver that disconnects mid-task is replaced', async () => {
    const dropping = await solver({ behaviour: 'disconnect_after_accept', price: '1' });
    const good = await solver({ price: '2' });
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/d' } });
    expect(fetched.status).toBe(200);
    const record = (await api(stack.url, 'GET', `/v1/tasks/${fetched.json.task_id}`, { headers: client.auth })).json;
    expect(record.attempts.map((attempt: { solver_id: string; outcome: string }) => [attempt.solver_id, attempt.outcome])).toEqual([
      [dropping.solverId, 'disconnected'],
      [good.solverId, 'completed'],
    ]);
    expect((await getBalance(stack.db, client.account_id))?.lifetime_spent_points).toBe('2');
    // Its own disconnect is its failure: only the service's view of itself makes an attempt a platform fault.
    const stats = await api(stack.url, 'GET', '/v1/solver/stats', { headers: { Authorization: `Bearer ${dropping.apiKey}` } });
    expect(stats.json).toMatchObject({ attempts: 1, failed: 1 });
  });

  test('a malformed result is a failed attempt and is never paid', async () => {
    const bad = await solver({ behaviour: 'invalid_result', price: '1' });
    await solver({ price: '2' });
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/m' } });
    const record = (await api(stack.url, 'GET', `/v1/tasks/${fetched.json.task_id}`, { headers: client.auth })).json;
    expect(record.attempts[0]).toMatchObject({ solver_id: bad.solverId, outcome: 'invalid_result' });
    expect((await getBalance(stack.db, bad.solverId))?.lifetime_earned_points).toBe('0');
  });

  test('when every attempt fails the task fails, the whole hold is released, and the convenience call is 502', async () => {
    await solver({ behaviour: 'error', price: '1' });
    await solver({ behaviour: 'error', price: '1' });
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/f' } });
    expect(fetched.status).toBe(502);
    expect(fetched.json.error).toMatchObject({ type: 'solver_failed', task_id: expect.any(String) });
    const record = (await api(stack.url, 'GET', `/v1/tasks/${fetched.json.error.task_id}`, { headers: client.auth })).json;
    expect(record.status).toBe('failed');
    expect(record.attempts).toHaveLength(2);
    expect(record.error.type).toBe('solver_failed');
    expect(record).toMatchObject({ held_points: '10', hold_status: 'released', charged_points: '0' });
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '100', held_points: '0', lifetime_spent_points: '0' });
    await expectLedgerExact(client.account_id);
  });

  test('a non-retryable solver error fails the task at once, without trying other solvers', async () => {
    await solver({
      price: '1',
      behaviour: (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        self.send({ type: 'error', attempt_id: frame.attempt_id, error: { type: 'target_blocked', message: 'refused target' }, retryable: false });
      },
    });
    const spare = await solver({ price: '2' });
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/nr' } });
    expect(fetched.status).toBe(502);
    expect(fetched.json.error.message).toContain('refused target');
    expect(spare.received).toHaveLength(0);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '100', held_points: '0' });
  });

  test('the attempt limit bounds retries', async () => {
    for (let i = 0; i < 4; i++) await solver({ behaviour: 'error', price: '1' });
    const client = await registerAccount(stack.url, '100');
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com' } } });
    const done = await poll(client, created.json.task_id);
    expect(done.status).toBe('failed');
    expect(done.attempts).toHaveLength(3);
  });

  test('a queued task nobody takes times out at its deadline and releases its hold; the convenience call is 504 or 503', async () => {
    const client = await registerAccount(stack.url, '100');
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'q' }, timeout_seconds: 2, max_price_points: '4' } });
    expect(created.json.status).toBe('queued');
    expect((await getBalance(stack.db, client.account_id))?.held_points).toBe('4');
    const done = await poll(client, created.json.task_id);
    expect(done).toMatchObject({ status: 'timed_out', error: { type: 'task_timeout' }, attempts: [] });
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '100', held_points: '0' });
    const unavailable = await api(stack.url, 'POST', '/v1/search', { headers: client.auth, body: { query: 'q' } });
    expect(unavailable.status).toBe(503);
    expect(unavailable.json.error.type).toBe('no_solver_available');
  });

  test('a convenience call whose solver stays silent past the deadline is 504 with the task id', async () => {
    await solver({ behaviour: 'accept_then_silent' });
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/t', timeout: 2 } });
    expect(fetched.status).toBe(504);
    expect(fetched.json.error).toMatchObject({ type: 'task_timeout', task_id: expect.any(String) });
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '100', held_points: '0' });
  });

  test('solvers priced above the task\'s max price are not matched', async () => {
    await solver({ price: '50' });
    const client = await registerAccount(stack.url, '100');
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com' }, max_price_points: 5, timeout_seconds: 1 } });
    const done = await poll(client, created.json.task_id);
    expect(done.status).toBe('timed_out');
  });

  test('max_concurrent is never exceeded', async () => {
    let running = 0;
    let peak = 0;
    const slow = await solver({
      maxConcurrent: 2,
      behaviour: (frame, self) => {
        running += 1;
        peak = Math.max(peak, running);
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        setTimeout(() => {
          running -= 1;
          self.send({ type: 'result', attempt_id: frame.attempt_id, result: { results: [] } });
        }, 300);
      },
      taskTypes: ['web_search'],
    });
    const client = await registerAccount(stack.url, '100');
    const responses = await Promise.all(Array.from({ length: 6 }, () => api(stack.url, 'POST', '/v1/search', { headers: client.auth, body: { query: 'x' } })));
    expect(responses.map((response) => response.status)).toEqual([200, 200, 200, 200, 200, 200]);
    expect(peak).toBe(2);
    expect(slow.received).toHaveLength(6);
  });

  test('stray and malformed frames are ignored or answered with protocol_error, without closing', async () => {
    const noisy = await solver();
    noisy.send({ type: 'result', attempt_id: 'not-current', result: {} });
    noisy.socket.send('not json');
    noisy.sendUnchecked({ type: 'accept' });
    await waitFor(() => noisy.protocolErrors.length === 2);
    const client = await registerAccount(stack.url, '100');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/p' } });
    expect(fetched.status).toBe(200);
  });

  test('the WebSocket refuses a missing or bad key with HTTP 401 before the upgrade', async () => {
    const refusal = (headers: Record<string, string>) =>
      new Promise<{ status: number; body: any }>((resolve, reject) => {
        const socket = new WebSocket(`${stack.url.replace('http', 'ws')}/v1/solver/connect`, { headers });
        socket.on('open', () => reject(new Error('the upgrade was accepted')));
        socket.on('unexpected-response', (_request, response) => {
          let text = '';
          response.on('data', (chunk: Buffer) => (text += chunk.toString()));
          response.on('end', () => resolve({ status: response.statusCode ?? 0, body: JSON.parse(text) }));
        });
      });
    expect(await refusal({})).toEqual({ status: 401, body: { error: { type: 'authentication_required', message: expect.any(String) } } });
    expect((await refusal({ Authorization: 'Bearer tmk_wrong' })).body.error.type).toBe('invalid_api_key');
  });

  test('capabilities: unknown values are 422 literal_error; a strong chat claim needs an allowlisted model; max_concurrent is at most 10,000', async () => {
    const account = await registerAccount(stack.url);
    const base = { task_type: 'proxy_fetch', tier: 'standard', billing_type: 'per_request', fulfillment_path: 'http', provider_name: 'p', model_name: 'm', marginal_cost: '0', min_price_points: 1, max_concurrent: 1 };
    const unknown = await api(stack.url, 'POST', '/v1/solver/capabilities', { headers: account.auth, body: [{ ...base, tier: 'gold' }] });
    expect(unknown.status).toBe(422);
    expect(unknown.json.detail[0]).toMatchObject({ type: 'literal_error', loc: ['body', 0, 'tier'] });
    const strong = await api(stack.url, 'POST', '/v1/solver/capabilities', { headers: account.auth, body: [{ ...base, task_type: 'chat_completion', tier: 'strong', model_name: 'tiny-llm' }] });
    expect(strong.status).toBe(422);
    expect(strong.json.detail[0].loc).toEqual(['body', 0, 'tier']);
    const ok = await api(stack.url, 'POST', '/v1/solver/capabilities', { headers: account.auth, body: [{ ...base, task_type: 'chat_completion', tier: 'strong', model_name: 'gpt-4o' }, base] });
    expect(ok.status).toBe(200);
    expect(ok.json.capabilities).toHaveLength(2);
    const replaced = await api(stack.url, 'POST', '/v1/solver/capabilities', { headers: account.auth, body: [base] });
    expect(replaced.json.capabilities).toHaveLength(1);
    const tooMany = await api(stack.url, 'POST', '/v1/solver/capabilities', { headers: account.auth, body: [{ ...base, max_concurrent: 10_001 }] });
    expect(tooMany.status).toBe(422);
    expect(tooMany.json.detail[0]).toMatchObject({ type: 'less_than_equal', loc: ['body', 0, 'max_concurrent'], ctx: { le: 10_000 } });
    const most = await api(stack.url, 'POST', '/v1/solver/capabilities', { headers: account.auth, body: [{ ...base, max_concurrent: 10_000 }] });
    expect(most.json.capabilities[0].max_concurrent).toBe(10_000);
  });

  test('solver stats count attempts and earnings', async () => {
    const worker = await solver({ price: '2' });
    const client = await registerAccount(stack.url, '100');
    await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/st' } });
    const stats = await api(stack.url, 'GET', '/v1/solver/stats', { headers: { Authorization: `Bearer ${worker.apiKey}` } });
    expect(stats.json).toMatchObject({ solver_id: worker.solverId, connected: true, attempts: 1, completed: 1, failed: 0, success_rate: 1, lifetime_earned_points: '1.8' });
  });

  test('an admin completes a queued task once, paying the named solver; a second completion is 409', async () => {
    const client = await registerAccount(stack.url, '100');
    const payee = await registerAccount(stack.url);
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'web_search', payload: { query: 'manual' }, max_price_points: '6', timeout_seconds: 60 } });
    const admin = { 'X-Admin-API-Key': ADMIN_KEY };
    const result = { results: [{ title: 'Manual', url: 'https://example.com', snippet: 'by hand' }] };
    const completed = await api(stack.url, 'POST', `/v1/admin/tasks/${created.json.task_id}/complete`, { headers: admin, body: { solver_id: payee.account_id, result } });
    expect(completed.status).toBe(200);
    expect(completed.json).toMatchObject({ status: 'completed', result, solver_id: payee.account_id, price_points: '6' });
    const again = await api(stack.url, 'POST', `/v1/admin/tasks/${created.json.task_id}/complete`, { headers: admin, body: { solver_id: payee.account_id, result } });
    expect(again.status).toBe(409);
    expect(again.json.error.type).toBe('task_already_finished');
    expect((await getBalance(stack.db, payee.account_id))?.available_points).toBe('5.4');
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '94', held_points: '0', lifetime_spent_points: '6' });
    const unknown = await api(stack.url, 'POST', '/v1/admin/tasks/task_nope/complete', { headers: admin, body: { solver_id: payee.account_id, result } });
    expect(unknown.status).toBe(404);
  });

  test('an admin completion while a solver holds the attempt cancels that attempt', async () => {
    const busy = await solver({ behaviour: 'accept_then_silent' });
    const client = await registerAccount(stack.url, '100');
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com' }, timeout_seconds: 60 } });
    await waitFor(() => busy.received.length === 1);
    const result = { url: 'https://example.com', final_url: 'https://example.com', status_code: 200, content_type: 'markdown', content: 'x', title: 'x' };
    const completed = await api(stack.url, 'POST', `/v1/admin/tasks/${created.json.task_id}/complete`, { headers: { 'X-Admin-API-Key': ADMIN_KEY }, body: { solver_id: busy.solverId, result } });
    expect(completed.json.status).toBe('completed');
    await waitFor(() => busy.cancels.length === 1);
    expect(completed.json.attempts[0].outcome).toBe('cancelled');
    expect((await getBalance(stack.db, busy.solverId))?.available_points).toBe('0.9');
  });

  test("an admin completion stops a solver still at work at once, not at its attempt's next heartbeat to Temporal", async () => {
    const busy = await solver({ behaviour: 'accept_then_silent' });
    const client = await registerAccount(stack.url, '100');
    const created = await api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com' }, timeout_seconds: 60 } });
    await waitFor(() => busy.received.length === 1);
    // Past the activity's first heartbeat (sent at once, 1 s in); the next one would wait 8 s (the SDK's
    // throttle), beyond this stack's 3 s attempt deadline, whose cancel says "deadline".
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const result = { url: 'https://example.com', final_url: 'https://example.com', status_code: 200, content_type: 'markdown', content: 'x', title: 'x' };
    const completed = await api(stack.url, 'POST', `/v1/admin/tasks/${created.json.task_id}/complete`, { headers: { 'X-Admin-API-Key': ADMIN_KEY }, body: { solver_id: busy.solverId, result } });
    expect(completed.json.status).toBe('completed');
    await waitFor(() => busy.cancels.length === 1);
    expect(busy.cancels[0]).toEqual({ type: 'cancel', attempt_id: busy.received[0].attempt_id, reason: 'cancelled' });
    expect(busy.received).toHaveLength(1);
  });

  test('an Idempotency-Key retry returns the first task instead of charging twice', async () => {
    await solver();
    const client = await registerAccount(stack.url, '100');
    const headers = { ...client.auth, 'Idempotency-Key': 'retry-1' };
    const first = await api(stack.url, 'POST', '/v1/tasks', { headers, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com' } } });
    const second = await api(stack.url, 'POST', '/v1/tasks', { headers, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com' } } });
    expect(second.json.task_id).toBe(first.json.task_id);
    await poll(client, first.json.task_id);
    expect((await getBalance(stack.db, client.account_id))?.lifetime_spent_points).toBe('1');
  });

  test('an Idempotency-Key reused with another body, or at another endpoint, is 422 idempotency_key_reused and creates nothing', async () => {
    const worker = await solver();
    const client = await registerAccount(stack.url, '100');
    const headers = { ...client.auth, 'Idempotency-Key': 'reused-1' };
    const body = { task_type: 'proxy_fetch', payload: { url: 'https://example.com/first' }, max_price_points: '5' };
    const first = await api(stack.url, 'POST', '/v1/tasks', { headers, body });
    expect(first.status).toBe(200);
    // The same body with its keys in another order is the same request.
    const same = await api(stack.url, 'POST', '/v1/tasks', { headers, body: { max_price_points: '5', payload: body.payload, task_type: 'proxy_fetch' } });
    expect([same.status, same.json.task_id]).toEqual([200, first.json.task_id]);
    for (const other of [{ ...body, payload: { url: 'https://example.com/second' } }, { ...body, max_price_points: '6' }, { ...body, timeout_seconds: 30 }]) {
      const refused = await api(stack.url, 'POST', '/v1/tasks', { headers, body: other });
      expect([refused.status, refused.json.error?.type]).toEqual([422, 'idempotency_key_reused']);
    }
    // The same key at a convenience endpoint is another request: the raw PNG it asks for is refused, never a 500.
    const png = await fetch(`${stack.url}/v1/screenshot`, {
      method: 'POST',
      headers: { ...headers, Accept: 'image/png', 'content-type': 'application/json' },
      body: JSON.stringify({ url: 'https://example.com/first' }),
    });
    expect([png.status, ((await png.json()) as { error: { type: string } }).error.type]).toEqual([422, 'idempotency_key_reused']);
    // A convenience endpoint keeps its own key's first result, and refuses that key at /v1/tasks.
    const shotHeaders = { ...client.auth, 'Idempotency-Key': 'reused-2' };
    const shot = await api(stack.url, 'POST', '/v1/screenshot', { headers: shotHeaders, body: { url: 'https://example.com/shot' } });
    const shotAgain = await fetch(`${stack.url}/v1/screenshot`, {
      method: 'POST',
      headers: { ...shotHeaders, Accept: 'image/png', 'content-type': 'application/json' },
      body: JSON.stringify({ url: 'https://example.com/shot' }),
    });
    expect([shotAgain.status, shotAgain.headers.get('content-type'), shotAgain.headers.get('x-task-id')]).toEqual([200, 'image/png', shot.json.task_id]);
    const asTask = await api(stack.url, 'POST', '/v1/tasks', { headers: shotHeaders, body: { task_type: 'screenshot', payload: { url: 'https://example.com/shot' } } });
    expect([asTask.status, asTask.json.error?.type]).toEqual([422, 'idempotency_key_reused']);
    await poll(client, first.json.task_id);
    expect(worker.received).toHaveLength(2);
    expect((await getBalance(stack.db, client.account_id))?.lifetime_spent_points).toBe('2');
    await expectLedgerExact(client.account_id);
  });
});
