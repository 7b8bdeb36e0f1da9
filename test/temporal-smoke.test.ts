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
});
