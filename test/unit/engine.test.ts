import pino from 'pino';
import type { ArtifactStore } from '../../src/artifacts/store';
import { loadConfig } from '../../src/config';
import { taskFailure } from '../../src/contract/lifecycle';
import { adminCompleteSignal, cancelTaskSignal, chatWorkflowId, taskWorkflowId, type AdminCompletion, type TaskWorkflowInput } from '../../src/contract/workflows';
import type { AttemptStops } from '../../src/dispatch/attempt-stops';
import type { Handoff } from '../../src/db/matching';
import type { NotifyBus } from '../../src/db/notify';
import type { NewTask } from '../../src/db/tasks/create';
import type { DueDelivery } from '../../src/db/webhooks';
import { TaskEngine, type CreateTaskInput } from '../../src/tasks/engine';
import { TaskFinishedWatch } from '../../src/tasks/finished';
import { FakeTemporal } from '../support/fake-temporal';
import { MemoryTaskStore } from '../support/memory-task-store';

/**
 * The task engine's branches (src/tasks/engine.ts) against a store in memory and a fake Temporal client:
 * what each call answers, what it leaves stored, and which effects it makes after its commits. The same
 * paths against PostgreSQL and Temporal are the integration tests' (test/tasks.test.ts and others).
 */

const CLIENT = 'acct_client';
const OTHER_CLIENT = 'acct_other';
const SOLVER = 'acct_solver';
const SECOND_SOLVER = 'acct_solver_2';
const config = loadConfig({});
const URL_PAYLOAD = { url: 'https://example.com/' };

async function setup() {
  const store = new MemoryTaskStore();
  store.addAccount(CLIENT, 100);
  store.addAccount(OTHER_CLIENT, 100);
  store.addAccount(SOLVER, 0);
  store.addSolver({ solverId: SOLVER, taskTypes: ['proxy_fetch', 'chat_completion'], pricePoints: '1', slots: 1 });
  const temporal = new FakeTemporal();
  // The effects, in the order they were made, beside the workflow starts.
  const effects: string[] = [];
  const handoffs: Handoff[] = [];
  const webhooks: DueDelivery[] = [];
  const stopped: string[] = [];
  const artifacts = new Map<string, Buffer>();
  const artifactStore: ArtifactStore = {
    location: 'memory',
    put: async (key, bytes, contentType) => (artifacts.set(key, bytes), { key, size: bytes.length, sha256: '', content_type: contentType }),
    get: async (key) => artifacts.get(key)!,
    delete: async (keys) => void keys.forEach((key) => artifacts.delete(key)),
  };
  // The store announces each finish as PostgreSQL's NOTIFY does; the engine's waits hear it.
  const bus = { subscribe: async (_channel: string, handler: (payload: unknown) => void) => (store.onFinished(handler), async () => undefined) };
  const finished = await TaskFinishedWatch.start(bus as unknown as NotifyBus);
  const started = temporal.starts;
  const engine = new TaskEngine({
    config,
    store,
    temporal: temporal.client,
    logger: pino({ level: 'silent' }),
    eagerStart: false,
    handoffs: { deliver: (sent) => sent?.forEach((handoff) => (handoffs.push(handoff), effects.push(`handoff ${handoff.taskId} after ${started.length} starts`))) },
    webhooks: { send: (sent) => sent?.forEach((delivery) => (webhooks.push(delivery), effects.push(`webhook ${delivery.task_id} ${delivery.event}`))) },
    artifacts: artifactStore,
    finished,
    stops: { stop: async (taskId: string) => void stopped.push(taskId) } as unknown as AttemptStops,
    // Far above any wait here: each answer comes from the store's announcement, never the workflow's result.
    resultFallbackMs: 60_000,
  });
  return { store, temporal, engine, effects, handoffs, webhooks, stopped, artifacts };
}

