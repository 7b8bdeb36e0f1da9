import { markWorkflowStarted } from '../src/db/tasks/create';
import { createTask, failTask } from './support/tasks';
import { api, registerAccount, startTestStack, type TestStack } from './support/stack';

describe('GET /v1/tasks: an account\'s tasks, newest first, by cursor', () => {
  let stack: TestStack;

  beforeAll(async () => {
    stack = await startTestStack();
  });
  const seeded: string[] = [];
  afterAll(async () => {
    // Ended, so that nothing else in the test database (matching, the sweep) ever takes them up.
    for (const taskId of seeded) await failTask(stack.db, taskId, 'solver_failed', 'test', stack.config.trust);
    await stack.close();
  });

  /**
   * Tasks with their holds, as created, without workflows: listing reads only rows. Marked started, so
   * the workers' stranded-task sweep leaves them alone.
   */
  const seed = (accountId: string, n: number, taskType = 'web_search') =>
    (async () => {
      const ids: string[] = [];
      for (let i = 0; i < n; i++) {
        const taskId = `task_list${Date.now().toString(36)}${i.toString().padStart(4, '0')}${Math.random().toString(36).slice(2, 6)}`;
        await createTask(stack.db, { taskId, accountId, taskType, payload: { query: `q${i}` }, maxPricePoints: '1', timeoutSeconds: 60, workflowId: `task-${taskId}` }, stack.config.trust);
        await markWorkflowStarted(stack.db, taskId);
        seeded.push(taskId);
        ids.push(taskId);
      }
      return ids;
    })();

  test('pages through 1,000 tasks with no duplicate and no gap while new tasks are being created', async () => {
    const client = await registerAccount(stack.url, '5000');
    const other = await registerAccount(stack.url, '100');
    const existing = await seed(client.account_id, 1000);
    await seed(other.account_id, 5);

    let creating = true;
    const createdMeanwhile = (async () => {
      const ids: string[] = [];
      while (creating) ids.push(...(await seed(client.account_id, 1)));
      return ids;
    })();

    const seen: string[] = [];
    let cursor: string | null = null;
    let previous: { created_at: string; task_id: string } | undefined;
    do {
      const query: string = `?limit=37${cursor ? `&cursor=${cursor}` : ''}`;
      const page = await api(stack.url, 'GET', `/v1/tasks${query}`, { headers: client.auth });
      expect(page.status).toBe(200);
      for (const task of page.json.data) {
        if (previous) expect(task.created_at <= previous.created_at).toBe(true);
        previous = task;
        seen.push(task.task_id);
      }
      expect(page.json.has_more).toBe(page.json.next_cursor !== null);
      cursor = page.json.next_cursor;
    } while (cursor);
    creating = false;
    const meanwhile = await createdMeanwhile;

    expect(meanwhile.length).toBeGreaterThan(0);
    expect(new Set(seen).size).toBe(seen.length);
    // Every task that existed when paging began, exactly once; tasks created since appear only before them.
    expect(seen.filter((id) => existing.includes(id)).sort()).toEqual([...existing].sort());
    expect(seen.every((id) => existing.includes(id) || meanwhile.includes(id))).toBe(true);
  }, 120_000);

  test('filters by status, task type and creation time; records carry their cost and no result', async () => {
    const client = await registerAccount(stack.url, '100');
    const [search] = await seed(client.account_id, 1, 'web_search');
    const middle = new Date().toISOString();
    await new Promise((resolve) => setTimeout(resolve, 5));
    const [fetch] = await seed(client.account_id, 1, 'proxy_fetch');

    const list = async (query: string) => {
      const page = await api(stack.url, 'GET', `/v1/tasks?${query}`, { headers: client.auth });
      expect(page.status).toBe(200);
      return page.json.data.map((task: { task_id: string }) => task.task_id);
    };
    expect(await list('')).toEqual([fetch, search]);
    expect(await list('task_type=web_search')).toEqual([search]);
    expect(await list('status=queued&task_type=proxy_fetch')).toEqual([fetch]);
    expect(await list('status=completed')).toEqual([]);
    expect(await list(`created_after=${encodeURIComponent(middle)}`)).toEqual([fetch]);
    expect(await list(`created_before=${encodeURIComponent(middle)}`)).toEqual([search]);

    const page = await api(stack.url, 'GET', '/v1/tasks?limit=1', { headers: client.auth });
    expect(page.json).toMatchObject({ has_more: true, next_cursor: expect.any(String) });
    expect(page.json.data[0]).toMatchObject({ task_id: fetch, status: 'queued', held_points: '1', hold_status: 'open', charged_points: '0' });
    expect(page.json.data[0]).not.toHaveProperty('result');
  });

  test('bad filters and cursors are 422 at their query parameter', async () => {
    const client = await registerAccount(stack.url);
    const detail = async (query: string) => (await api(stack.url, 'GET', `/v1/tasks?${query}`, { headers: client.auth })).json.detail;
    expect(await detail('status=done')).toMatchObject([{ type: 'literal_error', loc: ['query', 'status'] }]);
    expect(await detail('limit=0')).toMatchObject([{ type: 'greater_than_equal', loc: ['query', 'limit'] }]);
    expect(await detail('limit=ten')).toMatchObject([{ type: 'int_parsing', loc: ['query', 'limit'] }]);
    expect(await detail('cursor=nonsense')).toMatchObject([{ type: 'value_error', loc: ['query', 'cursor'] }]);
    expect(await detail('created_after=yesterday')).toMatchObject([{ loc: ['query', 'created_after'] }]);
    expect(await detail('colour=red')).toMatchObject([{ type: 'extra_forbidden', loc: ['query', 'colour'] }]);
    expect((await api(stack.url, 'GET', '/v1/tasks')).status).toBe(401);
  });
});
