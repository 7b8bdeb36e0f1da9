import { balanceFromEntries, getBalance } from '../src/db/ledger';
import { suiteSolvers, waitFor } from './support/fake-solver';
import { api, registerAccount, startTestStack, type TestStack } from './support/stack';

const FAST = { ACCEPT_TIMEOUT_MS: '1000', ATTEMPT_TIMEOUT_SECONDS: '5', HEARTBEAT_INTERVAL_MS: '1000' };

/** POST /v1/tasks/{id}/cancel on a stack of two API nodes: the client on one, the solver on the other. */
describe('cancelling a task', () => {
  let stack: TestStack;
  const solverOnB = suiteSolvers(() => stack.api[1].url);
  const urlA = () => stack.api[0].url;

  beforeAll(async () => {
    stack = await startTestStack({ apiNodes: 2, env: FAST });
  });
  afterAll(async () => {
    await stack.close();
  });

  const expectLedgerExact = async (accountId: string) => {
    expect(await getBalance(stack.db, accountId)).toEqual(await balanceFromEntries(stack.db, accountId));
  };

  test("a running task stops at once on the node holding its solver, its hold released, nothing paid", async () => {
    const busy = await solverOnB({ behaviour: 'accept_then_silent', taskTypes: ['proxy_fetch'] });
    const client = await registerAccount(urlA(), '100');
    const created = await api(urlA(), 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: 'https://example.com/c' }, timeout_seconds: 60 } });
    await waitFor(() => busy.received.length === 1);
    expect((await getBalance(stack.db, client.account_id))?.held_points).toBe('10');

    const started = Date.now();
    const cancelled = await api(urlA(), 'POST', `/v1/tasks/${created.json.task_id}/cancel`, { headers: client.auth });
    expect(cancelled.status).toBe(200);
    expect(cancelled.json).toMatchObject({ status: 'cancelled', error: { type: 'task_cancelled' }, hold_status: 'released', charged_points: '0', price_points: null });
    expect(cancelled.json.attempts).toEqual([expect.objectContaining({ solver_id: busy.solverId, outcome: 'cancelled' })]);
    // The solver's socket gets its cancel well before the attempt's 5 s deadline would have sent one.
    await waitFor(() => busy.cancels.length === 1, 2000, 20);
    expect(Date.now() - started).toBeLessThan(3000);
    expect(busy.cancels[0]).toEqual({ type: 'cancel', attempt_id: busy.received[0].attempt_id, reason: 'cancelled' });

    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '100', held_points: '0', lifetime_spent_points: '0' });
    expect(await getBalance(stack.db, busy.solverId)).toMatchObject({ available_points: '0', lifetime_earned_points: '0' });
    await expectLedgerExact(client.account_id);
    await expectLedgerExact(busy.solverId);
    // Not handed to another solver, and a late result of the stopped attempt changes nothing.
    busy.send({ type: 'result', attempt_id: busy.received[0].attempt_id, result: { url: 'https://example.com/c', final_url: 'https://example.com/c', status_code: 200, content_type: 'markdown', content: 'late', title: 'late' } });
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(busy.received).toHaveLength(1);
    expect((await api(urlA(), 'GET', `/v1/tasks/${created.json.task_id}`, { headers: client.auth })).json).toMatchObject({ status: 'cancelled', result: null });
    await expectLedgerExact(client.account_id);
  });

  test('a queued task is cancelled at once; cancelling again answers the same; a finished task is 409; another account\'s is 404', async () => {
    const client = await registerAccount(urlA(), '100');
    const stranger = await registerAccount(urlA());
    const created = await api(urlA(), 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'screenshot', payload: { url: 'https://example.com/q' }, timeout_seconds: 60 } });
    expect(created.json.status).toBe('queued');
    expect((await api(urlA(), 'POST', `/v1/tasks/${created.json.task_id}/cancel`, { headers: stranger.auth })).status).toBe(404);

    const first = await api(urlA(), 'POST', `/v1/tasks/${created.json.task_id}/cancel`, { headers: client.auth });
    expect(first.json).toMatchObject({ status: 'cancelled', held_points: '10', charged_points: '0' });
    const second = await api(stack.api[1].url, 'POST', `/v1/tasks/${created.json.task_id}/cancel`, { headers: client.auth });
    expect(second.status).toBe(200);
    expect(second.json).toEqual(first.json);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '100', held_points: '0' });

    await solverOnB({ taskTypes: ['web_search'] });
    const done = await api(urlA(), 'POST', '/v1/search', { headers: client.auth, body: { query: 'x' } });
    const finished = await api(urlA(), 'POST', `/v1/tasks/${done.headers.get('x-task-id')}/cancel`, { headers: client.auth });
    expect(finished.status).toBe(409);
    expect(finished.json.error).toMatchObject({ type: 'task_already_finished', status: 'completed' });
    expect((await api(urlA(), 'GET', '/v1/tasks?status=cancelled', { headers: client.auth })).json.data.map((task: { task_id: string }) => task.task_id)).toEqual([created.json.task_id]);
    await expectLedgerExact(client.account_id);
  });

  test('a convenience call waiting on a task that is cancelled answers 409 task_cancelled with its task id', async () => {
    await solverOnB({ behaviour: 'accept_then_silent', taskTypes: ['proxy_fetch'] });
    const client = await registerAccount(urlA(), '100');
    const waiting = api(urlA(), 'POST', '/v1/fetch', { headers: client.auth, body: { url: 'https://example.com/w' } });
    const running = await waitFor(async () => (await api(urlA(), 'GET', '/v1/tasks?status=assigned', { headers: client.auth })).json.data[0]);
    await api(urlA(), 'POST', `/v1/tasks/${running.task_id}/cancel`, { headers: client.auth });
    const answer = await waiting;
    expect(answer.status).toBe(409);
    expect(answer.json.error).toMatchObject({ type: 'task_cancelled', task_id: running.task_id });
  });
});