const fetchTask = (overrides: Partial<CreateTaskInput> = {}): CreateTaskInput => ({ accountId: CLIENT, taskType: 'proxy_fetch', payload: URL_PAYLOAD, maxPricePoints: '10', ...overrides });

/** The statements' asynchronous marks (the workflow start's) have run. */
const settled = () => new Promise((resolve) => setImmediate(resolve));

type ClientTask = NewTask & { claim?: undefined };

/** A task as a node stores it before it starts its workflow: held, matched when a slot is free. */
const storedTask = (store: MemoryTaskStore, taskId: string, overrides: Partial<ClientTask> = {}) =>
  store.createTask({ taskId, accountId: CLIENT, taskType: 'proxy_fetch', payload: URL_PAYLOAD, maxPricePoints: '10', timeoutSeconds: 60, workflowId: taskWorkflowId(taskId), ...overrides });

async function createdTask(engine: TaskEngine, overrides: Partial<CreateTaskInput> = {}) {
  const result = await engine.create(fetchTask(overrides));
  if (result.kind !== 'created') throw new Error(`not created: ${result.kind}`);
  return result.task;
}

describe('create', () => {
  test('a new task is held at its maximum price, its workflow started with its first assignment, and answered as created', async () => {
    const { store, temporal, engine } = await setup();
    const result = await engine.create(fetchTask({ timeoutSeconds: 30 }));
    expect(result).toMatchObject({ kind: 'created', task: { status: 'assigned', held_points: '10', hold_status: 'open', charged_points: '0', attempts: [] } });
    const task = (result as { task: { task_id: string } }).task;
    expect(store.balances.get(CLIENT)).toBe(90);
    expect(temporal.starts).toHaveLength(1);
    const [start] = temporal.starts;
    expect(start).toMatchObject({ workflowType: 'taskWorkflow', workflowId: taskWorkflowId(task.task_id), taskQueue: config.taskQueue, requestEagerStart: false });
    expect(start.args[0]).toMatchObject({ taskId: task.task_id, timeoutSeconds: 30, maxAttempts: config.maxTaskAttempts, firstAssignment: { solverId: SOLVER } });
    await settled();
    expect(store.workflowStarted(task.task_id)).toBe(true);
  });

  test("a task without a price or timeout of its own takes the configuration's defaults", async () => {
    const { store, engine } = await setup();
    const task = await createdTask(engine, { maxPricePoints: undefined, timeoutSeconds: undefined });
    expect(store.row(task.task_id)).toMatchObject({ max_price_points: config.defaultWebTaskPricePoints, timeout_seconds: config.defaultTaskTimeoutSeconds });
  });

  test('the same idempotency key with the same request answers the first task as existing, and starts nothing more', async () => {
    const { store, temporal, engine } = await setup();
    const idempotency = { key: 'key-1', fingerprint: 'request-a' };
    const first = await createdTask(engine, { idempotency });
    const again = await engine.create(fetchTask({ idempotency }));
    expect(again).toMatchObject({ kind: 'existing', task: { task_id: first.task_id } });
    expect(temporal.starts).toHaveLength(1);
    expect(store.tasks.size).toBe(1);
    expect(store.balances.get(CLIENT)).toBe(90);
  });

  test('the same idempotency key with another request is refused, and nothing is created or held', async () => {
    const { store, temporal, engine } = await setup();
    await createdTask(engine, { idempotency: { key: 'key-1', fingerprint: 'request-a' } });
    expect(await engine.create(fetchTask({ idempotency: { key: 'key-1', fingerprint: 'request-b' } }))).toEqual({ kind: 'idempotency_key_reused' });
    expect(store.tasks.size).toBe(1);
    expect(temporal.starts).toHaveLength(1);
  });

  test('the refusals of the store are passed through as they are, with no workflow started', async () => {
    const { store, temporal, engine } = await setup();
    expect(await engine.create(fetchTask({ maxPricePoints: '1000' }))).toEqual({ kind: 'insufficient_balance', requiredPoints: '1000' });
    expect(await engine.create(fetchTask({ taskType: 'screenshot', requireOnline: true }))).toEqual({ kind: 'no_solver_online' });
    expect(await engine.create(fetchTask({ accountId: 'acct_missing' }))).toEqual({ kind: 'insufficient_balance', requiredPoints: '10' });
    expect(temporal.starts).toEqual([]);
    expect(store.tasks.size).toBe(0);
    expect(store.balances.get(CLIENT)).toBe(100);
  });

  test('a chat without fallbacks is refused as busy when its one solver is taken: it may not wait in the line', async () => {
    const { engine } = await setup();
    await createdTask(engine);
    const chat = { strongModels: [], clientNodeId: 'node-a', noFallbacks: true };
    expect(await engine.create(fetchTask({ taskType: 'chat_completion', chat }))).toEqual({ kind: 'solvers_busy', retryAfterSeconds: 1, waiting: 0 });
  });

  test('a workflow that cannot start leaves the task failed as service_unavailable with its hold released: not_started', async () => {
    const { store, temporal, engine } = await setup();
    temporal.failNextStart();
    const result = await engine.create(fetchTask());
    expect(result).toEqual({ kind: 'not_started', taskId: expect.any(String) });
    const { taskId } = result as { taskId: string };
    expect(store.row(taskId)).toMatchObject({ status: 'failed', error: { type: 'service_unavailable' } });
    expect(store.hold(taskId).status).toBe('released');
    expect(store.balances.get(CLIENT)).toBe(100);
    await settled();
    expect(store.workflowStarted(taskId)).toBe(false);
  });

  test("a task's webhook is stored under its id before the task, and kept once the task is created", async () => {
    const { store, engine } = await setup();
    const task = await createdTask(engine, { webhook: { url: 'https://hooks.example/a' } });
    expect(store.calls.indexOf('saveSubscription')).toBeLessThan(store.calls.indexOf('createTask'));
    expect(store.subscriptions.get(task.task_id)).toMatchObject({ accountId: CLIENT, url: 'https://hooks.example/a', events: ['completed', 'failed', 'timed_out', 'cancelled', 'refunded'] });
  });

  test('a webhook is dropped when no task is created: refused, answered by an existing task, or not started', async () => {
    const { store, temporal, engine } = await setup();
    const webhook = { url: 'https://hooks.example/a', events: ['completed' as const] };
    const idempotency = { key: 'key-1', fingerprint: 'request-a' };
    const first = await createdTask(engine, { idempotency });
    expect((await engine.create(fetchTask({ taskId: 'task_refused', webhook, maxPricePoints: '1000' }))).kind).toBe('insufficient_balance');
    expect((await engine.create(fetchTask({ taskId: 'task_again', webhook, idempotency }))).kind).toBe('existing');
    temporal.failNextStart();
    expect((await engine.create(fetchTask({ taskId: 'task_unstarted', webhook }))).kind).toBe('not_started');
    expect([...store.subscriptions.keys()]).toEqual([]);
    expect(store.tasks.has(first.task_id)).toBe(true);
  });
});

