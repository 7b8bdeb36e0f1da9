import crypto from 'node:crypto';
import type { Client } from '@temporalio/client';
import { createAccount } from '../src/db/accounts';
import { deposit } from '../src/db/ledger';
import { NotifyBus } from '../src/db/notify';
import { createDb, type Db } from '../src/db/pool';
import { getTaskRecord } from '../src/db/tasks/records';
import { EarlyAttempts } from '../src/dispatch/early-attempts';
import { createLogger } from '../src/logger';
import { TaskFinishedWatch } from '../src/tasks/finished';
import { RecentPayloads } from '../src/tasks/recent-payloads';
import { TaskEngine } from '../src/tasks/engine';
import { pgTaskStore } from '../src/tasks/store';
import type { AttemptStops } from '../src/dispatch/attempt-stops';
import type { ArtifactStore } from '../src/artifacts/store';
import { createTask, failTask } from './support/tasks';
import { testConfig, testEndpoints } from './support/stack';

let db: Db;
let bus: NotifyBus;
let watch: TaskFinishedWatch;
beforeAll(async () => {
  db = await createDb(testEndpoints().databaseUrl);
  bus = new NotifyBus(testEndpoints().databaseUrl, createLogger('warn', 'test'));
  await bus.start();
  watch = await TaskFinishedWatch.start(bus);
});
afterAll(async () => {
  await bus.close();
  await db.end();
});

async function newTask() {
  const { account } = await createAccount(db);
  await deposit(db, { accountId: account.account_id, amount: '10', idempotencyKey: `t:${crypto.randomUUID()}` });
  const taskId = `task_${crypto.randomBytes(8).toString('hex')}`;
  await createTask(db, { taskId, accountId: account.account_id, taskType: 'proxy_fetch', payload: {}, maxPricePoints: '5', timeoutSeconds: 60, workflowId: `task-${taskId}` });
  return taskId;
}

async function failAndSeeAnnounced(taskId: string) {
  const waiting = watch.wait(taskId);
  await failTask(db, taskId);
  await expect(waiting.finished).resolves.toBe('failed');
  waiting.stop();
}

describe('terminal states are announced when they commit', () => {
  test('a waiter learns the final status of its task, and only of its task', async () => {
    const [mine, other] = [await newTask(), await newTask()];
    const waiting = watch.wait(mine);
    let otherSeen = false;
    const otherWait = watch.wait(other);
    void otherWait.finished.then(() => (otherSeen = true));
    await failTask(db, mine, 'task_timeout');
    await expect(waiting.finished).resolves.toBe('timed_out');
    expect(otherSeen).toBe(false);
    waiting.stop();
    otherWait.stop();
    // A task left open would be started by a later suite's stranded-task sweep.
    await failTask(db, other);
  });

  test('a waiter that registers just after its task finished still learns the final status', async () => {
    const taskId = await newTask();
    await failAndSeeAnnounced(taskId);
    // A fast solver can finish the task before the creating request begins to wait for it.
    const late = watch.wait(taskId);
    await expect(late.finished).resolves.toBe('failed');
    late.stop();
  });

  test('a finish that does not apply announces nothing: the task keeps its first terminal state', async () => {
    const taskId = await newTask();
    await failAndSeeAnnounced(taskId);
    const second = await failTask(db, taskId, 'task_timeout');
    expect(second.applied).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 300));
    const waiting = watch.wait(taskId);
    await expect(waiting.finished).resolves.toBe('failed');
    waiting.stop();
  });
});

describe('waiting for a task', () => {
  // A Temporal client whose workflow result is counted and answered by the test.
  function temporalWith(result: () => Promise<unknown>) {
    const calls = { result: 0 };
    const client = { workflow: { getHandle: () => ({ result: () => (calls.result++, result()) }) } } as unknown as Client;
    return { client, calls };
  }
  const serviceWith = (temporal: Client, resultFallbackMs?: number) =>
    new TaskEngine({
      config: testConfig(),
      store: pgTaskStore({ db, trust: testConfig().trust, artifacts: {} as ArtifactStore }),
      temporal,
      logger: createLogger('warn', 'test'),
      eagerStart: false,
      handoffs: { deliver: () => undefined },
      webhooks: { send: () => undefined },
      // Never used (nor the store's): these tests only wait.
      artifacts: {} as ArtifactStore,
      stops: {} as AttemptStops,
      finished: watch,
      payloads: new RecentPayloads(),
      // Never used: these tests create no chat.
      earlyAttempts: {} as EarlyAttempts,
      resultFallbackMs,
    });
  const recordOf = async (taskId: string) => (await getTaskRecord(db, taskId))!;

  test('an announced terminal state answers without asking Temporal for the workflow result', async () => {
    const taskId = await newTask();
    const { client, calls } = temporalWith(() => new Promise(() => undefined));
    const waiting = serviceWith(client).waitForResult(await recordOf(taskId), 10_000);
    await failTask(db, taskId);
    await expect(waiting).resolves.toEqual({ taskId, status: 'failed' });
    expect(calls.result).toBe(0);
  });

  test('without an announcement the workflow result answers once the fallback delay has passed', async () => {
    const taskId = await newTask();
    const { client, calls } = temporalWith(async () => ({ taskId, status: 'completed' }));
    await expect(serviceWith(client, 50).waitForResult(await recordOf(taskId), 10_000)).resolves.toEqual({ taskId, status: 'completed' });
    expect(calls.result).toBe(1);
    await failTask(db, taskId);
  });

  test('neither within the time allowed: null', async () => {
    const taskId = await newTask();
    const { client } = temporalWith(() => new Promise(() => undefined));
    await expect(serviceWith(client, 50).waitForResult(await recordOf(taskId), 200)).resolves.toBeNull();
    await failTask(db, taskId);
  });
});
