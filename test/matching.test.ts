import crypto from 'node:crypto';
import { sql } from 'slonik';
import { z } from 'zod';
import { createAccount } from '../src/db/accounts';
import { deposit } from '../src/db/ledger';
import { createDb, type Db } from '../src/db/pool';
import { heartbeatNode, registerConnection, replaceCapabilities } from '../src/db/solvers';
import { closeAttempt, reserveAttempt } from '../src/db/tasks/attempts';
import { createTaskWithHold } from '../src/db/tasks/create';
import { createTask, failTask } from './support/tasks';
import { testEndpoints } from './support/stack';
import { DEFAULT_TRUST_POLICY } from '../src/db/reputation';

let db: Db;
beforeAll(async () => {
  db = await createDb(testEndpoints().databaseUrl, { maximumPoolSize: 30 });
});
// These tasks have no workflow; marked as started, the stranded-task sweep of later suites leaves them be.
const workflowless: string[] = [];
afterAll(async () => {
  await db.query(sql.unsafe`UPDATE tasks SET workflow_started_at = now() WHERE task_id = ANY(${sql.array(workflowless, 'text')})`);
  await db.end();
});

// Strong-tier chat capabilities with a model of their own per test: only this test's solvers match.
const TASK_TYPE = 'chat_completion';
const capability = (model: string, price: string, maxConcurrent: number) => ({
  task_type: TASK_TYPE,
  tier: 'strong',
  billing_type: 'per_request',
  fulfillment_path: 'provider_api',
  provider_name: 'p',
  model_name: model,
  marginal_cost: '0',
  min_price_points: price,
  max_concurrent: maxConcurrent,
});

async function onlineSolver(model: string, price: string, maxConcurrent: number) {
  const { account } = await createAccount(db);
  const nodeId = `node-${crypto.randomUUID()}`;
  await heartbeatNode(db, nodeId);
  await replaceCapabilities(db, DEFAULT_TRUST_POLICY, account.account_id, [capability(model, price, maxConcurrent) as never]);
  await registerConnection(db, DEFAULT_TRUST_POLICY, { solverId: account.account_id, connectionId: crypto.randomUUID(), nodeId });
  return account.account_id;
}

async function newTasks(count: number) {
  const { account } = await createAccount(db);
  await deposit(db, { accountId: account.account_id, amount: '1000', idempotencyKey: `t:${crypto.randomUUID()}` });
  const ids: string[] = [];
  for (let i = 0; i < count; i++) {
    const taskId = `task_${crypto.randomBytes(8).toString('hex')}`;
    await createTask(db, { taskId, accountId: account.account_id, taskType: TASK_TYPE, payload: {}, maxPricePoints: '5', timeoutSeconds: 60, workflowId: `task-${taskId}` });
    ids.push(taskId);
    workflowless.push(taskId);
  }
  return ids;
}

const activeAttempts = (solverId: string) =>
  db.oneFirst(sql.type(z.object({ active: z.number() }))`SELECT count(*)::int AS active FROM solver_slots WHERE solver_id = ${solverId} AND attempt_id IS NOT NULL`);