describe('afterCommit', () => {
  test('delivers the handoffs and the webhook deliveries of a result, and returns the rest without them', async () => {
    const { engine, handoffs, webhooks } = await setup();
    const handoff = { taskId: 'task_a', workflowId: 'task-task_a', attemptNumber: 2, assignment: {} as Handoff['assignment'] };
    const delivery: DueDelivery = { task_id: 'task_b', event: 'completed' };
    const rest = engine.afterCommit({ applied: true, status: 'completed', handoffs: [handoff], webhooks: [delivery] });
    expect(rest).toEqual({ applied: true, status: 'completed' });
    expect(handoffs).toEqual([handoff]);
    expect(webhooks).toEqual([delivery]);
  });

  test('a result without effects passes through unchanged', async () => {
    const { engine, handoffs, webhooks } = await setup();
    expect(engine.afterCommit({ capabilities: ['proxy_fetch'] })).toEqual({ capabilities: ['proxy_fetch'] });
    expect([handoffs, webhooks]).toEqual([[], []]);
  });

  test("a finish's deliveries and the slot it frees are sent by the engine, not returned to its caller", async () => {
    const { store, engine, handoffs, webhooks } = await setup();
    const first = await createdTask(engine, { webhook: { url: 'https://hooks.example/a' } });
    const waiting = await createdTask(engine);
    expect(store.row(waiting.task_id).status).toBe('queued');
    const ended = await engine.fail(first.task_id, taskFailure('task_timeout', 'The task deadline passed.'));
    expect(ended).toEqual({ applied: true, status: 'timed_out' });
    expect(webhooks).toEqual([{ task_id: first.task_id, event: 'timed_out' }]);
    expect(handoffs).toMatchObject([{ taskId: waiting.task_id, attemptNumber: 1, assignment: { solverId: SOLVER } }]);
  });
});

