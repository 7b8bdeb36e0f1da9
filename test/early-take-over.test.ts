import crypto from 'node:crypto';
import { Context } from '@temporalio/activity';
import { NativeConnection, Worker } from '@temporalio/worker';
import pino from 'pino';
import type { DispatchInput } from '../activities/dispatch';
import type { AttemptReport } from '../src/contract/lifecycle';
import { createTemporalClient } from '../src/temporal/connection';
import { workflowBundle } from '../src/temporal/bundle';
import { installTemporalRuntime } from '../src/temporal/runtime';
import { nodeTaskQueue, slotHandedSignal, type TaskWorkflowInput, type TaskWorkflowResult } from '../src/contract/workflows';
import { testConfig, testEndpoints } from './support/stack';

/**
 * The task workflow against the real dev server, with its activities replaced: a first attempt sent
 * early whose dispatch activity Temporal loses (here: it stops heartbeating) is taken over by another
 * dispatch activity for the same attempt, since the attempt itself is still running on its node; and a
 * slot handed to a waiting task whose task went out early reaches the dispatch activity as such.
 */
describe('attempts sent early, in the task workflow', () => {
  jest.setTimeout(90_000);
  const logger = pino({ level: 'warn' });

  test('a first attempt whose dispatch activity is lost is taken over by another dispatch activity, and the completion succeeds without asking the client node', async () => {
    installTemporalRuntime(logger);
    const suffix = crypto.randomBytes(4).toString('hex');
    const taskQueue = `early-take-over-${suffix}`;
    const nodeId = `fake-node-${suffix}`;
    const connection = await NativeConnection.connect({ address: testEndpoints().temporalAddress });
    const dispatches: DispatchInput[] = [];
    const fences: string[] = [];
    const finished: string[] = [];
    const workflows = await Worker.create({
      connection,
      taskQueue,
      workflowBundle: await workflowBundle(logger, testConfig().workflowBundlePath),
      activities: {
        finishTaskWithoutResult: async (input: { status: string }) => {
          finished.push(input.status);
          return { status: input.status, applied: true };
        },
        closeAttempt: async () => true,
      },
    });
    const node = await Worker.create({
      connection,
      taskQueue: nodeTaskQueue(nodeId),
      activities: {
        async dispatchAttempt(input: DispatchInput): Promise<AttemptReport> {
          dispatches.push(input);
          if (dispatches.length === 1) {
            // Lost: never heartbeats and never answers, until Temporal gives up on it.
            await new Promise((resolve) => Context.current().cancellationSignal.addEventListener('abort', resolve));
            throw new Error('lost');
          }
          return { ok: true, chunks: 3, status: 'completed' };
        },
        async fenceChatAttempt(input: { attemptId: string }) {
          fences.push(input.attemptId);
          return 1;
        },
      },
    });
    const client = await createTemporalClient(testEndpoints().temporalAddress, 'default');
    const taskId = `chat_${suffix}`;
    const input: TaskWorkflowInput = {
      taskId,
      taskType: 'chat_completion',
      maxPricePoints: '100',
      timeoutSeconds: 60,
      maxAttempts: 3,
      attemptTimeoutSeconds: 60,
      acceptTimeoutMs: 1000,
      strongModels: ['gpt-4o'],
      stream: { clientNodeId: nodeId, completionId: `chatcmpl-${suffix}` },
      firstAssignment: { attemptId: `${taskId}.a1`, solverId: 'solver-1', nodeId, pricePoints: '1', billingType: 'per_token', marginalCost: '0.01', modelName: 'gpt-4o' },
      firstAttemptStartedEarly: true,
    };
    const running = [workflows.run(), node.run()];
    let result: TaskWorkflowResult;
    try {
      result = await client.workflow.execute('chatCompletionWorkflow', { taskQueue, workflowId: `early-take-over-${suffix}`, args: [input] });
    } finally {
      workflows.shutdown();
      node.shutdown();
      await Promise.allSettled(running);
    }
    expect(result).toMatchObject({ taskId, status: 'completed' });
    expect(dispatches.map((d) => [d.attemptId, d.startedEarly])).toEqual([
      [`${taskId}.a1`, true],
      [`${taskId}.a1`, true],
    ]);
    expect(fences).toEqual([]);
    expect(finished).toEqual([]);
    await client.connection.close();
    await connection.close();
  });

  test('a waiting task handed a slot whose task went out early passes that on, and its dispatch activity takes the attempt over', async () => {
    installTemporalRuntime(logger);
    const suffix = crypto.randomBytes(4).toString('hex');
    const taskQueue = `handed-early-${suffix}`;
    const nodeId = `fake-node-${suffix}`;
    const connection = await NativeConnection.connect({ address: testEndpoints().temporalAddress });
    const dispatches: DispatchInput[] = [];
    let reserved = 0;
    const workflows = await Worker.create({
      connection,
      taskQueue,
      workflowBundle: await workflowBundle(logger, testConfig().workflowBundlePath),
      activities: {
        reserveAttempt: async () => {
          reserved += 1;
          return { assignment: null, untriedOnline: 1, finishedAs: null, queued: true };
        },
        finishTaskWithoutResult: async (input: { status: string }) => ({ status: input.status, applied: true }),
        closeAttempt: async () => true,
      },
    });
    const node = await Worker.create({
      connection,
      taskQueue: nodeTaskQueue(nodeId),
      activities: {
        async dispatchAttempt(input: DispatchInput): Promise<AttemptReport> {
          dispatches.push(input);
          return { ok: true, chunks: 0, status: 'completed' };
        },
      },
    });
    const client = await createTemporalClient(testEndpoints().temporalAddress, 'default');
    const taskId = `task_${suffix}`;
    const input: TaskWorkflowInput = { taskId, taskType: 'web_search', maxPricePoints: '5', timeoutSeconds: 60, maxAttempts: 3, attemptTimeoutSeconds: 60, acceptTimeoutMs: 1000 };
    const running = [workflows.run(), node.run()];
    let result: TaskWorkflowResult;
    try {
      const handle = await client.workflow.start('taskWorkflow', { taskQueue, workflowId: `handed-early-${suffix}`, args: [input] });
      while (reserved === 0) await new Promise((resolve) => setTimeout(resolve, 20));
      const assignment = { attemptId: `${taskId}.a1`, solverId: 'solver-1', nodeId, pricePoints: '1', billingType: 'per_request', marginalCost: '0', modelName: 'm' };
      await handle.signal(slotHandedSignal, { attemptNumber: 1, assignment, startedEarly: true });
      result = await handle.result();
    } finally {
      workflows.shutdown();
      node.shutdown();
      await Promise.allSettled(running);
    }
    expect(result).toMatchObject({ taskId, status: 'completed' });
    expect(reserved).toBe(1);
    expect(dispatches.map((d) => [d.attemptId, d.startedEarly])).toEqual([[`${taskId}.a1`, true]]);
    await client.connection.close();
    await connection.close();
  });
});