describe('matching (reserveAttempt)', () => {
  test('concurrent reservations fill the cheapest solver to its limit, then the next, and never beyond', async () => {
    const model = `model-${crypto.randomBytes(4).toString('hex')}`;
    const match = { taskType: TASK_TYPE, maxPricePoints: '5', strongModels: [model] };
    const cheap = await onlineSolver(model, '1', 3);
    const dear = await onlineSolver(model, '2', 2);
    const tasks = await newTasks(12);
    const results = await Promise.all(
      tasks.map((taskId) => reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId, attemptNumber: 1, excludedSolverIds: [] })),
    );
    const assigned = results.flatMap((result) => (result.assignment ? [result.assignment.solverId] : []));
    expect(assigned.filter((id) => id === cheap)).toHaveLength(3);
    expect(assigned.filter((id) => id === dear)).toHaveLength(2);
    expect(assigned).toHaveLength(5);
    for (const result of results) if (!result.assignment) expect(result.untriedOnline).toBe(2);
    expect(await activeAttempts(cheap)).toBe(3);
    expect(await activeAttempts(dear)).toBe(2);
  });

  test('reserving the same attempt again returns the same assignment and takes no second slot', async () => {
    const model = `model-${crypto.randomBytes(4).toString('hex')}`;
    const match = { taskType: TASK_TYPE, maxPricePoints: '5', strongModels: [model] };
    const only = await onlineSolver(model, '1', 5);
    const [taskId] = await newTasks(1);
    const input = { ...match, taskId, attemptNumber: 1, excludedSolverIds: [] };
    const first = await reserveAttempt(db, DEFAULT_TRUST_POLICY, input);
    const again = await reserveAttempt(db, DEFAULT_TRUST_POLICY, input);
    expect(again).toEqual(first);
    expect(first.assignment).toMatchObject({ solverId: only, pricePoints: '1', attemptId: `${taskId}.a1` });
    expect(await activeAttempts(only)).toBe(1);
  });

  test('closing an attempt frees its slot once; excluded and too-expensive solvers are not matched', async () => {
    const model = `model-${crypto.randomBytes(4).toString('hex')}`;
    const match = { taskType: TASK_TYPE, maxPricePoints: '5', strongModels: [model] };
    const tried = await onlineSolver(model, '1', 1);
    await onlineSolver(model, '9', 1);
    const [taskId] = await newTasks(1);
    const first = await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId, attemptNumber: 1, excludedSolverIds: [] });
    expect(first.assignment?.solverId).toBe(tried);
    expect((await closeAttempt(db, DEFAULT_TRUST_POLICY, { attemptId: first.assignment!.attemptId, outcome: 'error', error: { type: 'x', message: 'x' } })).closed).toBe(true);
    expect((await closeAttempt(db, DEFAULT_TRUST_POLICY, { attemptId: first.assignment!.attemptId, outcome: 'error' })).closed).toBe(false);
    expect(await activeAttempts(tried)).toBe(0);
    const second = await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId, attemptNumber: 2, excludedSolverIds: [tried] });
    expect(second).toEqual({ assignment: null, untriedOnline: 1, finishedAs: null, queued: true });
    const task = await db.one(sql.type(z.object({ status: z.string(), solver_id: z.string().nullable() }))`SELECT status, solver_id FROM tasks WHERE task_id = ${taskId}`);
    expect(task).toEqual({ status: 'queued', solver_id: null });
  });

  test('a task that has finished gets no new attempt and reports how it ended', async () => {
    const model = `model-${crypto.randomBytes(4).toString('hex')}`;
    const only = await onlineSolver(model, '1', 5);
    const [taskId] = await newTasks(1);
    await failTask(db, taskId);
    const reservation = await reserveAttempt(db, DEFAULT_TRUST_POLICY, { taskId, attemptNumber: 1, taskType: TASK_TYPE, maxPricePoints: '5', strongModels: [model], excludedSolverIds: [] });
    expect(reservation).toEqual({ assignment: null, untriedOnline: 1, finishedAs: 'failed' });
    expect(await activeAttempts(only)).toBe(0);
  });

  test('reservations and attempt closings on one solver running at once neither deadlock nor lose a slot', async () => {
    const model = `model-${crypto.randomBytes(4).toString('hex')}`;
    const busy = await onlineSolver(model, '1', 100);
    const tasks = await newTasks(80);
    const reserve = (taskId: string) => reserveAttempt(db, DEFAULT_TRUST_POLICY, { taskId, attemptNumber: 1, taskType: TASK_TYPE, maxPricePoints: '5', strongModels: [model], excludedSolverIds: [] });
    let previous = await Promise.all(tasks.slice(0, 20).map(reserve));
    // Each round closes the last twenty attempts while the next twenty are being matched to the same solver.
    for (let round = 1; round < 4; round++) {
      const [closed, next] = await Promise.all([
        Promise.all(previous.map((r) => closeAttempt(db, DEFAULT_TRUST_POLICY, { attemptId: r.assignment!.attemptId, outcome: 'completed' }))),
        Promise.all(tasks.slice(round * 20, round * 20 + 20).map(reserve)),
      ]);
      expect(closed.every((c) => c.closed)).toBe(true);
      expect(next.every((r) => r.assignment?.solverId === busy)).toBe(true);
      previous = next;
    }
    expect(await activeAttempts(busy)).toBe(20);
  });

  test('a last-resort solver is offered only when no other solver fits', async () => {
    const model = `model-${crypto.randomBytes(4).toString('hex')}`;
    const match = { taskType: TASK_TYPE, maxPricePoints: '5', strongModels: [model], excludedSolverIds: [] };
    const cheap = await onlineSolver(model, '1', 1);
    const dear = await onlineSolver(model, '2', 1);
    const [first, second] = await newTasks(2);
    const passedOver = await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId: first, attemptNumber: 1, lastResortSolverIds: [cheap] });
    expect(passedOver.assignment?.solverId).toBe(dear);
    // The other solver is now full: the last resort is taken rather than none.
    const taken = await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId: second, attemptNumber: 1, lastResortSolverIds: [cheap] });
    expect(taken.assignment?.solverId).toBe(cheap);
  });

  test('a task created with matching holds its first attempt; a refused hold leaves no slot taken', async () => {
    const model = `model-${crypto.randomBytes(4).toString('hex')}`;
    const only = await onlineSolver(model, '1', 2);
    const { account } = await createAccount(db);
    await deposit(db, { accountId: account.account_id, amount: '5', idempotencyKey: `t:${crypto.randomUUID()}` });
    const newTask = (maxPricePoints: string) => {
      const taskId = `task_${crypto.randomBytes(8).toString('hex')}`;
      workflowless.push(taskId);
      return createTaskWithHold(db, DEFAULT_TRUST_POLICY, { taskId, accountId: account.account_id, taskType: TASK_TYPE, payload: {}, maxPricePoints, timeoutSeconds: 60, workflowId: `task-${taskId}`, match: { strongModels: [model] } });
    };
    const created = await newTask('5');
    if (created.kind !== 'created') throw new Error(created.kind);
    expect(created.firstAssignment).toMatchObject({ solverId: only, attemptId: `${created.task.task_id}.a1` });
    expect(created.task).toMatchObject({ status: 'assigned', solver_id: only });
    expect(await activeAttempts(only)).toBe(1);
    expect(await newTask('5')).toEqual({ kind: 'insufficient_balance', requiredPoints: '5' });
    expect(await activeAttempts(only)).toBe(1);
    // The workflow's own matching of attempt 1 (e.g. after a restart) finds the same reservation.
    const again = await reserveAttempt(db, DEFAULT_TRUST_POLICY, { taskId: created.task.task_id, attemptNumber: 1, taskType: TASK_TYPE, maxPricePoints: '5', strongModels: [model], excludedSolverIds: [] });
    expect(again.assignment).toEqual(created.firstAssignment);
  });
  test('a reservation or an attempt\'s end on a solver never waits for another reservation on it still uncommitted', async () => {
    const model = `model-${crypto.randomBytes(4).toString('hex')}`;
    const match = { taskType: TASK_TYPE, maxPricePoints: '5', strongModels: [model], excludedSolverIds: [] };
    const busy = await onlineSolver(model, '1', 3);
    const [earlier, held, other] = await newTasks(3);
    const running = await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId: earlier, attemptNumber: 1 });
    let holdingDone!: (reservation: Awaited<ReturnType<typeof reserveAttempt>>) => void;
    const holding = new Promise<Awaited<ReturnType<typeof reserveAttempt>>>((resolve) => (holdingDone = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    // This reservation holds its slot until its transaction ends, after the others below have run (or waited).
    const transaction = db.transaction(async (tx) => {
      holdingDone(await reserveAttempt(tx, DEFAULT_TRUST_POLICY, { ...match, taskId: held, attemptNumber: 1 }));
      await released;
    });
    expect((await holding).assignment?.solverId).toBe(busy);
    const elsewhere = Promise.all([
      reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId: other, attemptNumber: 1 }),
      closeAttempt(db, DEFAULT_TRUST_POLICY, { attemptId: running.assignment!.attemptId, outcome: 'completed' }),
    ]);
    const outcome = await Promise.race([elsewhere, new Promise<'waited'>((resolve) => setTimeout(() => resolve('waited'), 5000))]);
    release();
    await transaction;
    await elsewhere;
    expect(outcome).not.toBe('waited');
    const [reserved, closed] = outcome as Exclude<typeof outcome, 'waited'>;
    expect(reserved.assignment?.solverId).toBe(busy);
    expect(closed.closed).toBe(true);
    expect(await activeAttempts(busy)).toBe(2);
  });

  test('after max_concurrent is lowered below the running attempts, the solver gets none until they are within it', async () => {
    const model = `model-${crypto.randomBytes(4).toString('hex')}`;
    const match = { taskType: TASK_TYPE, maxPricePoints: '5', strongModels: [model], excludedSolverIds: [] };
    const solver = await onlineSolver(model, '1', 3);
    const tasks = await newTasks(6);
    const reserve = (index: number) => reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId: tasks[index], attemptNumber: 1 });
    const running = await Promise.all([0, 1, 2].map(reserve));
    expect(running.every((r) => r.assignment?.solverId === solver)).toBe(true);
    await replaceCapabilities(db, DEFAULT_TRUST_POLICY, solver, [capability(model, '1', 1) as never]);
    const close = (index: number) => closeAttempt(db, DEFAULT_TRUST_POLICY, { attemptId: running[index].assignment!.attemptId, outcome: 'completed' });
    // Three running, then two, then one: all at or above the new limit of one.
    for (const index of [0, 1, 2]) {
      expect((await reserve(3)).assignment).toBeNull();
      await close(index);
    }
    expect((await reserve(3)).assignment?.solverId).toBe(solver);
    expect((await reserve(4)).assignment).toBeNull();
    expect(await activeAttempts(solver)).toBe(1);
    // Raised again: the new slots are offered at once.
    await replaceCapabilities(db, DEFAULT_TRUST_POLICY, solver, [capability(model, '1', 2) as never]);
    expect((await reserve(4)).assignment?.solverId).toBe(solver);
    expect((await reserve(5)).assignment).toBeNull();
    expect(await activeAttempts(solver)).toBe(2);
  });
});