describe('start', () => {
  test("tells the slots its creation handed on after the workflow's start, so the new workflow hears of its own", async () => {
    const { store, temporal, engine, effects } = await setup();
    const created = await storedTask(store, 'task_a');
    if (created.kind !== 'created') throw new Error(created.kind);
    const handoff = { taskId: 'task_a', workflowId: taskWorkflowId('task_a'), attemptNumber: 1, assignment: created.firstAssignment! };
    expect(await engine.start(created.task, { firstAssignment: created.firstAssignment }, [handoff])).toBe(true);
    expect(temporal.starts).toHaveLength(1);
    expect(effects).toEqual(['handoff task_a after 1 starts']);
  });

  test('tells the slots handed on even when the workflow cannot start, and answers false', async () => {
    const { store, temporal, engine, handoffs } = await setup();
    const created = await storedTask(store, 'task_a');
    if (created.kind !== 'created') throw new Error(created.kind);
    const handoff = { taskId: 'task_b', workflowId: taskWorkflowId('task_b'), attemptNumber: 1, assignment: created.firstAssignment! };
    temporal.failNextStart();
    expect(await engine.start(created.task, {}, [handoff])).toBe(false);
    expect(handoffs).toEqual([handoff]);
    expect(store.row('task_a').status).toBe('failed');
  });

  test('a workflow started already (by another node, or a start the mark missed) counts as started', async () => {
    const { store, temporal, engine } = await setup();
    const created = await storedTask(store, 'task_a');
    if (created.kind !== 'created') throw new Error(created.kind);
    temporal.running(taskWorkflowId('task_a'));
    expect(await engine.start(created.task)).toBe(true);
    expect(temporal.starts).toEqual([]);
    await settled();
    expect(store.workflowStarted('task_a')).toBe(true);
  });
});

