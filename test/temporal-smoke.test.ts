import crypto from 'node:crypto';
import { createTemporalClient } from '../src/temporal/connection';
import { startTestStack, testEndpoints, type TestStack } from './support/stack';

describe('Temporal', () => {
  let stack: TestStack;
  beforeAll(async () => {
    stack = await startTestStack({ worker: true });
  });
  afterAll(async () => {
    await stack.close();
  });

  test('a smoke workflow runs its activity on the worker through the real dev server', async () => {
    const client = await createTemporalClient(testEndpoints().temporalAddress, 'default');
    const result = await client.workflow.execute('smokeWorkflow', {
      taskQueue: stack.config.taskQueue,
      workflowId: `smoke-${crypto.randomUUID()}`,
      args: ['hello'],
    });
    expect(result).toBe('hello');
    await client.connection.close();
  });

  test('the embedded server keeps each task queue in one partition, so tasks are not forwarded between partitions', async () => {
    const client = await createTemporalClient(testEndpoints().temporalAddress, 'default');
    const partitions = await client.workflowService.listTaskQueuePartitions({
      namespace: 'default',
      taskQueue: { name: stack.config.taskQueue },
    });
    expect(partitions.workflowTaskQueuePartitions).toHaveLength(1);
    expect(partitions.activityTaskQueuePartitions).toHaveLength(1);
    await client.connection.close();
  });
});