describe('the queue (tasks waiting for a slot)', () => {
  const queued = (taskIds: string[]) =>
    db.anyFirst(sql.type(z.object({ task_id: z.string() }))`
      SELECT task_id FROM task_queue WHERE task_id = ANY(${sql.array(taskIds, 'text')}) ORDER BY arrival, task_id`);
  const handoffRows = (taskIds: string[]) =>
    db.anyFirst(sql.type(z.object({ task_id: z.string() }))`SELECT task_id FROM slot_handoffs WHERE task_id = ANY(${sql.array(taskIds, 'text')})`);

  test('a freed slot goes to the oldest waiting task, in the freeing transaction, and a new task does not overtake it', async () => {
    const model = `model-${crypto.randomBytes(4).toString('hex')}`;
    const match = { taskType: TASK_TYPE, maxPricePoints: '5', strongModels: [model], excludedSolverIds: [] };
    const solver = await onlineSolver(model, '1', 1);
    const [running, first, second] = await newTasks(3);
    const held = await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId: running, attemptNumber: 1 });
    expect(held.assignment?.solverId).toBe(solver);
    for (const taskId of [first, second]) expect(await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId, attemptNumber: 1 })).toMatchObject({ assignment: null, queued: true });
    expect(await queued([first, second])).toEqual([first, second]);
    const { handoffs } = await closeAttempt(db, DEFAULT_TRUST_POLICY, { attemptId: held.assignment!.attemptId, outcome: 'completed' });
    expect(handoffs.map((h) => [h.taskId, h.attemptNumber, h.assignment.solverId])).toEqual([[first, 1, solver]]);
    // Recorded for the workflow to be told (the outbox), and the task is the attempt's from now on.
    expect(await handoffRows([first, second])).toEqual([first]);
    expect(await queued([first, second])).toEqual([second]);
    expect((await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId: first, attemptNumber: 1 })).assignment).toEqual(handoffs[0].assignment);
    // Asking again while waiting changes nothing: the task keeps its place.
    expect(await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId: second, attemptNumber: 1 })).toMatchObject({ assignment: null, queued: true });
    // A new task that arrives as the slot frees waits behind the one already waiting.
    const [later] = await newTasks(1);
    const freed = await closeAttempt(db, DEFAULT_TRUST_POLICY, { attemptId: handoffs[0].assignment.attemptId, outcome: 'completed' });
    expect(freed.handoffs.map((h) => h.taskId)).toEqual([second]);
    expect(await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId: later, attemptNumber: 1 })).toMatchObject({ assignment: null, queued: true });
  });

  test('a waiting task the slot does not fit (price, excluded solver) does not hold up a later one it fits', async () => {
    const model = `model-${crypto.randomBytes(4).toString('hex')}`;
    const match = { taskType: TASK_TYPE, strongModels: [model], excludedSolverIds: [] };
    const solver = await onlineSolver(model, '3', 1);
    const [running, cheap, excluding, fits] = await newTasks(4);
    const held = await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, maxPricePoints: '5', taskId: running, attemptNumber: 1 });
    await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, maxPricePoints: '2', taskId: cheap, attemptNumber: 1 });
    await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, maxPricePoints: '5', excludedSolverIds: [solver], taskId: excluding, attemptNumber: 1 });
    await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, maxPricePoints: '5', taskId: fits, attemptNumber: 1 });
    const { handoffs } = await closeAttempt(db, DEFAULT_TRUST_POLICY, { attemptId: held.assignment!.attemptId, outcome: 'completed' });
    expect(handoffs.map((h) => h.taskId)).toEqual([fits]);
    expect(await queued([cheap, excluding, fits])).toEqual([cheap, excluding]);
  });

  test('a task that finishes while it waits leaves the queue; new slots go to waiting tasks as they are registered', async () => {
    const model = `model-${crypto.randomBytes(4).toString('hex')}`;
    const match = { taskType: TASK_TYPE, maxPricePoints: '5', strongModels: [model], excludedSolverIds: [] };
    const solver = await onlineSolver(model, '1', 1);
    const [running, gone, waiting] = await newTasks(3);
    await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId: running, attemptNumber: 1 });
    await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId: gone, attemptNumber: 1 });
    await reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId: waiting, attemptNumber: 1 });
    await failTask(db, gone, 'task_timeout');
    expect(await queued([gone, waiting])).toEqual([waiting]);
    const { handoffs } = await replaceCapabilities(db, DEFAULT_TRUST_POLICY, solver, [capability(model, '1', 2) as never]);
    expect(handoffs.map((h) => [h.taskId, h.assignment.solverId])).toEqual([[waiting, solver]]);
    expect(await activeAttempts(solver)).toBe(2);
  });

  test('slots freed while tasks are being queued all reach waiting tasks, oldest first, none twice', async () => {
    const model = `model-${crypto.randomBytes(4).toString('hex')}`;
    const match = { taskType: TASK_TYPE, maxPricePoints: '5', strongModels: [model], excludedSolverIds: [] };
    const solver = await onlineSolver(model, '1', 4);
    const tasks = await newTasks(40);
    const reserve = (taskId: string) => reserveAttempt(db, DEFAULT_TRUST_POLICY, { ...match, taskId, attemptNumber: 1 });
    const served: string[] = [];
    const running: string[] = [];
    const take = (result: Awaited<ReturnType<typeof reserve>>) => {
      if (result.assignment) running.push(result.assignment.attemptId);
      for (const h of result.handoffs ?? []) if (h.assignment.attemptId !== result.assignment?.attemptId) running.push(h.assignment.attemptId);
    };
    for (const result of await Promise.all(tasks.slice(0, 8).map(reserve))) take(result);
    expect(running).toHaveLength(4);
    // Attempts end while the rest arrive; every handoff's attempt then ends in turn.
    let next = 8;
    while (running.length > 0) {
      const ending = running.splice(0, running.length);
      const arriving = tasks.slice(next, next + 4);
      next += 4;
      const [closed, reserved] = await Promise.all([
        Promise.all(ending.map((attemptId) => closeAttempt(db, DEFAULT_TRUST_POLICY, { attemptId, outcome: 'completed' }))),
        Promise.all(arriving.map(reserve)),
      ]);
      served.push(...ending.map((attemptId) => attemptId.replace(/\.a1$/, '')));
      for (const c of closed) for (const h of c.handoffs) running.push(h.assignment.attemptId);
      for (const r of reserved) take(r);
    }
    expect(await queued(tasks)).toEqual([]);
    expect(new Set(served).size).toBe(tasks.length);
    expect(await activeAttempts(solver)).toBe(0);
  });
});