describe('cancel', () => {
  test('a task that does not exist, or is not the account’s, is task_not_found', async () => {
    const { engine } = await setup();
    const task = await createdTask(engine);
    expect(await engine.cancel('task_missing', CLIENT)).toEqual({ kind: 'task_not_found' });
    expect(await engine.cancel(task.task_id, OTHER_CLIENT)).toEqual({ kind: 'task_not_found' });
  });

  test('a running task is cancelled through its workflow, whose signal comes before its attempt is stopped', async () => {
    const { store, temporal, engine, stopped } = await setup();
    const task = await createdTask(engine);
    const order: string[] = [];
    temporal.onSignal = async ({ signal }) => {
      order.push(`signal ${signal}; stopped: ${stopped.length}`);
      // What the workflow does on the signal: it ends the task through the engine.
      await engine.fail(task.task_id, taskFailure('task_cancelled', 'Cancelled by its client.'));
    };
    const result = await engine.cancel(task.task_id, CLIENT);
    expect(result).toMatchObject({ kind: 'cancelled', task: { task_id: task.task_id, status: 'cancelled', hold_status: 'released' } });
    expect(order).toEqual([`signal ${cancelTaskSignal.name}; stopped: 0`]);
    expect(stopped).toEqual([task.task_id]);
    expect(store.balances.get(CLIENT)).toBe(100);
  });

  test('a cancelled task cancelled again is answered as cancelled, and its workflow is not told again', async () => {
    const { temporal, engine } = await setup();
    const task = await createdTask(engine);
    temporal.forget(task.workflow_id);
    await engine.cancel(task.task_id, CLIENT);
    const again = await engine.cancel(task.task_id, CLIENT);
    expect(again).toMatchObject({ kind: 'cancelled', task: { status: 'cancelled' } });
    expect(temporal.signals).toEqual([]);
  });

  test('a task that had ended otherwise keeps its end: already_finished, before the cancel', async () => {
    const { temporal, engine, stopped } = await setup();
    const task = await createdTask(engine);
    await engine.fail(task.task_id, taskFailure('solver_failed', 'Every attempt failed.'));
    expect(await engine.cancel(task.task_id, CLIENT)).toEqual({ kind: 'already_finished', status: 'failed', before: true });
    expect([temporal.signals, stopped]).toEqual([[], []]);
  });

  test('a task that completes while its cancel is on the way keeps its completion: already_finished, not before', async () => {
    const { store, temporal, engine } = await setup();
    const task = await createdTask(engine);
    const attemptId = [...store.attempts.keys()][0];
    temporal.onSignal = async () => {
      await engine.completeAttempt({ taskId: task.task_id, attemptId, result: { status_code: 200 }, stored: { keys: [], parts: {} } });
    };
    expect(await engine.cancel(task.task_id, CLIENT)).toEqual({ kind: 'already_finished', status: 'completed', before: false });
  });

  test('a task whose workflow is not found is ended here as cancelled, its hold released and its attempt stopped', async () => {
    const { store, temporal, engine, stopped } = await setup();
    const task = await createdTask(engine);
    temporal.forget(task.workflow_id);
    const result = await engine.cancel(task.task_id, CLIENT);
    expect(result).toMatchObject({ kind: 'cancelled', task: { status: 'cancelled', error: { type: 'task_cancelled' }, hold_status: 'released' } });
    expect(temporal.signals).toEqual([]);
    expect(stopped).toEqual([task.task_id]);
    expect(store.balances.get(CLIENT)).toBe(100);
  });

  test('cancelNow stops the attempt of a task it ended itself, and leaves one with a workflow to its workflow', async () => {
    const { store, temporal, engine, stopped } = await setup();
    const running = await createdTask(engine);
    await storedTask(store, 'task_page');
    temporal.onSignal = () => undefined;
    await engine.cancelNow(running.task_id);
    await engine.cancelNow('task_page');
    expect(temporal.signals.map((signal) => signal.workflowId)).toEqual([running.workflow_id]);
    expect(stopped).toEqual(['task_page']);
    expect(store.row('task_page').status).toBe('cancelled');
    expect(store.row(running.task_id).status).toBe('assigned');
  });
});

