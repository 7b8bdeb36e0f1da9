import { sql } from 'slonik';
import { z } from 'zod';
import type { Client } from '@temporalio/client';
import { getBalance } from '../src/db/ledger';
import { registry } from '../src/metrics/metrics';
import { createTemporalClient } from '../src/temporal/connection';
import { taskWorkflowId } from '../src/contract/workflows';
import { FakeSolver, SAMPLE_RESULTS, waitFor, type TaskFrame } from './support/fake-solver';
import { ADMIN_KEY, api, registerAccount, startTestStack, testEndpoints, type TestStack } from './support/stack';

/** Attempts sent early as their slot was handed on, by how they left their node's keeping. */
async function handedEarly(end: 'taken_over' | 'abandoned'): Promise<number> {
  const metric = await registry.getSingleMetric('marketplace_early_attempts_total')!.get();
  return metric.values.find((value) => value.labels.occasion === 'handed' && value.labels.end === end)?.value ?? 0;
}

/**
 * The market under scarcity, end to end: tasks wait in line for a busy solver, are handed its slot in
 * arrival order whichever node they came through, and a request the queue cannot serve is refused at once.
 */
describe('the queue', () => {
  jest.setTimeout(60_000);
  let stack: TestStack;
  let temporal: Client;
  beforeAll(async () => {
    stack = await startTestStack({ apiNodes: 2, env: { QUEUE_LIMIT_PER_TASK_TYPE: '3' } });
    temporal = await createTemporalClient(testEndpoints().temporalAddress, stack.config.temporalNamespace);
  });
  afterAll(async () => {
    await temporal?.connection.close();
    await stack?.close();
  });

  let solvers: FakeSolver[] = [];
  afterEach(async () => {
    await Promise.all(solvers.map((solver) => solver.close()));
    solvers = [];
  });

  /** A one-slot screenshot solver on `node` that keeps each task until released, in the order it got them. */
  async function heldSolver(node: string) {
    const held: TaskFrame[] = [];
    const solver = await FakeSolver.start(node, {
      price: '1',
      taskTypes: ['screenshot'],
      maxConcurrent: 1,
      behaviour: (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        held.push(frame);
      },
    });
    solvers.push(solver);
    const release = (frame: TaskFrame) => solver.send({ type: 'result', attempt_id: frame.attempt_id, result: SAMPLE_RESULTS.screenshot(frame.payload) });
    return { solver, held, release };
  }

  const post = (node: string, auth: Record<string, string>, extra: Record<string, unknown> = {}) =>
    api(node, 'POST', '/v1/tasks', { headers: auth, body: { task_type: 'screenshot', payload: { url: 'https://example.com/q' }, max_price_points: 2, ...extra } });

  test('tasks created on two nodes wait in line, visible to their clients and the admin, and the slot freed on one node reaches them in arrival order', async () => {
    const [one, two] = stack.api.map((node) => node.url);
    const { held, release } = await heldSolver(one);
    const client = await registerAccount(one, '100');
    const first = await post(one, client.auth);
    expect(first.json.status).toBe('assigned');
    // Alternating nodes: the waiting tasks' workflows and the node holding the solver's socket differ.
    const waiting: string[] = [];
    for (const node of [two, one, two]) {
      const created = await post(node, client.auth);
      expect(created.json.status).toBe('queued');
      waiting.push(created.json.task_id);
    }
    const queued = await api(two, 'GET', `/v1/tasks/${waiting[2]}`, { headers: client.auth });
    expect(queued.json).toMatchObject({ status: 'queued', queue: { position: 3 } });
    expect(queued.json.queue.waited_seconds).toBeGreaterThanOrEqual(0);
    const status = await api(two, 'GET', '/v1/admin/status', { headers: { 'X-Admin-API-Key': ADMIN_KEY } });
    expect(status.json.queues.screenshot).toMatchObject({ queued: 3, free_slots: 0 });
    expect(status.json.queues.screenshot.oldest_wait_seconds).toBeGreaterThanOrEqual(0);
    const order: string[] = [];
    for (let i = 0; i < 4; i++) {
      const frame = await waitFor(() => held[i]);
      order.push(frame.task_id);
      release(frame);
    }
    expect(order).toEqual([first.json.task_id, ...waiting]);
    for (const taskId of order) {
      await waitFor(async () => (await api(one, 'GET', `/v1/tasks/${taskId}`, { headers: client.auth })).json.status === 'completed');
    }
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '96', held_points: '0', lifetime_spent_points: '4' });
  });

  test('tasks arriving at once on two nodes are served in the order they arrived', async () => {
    const nodes = stack.api.map((node) => node.url);
    const { held, release } = await heldSolver(nodes[0]);
    const client = await registerAccount(nodes[0], '100');
    const first = await post(nodes[0], client.auth);
    const burst = await Promise.all([0, 1, 2].map((i) => post(nodes[i % 2], client.auth)));
    expect(burst.map((r) => r.status)).toEqual([200, 200, 200]);
    const arrival = await stack.db.anyFirst(sql.type(z.object({ task_id: z.string() }))`
      SELECT task_id FROM tasks WHERE task_id = ANY(${sql.array(burst.map((r) => r.json.task_id), 'text')}) ORDER BY created_at, task_id`);
    const order: string[] = [];
    for (let i = 0; i < 4; i++) {
      const frame = await waitFor(() => held[i]);
      order.push(frame.task_id);
      release(frame);
    }
    expect(order).toEqual([first.json.task_id, ...arrival]);
  });

  test('a full queue, or one too slow for the deadline, refuses at once with 429 solvers_busy and Retry-After, holding nothing', async () => {
    const [one, two] = stack.api.map((node) => node.url);
    const { held, release } = await heldSolver(one);
    const client = await registerAccount(one, '100');
    const created: string[] = [];
    for (let i = 0; i < 2; i++) created.push((await post(i % 2 ? two : one, client.auth)).json.task_id);
    // One running, one waiting: a solver with no measured tasks yet counts a second a task, so its one
    // slot cannot serve a second waiting task within a one-second deadline.
    const late = await post(one, client.auth, { timeout_seconds: 1 });
    expect(late.status).toBe(429);
    expect(late.json.error).toMatchObject({ type: 'solvers_busy', queued_tasks: 1 });
    for (let i = 2; i < 4; i++) created.push((await post(i % 2 ? two : one, client.auth)).json.task_id);
    // One running, three waiting: the limit.
    const before = await getBalance(stack.db, client.account_id);
    expect(before).toMatchObject({ held_points: '8' });
    const started = Date.now();
    const refused = await post(two, client.auth);
    expect(Date.now() - started).toBeLessThan(1000);
    expect(refused.status).toBe(429);
    expect(refused.json.error).toMatchObject({ type: 'solvers_busy', queued_tasks: 3 });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    expect(await getBalance(stack.db, client.account_id)).toEqual(before);
    const tasks = await stack.db.oneFirst(sql.type(z.object({ n: z.number() }))`SELECT count(*)::int AS n FROM tasks WHERE account_id = ${client.account_id}`);
    expect(tasks).toBe(4);
    for (let i = 0; i < 4; i++) release(await waitFor(() => held[i]));
    for (const taskId of created) {
      await waitFor(async () => (await api(one, 'GET', `/v1/tasks/${taskId}`, { headers: client.auth })).json.status === 'completed');
    }
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '96', held_points: '0' });
  });
  test("a slot freed on the node holding the solver's socket sends the next waiting task from there at once, and its workflow's activity takes that attempt over", async () => {
    const [one, two] = stack.api.map((node) => node.url);
    const { solver, held, release } = await heldSolver(one);
    const client = await registerAccount(one, '100');
    const first = await post(one, client.auth);
    // Waiting tasks whose workflows were started through either node.
    const waiting = [(await post(two, client.auth)).json.task_id, (await post(one, client.auth)).json.task_id];
    const takenOver = await handedEarly('taken_over');
    for (let i = 0; i < 3; i++) release(await waitFor(() => held[i]));
    for (const taskId of [first.json.task_id, ...waiting]) {
      await waitFor(async () => (await api(one, 'GET', `/v1/tasks/${taskId}`, { headers: client.auth })).json.status === 'completed');
    }
    // Each result, stored on the solver's node, handed its slot on there; the task went out with the
    // handoff, and the dispatch activity found it running instead of sending it again.
    expect(await handedEarly('taken_over')).toBe(takenOver + 2);
    expect(solver.received.map((frame) => frame.task_id)).toEqual([first.json.task_id, ...waiting]);
    expect(solver.cancels).toEqual([]);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '97', held_points: '0', lifetime_spent_points: '3' });
  });

  test('an attempt sent early to a task whose workflow is gone is cancelled at the solver, and its slot goes to the next waiting task', async () => {
    const [one] = stack.api.map((node) => node.url);
    const { solver, held, release } = await heldSolver(one);
    const client = await registerAccount(one, '100');
    const first = await post(one, client.auth);
    const orphan = (await post(one, client.auth)).json.task_id;
    const next = (await post(one, client.auth)).json.task_id;
    await waitFor(async () => (await stack.db.oneFirst(sql.type(z.object({ started: z.boolean() }))`
      SELECT workflow_started_at IS NOT NULL AS started FROM tasks WHERE task_id = ${orphan}`)));
    // An operator terminates the waiting workflow: nothing will take the attempt over.
    await temporal.workflow.getHandle(taskWorkflowId(orphan)).terminate('test: the workflow is gone');
    const abandoned = await handedEarly('abandoned');
    release(await waitFor(() => held[0]));
    // The freed slot is handed to the orphan, whose task goes out at once, then is cancelled once its
    // workflow turns out to be gone; the slot goes on to the next task.
    const sentEarly = await waitFor(() => held[1]);
    expect(sentEarly.task_id).toBe(orphan);
    await waitFor(() => solver.cancels.find((cancel) => cancel.attempt_id === sentEarly.attempt_id));
    const served = await waitFor(() => held[2]);
    expect(served.task_id).toBe(next);
    release(served);
    await waitFor(async () => (await api(one, 'GET', `/v1/tasks/${next}`, { headers: client.auth })).json.status === 'completed');
    expect(await handedEarly('abandoned')).toBe(abandoned + 1);
    const orphaned = await api(one, 'GET', `/v1/tasks/${orphan}`, { headers: client.auth });
    expect(orphaned.json.attempts).toEqual([expect.objectContaining({ outcome: 'cancelled' })]);
    expect((await api(one, 'GET', `/v1/tasks/${first.json.task_id}`, { headers: client.auth })).json.status).toBe('completed');
  });
});
