import crypto from 'node:crypto';
import type { Client } from '@temporalio/client';
import pino from 'pino';
import { sql } from 'slonik';
import { z } from 'zod';
import { chatWorkflowId, taskWorkflowId } from '../src/contract/workflows';
import { getBalance } from '../src/db/ledger';
import { createTask, failTask } from './support/tasks';
import { CHAT_TASK_TYPE } from '../src/schemas/domain';
import { TaskEngine } from '../src/tasks/engine';
import { pgTaskStore } from '../src/tasks/store';
import { TaskFinishedWatch } from '../src/tasks/finished';
import { AttemptStops } from '../src/dispatch/attempt-stops';
import { createArtifactStore } from '../src/artifacts/store';
import { SlotHandoffs } from '../src/tasks/handoffs';
import { createTemporalClient } from '../src/temporal/connection';
import { FakeSolver, SAMPLE_RESULTS, waitFor } from './support/fake-solver';
import { api, registerAccount, startTestStack, testEndpoints, type TestStack } from './support/stack';

/** A node that dies between storing a task and starting its workflow leaves the task to the worker's sweep. */
describe('the stranded-task sweep', () => {
  let stack: TestStack;
  let temporal: Client;
  let engine: TaskEngine;
  const logger = pino({ level: 'silent' });

  beforeAll(async () => {
    stack = await startTestStack({ env: { ACCEPT_TIMEOUT_MS: '2000' } });
    temporal = await createTemporalClient(testEndpoints().temporalAddress, stack.config.temporalNamespace);
    const artifacts = createArtifactStore(stack.config);
    engine = new TaskEngine({
      config: stack.config,
      store: pgTaskStore({ db: stack.db, trust: stack.config.trust, artifacts }),
      temporal,
      logger,
      eagerStart: false,
      handoffs: new SlotHandoffs({ db: stack.db, temporal, logger, trust: stack.config.trust }),
      webhooks: { send: () => undefined },
      artifacts,
      // The sweep neither waits for tasks nor stops attempts.
      finished: new TaskFinishedWatch(),
      stops: {} as AttemptStops,
    });
  });
  afterAll(async () => {
    await temporal?.connection.close();
    await stack.close();
  });

  // What a node stores before it starts the workflow: the task, its hold and, with a solver free, attempt 1.
  const strand = (accountId: string, taskType: string, match: boolean) => {
    const taskId = `${taskType === CHAT_TASK_TYPE ? 'chat' : 'task'}_${crypto.randomBytes(12).toString('hex')}`;
    return createTask(stack.db, {
      taskId,
      accountId,
      taskType,
      payload: taskType === CHAT_TASK_TYPE ? { messages: [{ role: 'user', content: 'hi' }] } : { url: 'https://example.com/swept' },
      maxPricePoints: '5',
      timeoutSeconds: 60,
      workflowId: taskType === CHAT_TASK_TYPE ? chatWorkflowId(taskId) : taskWorkflowId(taskId),
      ...(match ? { match: {} } : {}),
    }, stack.config.trust);
  };

  let solvers: FakeSolver[] = [];
  afterEach(async () => {
    await Promise.all(solvers.map((solver) => solver.close()));
    solvers = [];
  });

  test('a task matched before its node died is run on that reservation, charged once', async () => {
    const solver = await FakeSolver.start(stack.url, { price: '2', taskTypes: ['proxy_fetch'] });
    solvers.push(solver);
    const client = await registerAccount(stack.url, '50');
    const { task, firstAssignment } = await strand(client.account_id, 'proxy_fetch', true);
    expect(task.status).toBe('assigned');
    expect(firstAssignment?.solverId).toBe(solver.solverId);

    expect(await engine.sweepUnstarted(0)).toContain(task.task_id);
    const done = await waitFor(async () => {
      const response = await api(stack.url, 'GET', `/v1/tasks/${task.task_id}`, { headers: client.auth });
      return response.json.status === 'completed' ? response.json : undefined;
    });
    expect(done.solver_id).toBe(solver.solverId);
    expect(done.attempts).toHaveLength(1);
    // (The sweep may also start tasks other suites left behind; only this task's frames count here.)
    expect(solver.received.filter((frame) => frame.task_id === task.task_id)).toHaveLength(1);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '48', held_points: '0', lifetime_spent_points: '2' });
    // The start is recorded, so later sweeps leave the task alone.
    await waitFor(() =>
      stack.db.oneFirst(sql.type(z.object({ started: z.boolean() }))`SELECT workflow_started_at IS NOT NULL AS started FROM tasks WHERE task_id = ${task.task_id}`),
    );
    expect(await engine.sweepUnstarted(0)).not.toContain(task.task_id);
  });

  test('a chat whose client request died with its node is failed and its hold released', async () => {
    const client = await registerAccount(stack.url, '50');
    const { task } = await strand(client.account_id, CHAT_TASK_TYPE, false);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ held_points: '5' });

    expect(await engine.sweepUnstarted(0)).toContain(task.task_id);
    const record = await api(stack.url, 'GET', `/v1/tasks/${task.task_id}`, { headers: client.auth });
    expect(record.json).toMatchObject({ status: 'failed', error: { type: 'client_cancelled' } });
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '50', held_points: '0', lifetime_spent_points: '0' });
  });

  test('a task younger than the limit is left to its own node', async () => {
    const client = await registerAccount(stack.url, '50');
    const { task } = await strand(client.account_id, 'proxy_fetch', false);
    expect(await engine.sweepUnstarted(30)).not.toContain(task.task_id);
    const row = await stack.db.one(sql.type(z.object({ status: z.string(), started: z.boolean() }))`
      SELECT status, workflow_started_at IS NOT NULL AS started FROM tasks WHERE task_id = ${task.task_id}`);
    expect(row).toEqual({ status: 'queued', started: false });
    // Other suites' workers sweep too: leave nothing stranded for them.
    await failTask(stack.db, task.task_id, 'solver_failed', 'test', stack.config.trust);
  });

  test('a slot handed while its sender died reaches the waiting workflow through the sweep, and is charged once', async () => {
    let first: string | undefined;
    // Holds the first task it gets (its one slot stays taken); answers any other at once.
    const solver = await FakeSolver.start(stack.url, {
      price: '2',
      taskTypes: ['screenshot'],
      maxConcurrent: 1,
      behaviour: (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        first ??= frame.task_id;
        if (frame.task_id !== first) self.send({ type: 'result', attempt_id: frame.attempt_id, result: SAMPLE_RESULTS.screenshot(frame.payload) });
      },
    });
    solvers.push(solver);
    const client = await registerAccount(stack.url, '50');
    const post = () => api(stack.url, 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'screenshot', payload: { url: 'https://example.com/q' }, max_price_points: 5 } });
    const holding = await post();
    expect(holding.json.status).toBe('assigned');
    const waiting = await post();
    expect(waiting.json.status).toBe('queued');
    // The holder's task ends elsewhere; its slot is handed on in that transaction, and the process that
    // would have told the waiting workflow dies before it does (the handoff is not delivered here).
    const ended = await failTask(stack.db, holding.json.task_id, 'task_timeout', 'test', stack.config.trust);
    expect(ended.handoffs?.map((h) => h.taskId)).toEqual([waiting.json.task_id]);
    expect(await new SlotHandoffs({ db: stack.db, temporal, logger, trust: stack.config.trust }).sweep(0)).toBeGreaterThanOrEqual(1);
    const done = await waitFor(async () => {
      const response = await api(stack.url, 'GET', `/v1/tasks/${waiting.json.task_id}`, { headers: client.auth });
      return response.json.status === 'completed' ? response.json : undefined;
    });
    expect(done.attempts).toHaveLength(1);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '48', held_points: '0', lifetime_spent_points: '2' });
    const unsent = await stack.db.oneFirst(sql.type(z.object({ n: z.number() }))`SELECT count(*)::int AS n FROM slot_handoffs WHERE task_id = ${waiting.json.task_id}`);
    expect(unsent).toBe(0);
  });
});