describe('adminComplete', () => {
  const adminResult = { status_code: 200, content: 'by hand' };

  test('a task that does not exist is task_not_found', async () => {
    const { engine } = await setup();
    expect(await engine.adminComplete({ taskId: 'task_missing', solverId: SOLVER, result: adminResult }, () => undefined)).toEqual({ kind: 'task_not_found' });
  });

  test('a task that had ended is already_finished, before: its result is not checked and its workflow not told', async () => {
    const { temporal, engine } = await setup();
    const task = await createdTask(engine);
    await engine.fail(task.task_id, taskFailure('task_timeout', 'The task deadline passed.'));
    const checked: string[] = [];
    const result = await engine.adminComplete({ taskId: task.task_id, solverId: SOLVER, result: adminResult }, (type) => void checked.push(type));
    expect(result).toEqual({ kind: 'already_finished', status: 'timed_out', before: true });
    expect([checked, temporal.signals]).toEqual([[], []]);
  });

  test('a solver that does not exist is solver_not_found, once the result is checked against the task type', async () => {
    const { temporal, engine } = await setup();
    const task = await createdTask(engine);
    const checked: string[] = [];
    const result = await engine.adminComplete({ taskId: task.task_id, solverId: 'acct_nobody', result: adminResult }, (type) => void checked.push(type));
    expect(result).toEqual({ kind: 'solver_not_found' });
    expect(checked).toEqual(['proxy_fetch']);
    expect(temporal.signals).toEqual([]);
  });

  test('a result its check refuses stops the completion before anything is done', async () => {
    const { temporal, engine } = await setup();
    const task = await createdTask(engine);
    const refuse = () => {
      throw new Error('not a proxy_fetch result');
    };
    await expect(engine.adminComplete({ taskId: task.task_id, solverId: SOLVER, result: {} }, refuse)).rejects.toThrow('not a proxy_fetch result');
    expect(temporal.signals).toEqual([]);
  });

  test('the workflow is told, settles the completion paying the named solver, and the answer is the completed record', async () => {
    const { store, temporal, engine, stopped } = await setup();
    store.addAccount(SECOND_SOLVER, 0);
    const task = await createdTask(engine);
    temporal.onSignal = async ({ args }) => {
      const { solverId, result } = args[0] as AdminCompletion;
      await engine.settleAdminCompletion({ taskId: task.task_id, taskType: task.task_type, completion: { kind: 'admin', solverId, result } });
    };
    const result = await engine.adminComplete({ taskId: task.task_id, solverId: SECOND_SOLVER, result: adminResult }, () => undefined);
    expect(result).toMatchObject({ kind: 'completed', task: { status: 'completed', solver_id: SECOND_SOLVER, result: adminResult, hold_status: 'settled' } });
    expect(temporal.signals).toMatchObject([{ workflowId: task.workflow_id, signal: adminCompleteSignal.name }]);
    expect(stopped).toEqual([task.task_id]);
    expect(store.balances.get(SECOND_SOLVER)).toBeGreaterThan(0);
  });
});

describe('completeAttempt', () => {
  const reference = (key: string) => ({ $artifact: { key, size: 1, sha256: '', content_type: 'text/html', encoding: 'utf8' } });

  test("the attempt's result completes the task, settled at its solver's price", async () => {
    const { store, engine } = await setup();
    const task = await createdTask(engine);
    const attemptId = [...store.attempts.keys()][0];
    const outcome = await engine.completeAttempt({ taskId: task.task_id, attemptId, result: { status_code: 200 }, stored: { keys: ['k1'], parts: { content: reference('k1') } } });
    expect(outcome).toEqual({ kind: 'completed' });
    expect(store.row(task.task_id)).toMatchObject({ status: 'completed', solver_id: SOLVER, price_points: '1', result: { status_code: 200, content: reference('k1') } });
    expect(store.balances.get(CLIENT)).toBe(99);
    expect(store.deletedArtifacts).toEqual([]);
  });

  test('a result for a task that had ended is finished_already, and only the parts its stored result does not refer to are deleted', async () => {
    const { store, engine } = await setup();
    const task = await createdTask(engine);
    const attemptId = [...store.attempts.keys()][0];
    const stored = { keys: ['k1'], parts: { content: reference('k1') } };
    await engine.completeAttempt({ taskId: task.task_id, attemptId, result: { status_code: 200 }, stored });
    // A retried activity writes the same keys again, and one more.
    const again = await engine.completeAttempt({ taskId: task.task_id, attemptId, result: { status_code: 200 }, stored: { ...stored, keys: ['k1', 'k2'] } });
    expect(again).toEqual({ kind: 'finished_already', status: 'completed' });
    expect(store.deletedArtifacts).toEqual(['k2']);
  });

  test('a result for an attempt closed meanwhile is attempt_closed: the task is left as it is and the parts written for it deleted', async () => {
    const { store, engine } = await setup();
    const task = await createdTask(engine);
    const attemptId = [...store.attempts.keys()][0];
    await engine.failAttempt({ attemptId, outcome: 'timeout' });
    const outcome = await engine.completeAttempt({ taskId: task.task_id, attemptId, result: { status_code: 200 }, stored: { keys: ['k1'], parts: { content: reference('k1') } } });
    expect(outcome).toEqual({ kind: 'attempt_closed' });
    expect(store.row(task.task_id)).toMatchObject({ status: 'queued', result: null });
    expect(store.deletedArtifacts).toEqual(['k1']);
  });
});

