import crypto from 'node:crypto';
import { createAccount } from '../src/db/accounts';
import { deposit } from '../src/db/ledger';
import { NotifyBus } from '../src/db/notify';
import { createDb, type Db } from '../src/db/pool';
import { createTaskWithHold, finishTaskWithoutResult } from '../src/db/tasks';
import { createLogger } from '../src/logger';
import { TaskFinishedWatch } from '../src/tasks/finished';
import { testEndpoints } from './support/stack';

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
  await createTaskWithHold(db, { taskId, accountId: account.account_id, taskType: 'proxy_fetch', payload: {}, maxPricePoints: '5', timeoutSeconds: 60, workflowId: `task-${taskId}` });
  return taskId;
}

describe('terminal states are announced when they commit', () => {
  test('a waiter learns the final status of its task, and only of its task', async () => {
    const [mine, other] = [await newTask(), await newTask()];
    const waiting = watch.wait(mine);
    let otherSeen = false;
    const otherWait = watch.wait(other);
    void otherWait.finished.then(() => (otherSeen = true));
    await finishTaskWithoutResult(db, { taskId: mine, status: 'timed_out', error: { type: 'task_timeout', message: 'x' } });
    await expect(waiting.finished).resolves.toBe('timed_out');
    expect(otherSeen).toBe(false);
    waiting.stop();
    otherWait.stop();
    // A task left open would be started by a later suite's stranded-task sweep.
    await finishTaskWithoutResult(db, { taskId: other, status: 'failed', error: { type: 'test_cleanup', message: 'x' } });
  });

  test('a task that was already finished is not announced again', async () => {
    const taskId = await newTask();
    // Let the first announcement arrive before listening for a second one.
    const first = watch.wait(taskId);
    await finishTaskWithoutResult(db, { taskId, status: 'failed', error: { type: 'x', message: 'x' } });
    await expect(first.finished).resolves.toBe('failed');
    first.stop();
    const waiting = watch.wait(taskId);
    const second = await finishTaskWithoutResult(db, { taskId, status: 'timed_out', error: { type: 'x', message: 'x' } });
    expect(second.applied).toBe(false);
    const outcome = await Promise.race([waiting.finished, new Promise((resolve) => setTimeout(() => resolve('silent'), 500))]);
    expect(outcome).toBe('silent');
    waiting.stop();
  });
});