describe('failAttempt', () => {
  test('closes the attempt once and hands its slot to the oldest waiting task, whose workflow is told', async () => {
    const { store, engine, handoffs } = await setup();
    const first = await createdTask(engine);
    const waiting = await createdTask(engine);
    const attemptId = [...store.attempts.keys()][0];
    expect(await engine.failAttempt({ attemptId, outcome: 'error', error: { type: 'crashed', message: 'solver crashed' } })).toEqual({ closed: true, targetVerdict: null });
    expect(await engine.failAttempt({ attemptId, outcome: 'error', error: { type: 'crashed', message: 'solver crashed' } })).toEqual({ closed: false, targetVerdict: null });
    expect(handoffs).toMatchObject([{ taskId: waiting.task_id, attemptNumber: 1 }]);
    expect(store.row(first.task_id).status).toBe('queued');
    expect(store.calls).not.toContain('examineTargetClaim');
  });

  test("a claim that the target failed is examined first, and the store's judgement of it answered", async () => {
    const { store, engine } = await setup();
    await createdTask(engine);
    const attemptId = [...store.attempts.keys()][0];
    const closed = await engine.failAttempt({ attemptId, outcome: 'error', error: { type: 'http_error', message: '503 from the page' } });
    expect(closed).toEqual({ closed: true, targetVerdict: 'solver' });
    expect(store.calls.slice(-2)).toEqual(['examineTargetClaim', 'closeAttempt']);
  });

  test('markAccepted marks the attempt accepted', async () => {
    const { store, engine } = await setup();
    await createdTask(engine);
    const attemptId = [...store.attempts.keys()][0];
    await engine.markAccepted(attemptId);
    expect(store.attempts.get(attemptId)!.acceptedAt).not.toBeNull();
  });
});

describe('reserveAttempt', () => {
  test('a later attempt takes another free solver; with none free the task waits in the line', async () => {
    const { store, engine } = await setup();
    store.addSolver({ solverId: SECOND_SOLVER, taskTypes: ['proxy_fetch'], pricePoints: '2', slots: 1 });
    const task = await createdTask(engine);
    const attemptId = [...store.attempts.keys()][0];
    await engine.failAttempt({ attemptId, outcome: 'timeout' });
    const input = { taskId: task.task_id, taskType: 'proxy_fetch', maxPricePoints: '10' };
    expect(await engine.reserveAttempt({ ...input, attemptNumber: 2, excludedSolverIds: [SOLVER] })).toMatchObject({ assignment: { solverId: SECOND_SOLVER } });
    expect(await engine.reserveAttempt({ ...input, attemptNumber: 3, excludedSolverIds: [SOLVER, SECOND_SOLVER] })).toEqual({ assignment: null, untriedOnline: 0, finishedAs: null, queued: true });
  });
});

describe('sweepUnstarted', () => {
  test('starts the workflows of stranded tasks past the age and reports their ids; newer, started and ended tasks are left', async () => {
    const { store, temporal, engine } = await setup();
    await storedTask(store, 'task_stranded');
    await storedTask(store, 'task_new');
    await storedTask(store, 'task_ended');
    const started = await createdTask(engine);
    await settled();
    for (const taskId of ['task_stranded', 'task_ended', started.task_id]) store.age(taskId, 120);
    await engine.fail('task_ended', taskFailure('task_timeout', 'The task deadline passed.'));
    expect(await engine.sweepUnstarted(60)).toEqual(['task_stranded']);
    expect(temporal.starts.map((start) => start.workflowId)).toEqual([started.workflow_id, taskWorkflowId('task_stranded')]);
    await settled();
    expect(store.workflowStarted('task_stranded')).toBe(true);
  });

  test('a stranded task whose first attempt its solver accepted waits out that attempt too', async () => {
    const { store, engine } = await setup();
    const created = await storedTask(store, 'task_page', { timeoutSeconds: 60 });
    if (created.kind !== 'created') throw new Error(created.kind);
    await engine.markAccepted(created.firstAssignment!.attemptId);
    store.age('task_page', 90);
    expect(await engine.sweepUnstarted(60)).toEqual([]);
    store.age('task_page', 130);
    expect(await engine.sweepUnstarted(60)).toEqual(['task_page']);
  });

  test('a stranded task whose start fails is failed, its hold released, and not reported; the others still start', async () => {
    const { store, temporal, engine } = await setup();
    await storedTask(store, 'task_a');
    await storedTask(store, 'task_b');
    store.age('task_a', 120);
    store.age('task_b', 121);
    temporal.failNextStart();
    expect(await engine.sweepUnstarted(60)).toEqual(['task_b']);
    expect(store.row('task_a')).toMatchObject({ status: 'failed', error: { type: 'service_unavailable' } });
    expect(store.hold('task_a').status).toBe('released');
  });

  test('a stranded chat is failed, its client being gone, and handled without a workflow', async () => {
    const { store, temporal, engine } = await setup();
    await storedTask(store, 'chat_a', { taskType: 'chat_completion', workflowId: chatWorkflowId('chat_a') });
    store.age('chat_a', 120);
    expect(await engine.sweepUnstarted(60)).toEqual(['chat_a']);
    expect(store.row('chat_a')).toMatchObject({ status: 'failed', error: { type: 'client_cancelled' } });
    expect(temporal.starts).toEqual([]);
  });
});

describe('createWithFirstAttempt', () => {
  const page = (taskId: string): ClientTask => ({ taskId, accountId: CLIENT, taskType: 'proxy_fetch', payload: URL_PAYLOAD, maxPricePoints: '10', timeoutSeconds: 60, workflowId: taskWorkflowId(taskId) });

  test('a first attempt sent without a workflow starts none; the task is seen stored first', async () => {
    const { temporal, engine } = await setup();
    const seen: string[] = [];
    const outcome = await engine.createWithFirstAttempt(page('task_page'), {
      stored: async (row) => void seen.push(`stored ${row.task_id}`),
      sendFirst: async (row, assignment) => (seen.push(`sent ${row.task_id} to ${assignment.solverId}`), true),
    });
    expect(outcome).toMatchObject({ kind: 'created', task: { task_id: 'task_page' } });
    expect(seen).toEqual(['stored task_page', `sent task_page to ${SOLVER}`]);
    expect(temporal.starts).toEqual([]);
  });

  test('a first attempt that could not be sent, or none matched, is left to the started workflow', async () => {
    const { temporal, engine } = await setup();
    const then = { stored: async () => undefined, sendFirst: async () => false };
    await engine.createWithFirstAttempt(page('task_a'), then);
    await engine.createWithFirstAttempt(page('task_b'), then);
    expect(temporal.starts.map((start) => [start.workflowId, (start.args[0] as TaskWorkflowInput).firstAssignment?.solverId ?? null])).toEqual([
      [taskWorkflowId('task_a'), SOLVER],
      [taskWorkflowId('task_b'), null],
    ]);
  });
});

test('solverOnline asks whether any solver of the type is online at all', async () => {
  const { engine } = await setup();
  expect(await engine.solverOnline('proxy_fetch')).toBe(true);
  expect(await engine.solverOnline('screenshot')).toBe(false);
});
