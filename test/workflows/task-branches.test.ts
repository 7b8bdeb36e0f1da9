import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { tsToMs } from '@temporalio/common/lib/time';
import { temporal } from '@temporalio/proto';
import { bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import pino from 'pino';
import { attemptFailed, solverReportedFailure, type AttemptReport } from '../../src/contract/lifecycle';
import { adminCompleteSignal, attemptNodeLostSignal, cancelTaskSignal, slotHandedSignal, taskStatusQuery } from '../../src/contract/workflows';
import { WORKFLOWS_PATH } from '../../src/temporal/bundle';
import { installTemporalRuntime } from '../../src/temporal/runtime';
import { startTimeSkippingServer, type TimeSkippingServer } from '../support/time-skipping';
import { taskInput, untilCancelled, WorkflowHarness } from '../support/workflow-harness';

/**
 * The task workflow's branches that wait on its timers (its deadline, its wait for a slot) on the
 * time-skipping test server, its activities scripted in this process: minutes of workflow time in
 * milliseconds, with no database, solver or API node. The test server holds its clock while an activity
 * is outstanding, so an activity's own timeouts (a dead node's 15 s schedule-to-start, a silent one's
 * 10 s heartbeat) would pass in real time: a lost node is scripted as its activity failing.
 */

const MINUTE = 60_000;

/**
 * Workflow time from an event of the history (its first by default) to its close, on the server's clock.
 * (The clock read after a result is no measure: with nothing left to run, the server skips on to the next
 * timer it holds, such as a finished workflow's deadline.)
 */
function workflowTime(history: temporal.api.history.v1.IHistory, from = temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED): number {
  const events = history.events ?? [];
  const at = (event: temporal.api.history.v1.IHistoryEvent | undefined) => tsToMs(event?.eventTime);
  return at(events.at(-1)) - at(events.find((event) => event.eventType === from));
}

let server: TimeSkippingServer;
let harness: WorkflowHarness;
let bundle: Promise<WorkflowBundleWithSourceMap> | undefined;

/**
 * A server of its own, with its workers, for the tests of the `describe` calling this: the test server's
 * clock is one for all its workflows, and an activity still running when its workflow ended (an attempt
 * cancelled by an admin's completion) holds that clock for good.
 */
function ownServer() {
  beforeAll(async () => {
    // The test server does not advertise the capabilities the SDK warns about (heartbeat details on failure).
    installTemporalRuntime(pino({ level: 'error' }));
    bundle ??= bundleWorkflowCode({ workflowsPath: WORKFLOWS_PATH, logger: { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} } as never });
    server = await startTimeSkippingServer();
    harness = await WorkflowHarness.start(server.address, await bundle, { client: server.client });
  });
  afterAll(async () => {
    await harness?.close();
    await server?.stop();
  });
}

describe('the task workflow on workflow time', () => {
  jest.setTimeout(60_000);
  let n = 0;
  const nextTaskId = () => `task_ts${n++}`;

  describe('its deadline', () => {
    ownServer();

    test('a task no solver takes waits its whole ten minutes, asking matching once, then times out', async () => {
      const taskId = nextTaskId();
      const { result, history } = await harness.run('taskWorkflow', taskInput(taskId, { timeoutSeconds: 600 }), {});
      expect(result).toMatchObject({ taskId, status: 'timed_out', error: { type: 'task_timeout', message: 'No solver took the task before its deadline.' } });
      expect(workflowTime(history)).toBeGreaterThanOrEqual(10 * MINUTE);
      expect(harness.calls.reserved).toHaveLength(1);
      expect(harness.calls.finished).toEqual([{ status: 'timed_out', error: result.error }]);
    });

    test('a task whose attempt failed and that no other solver takes times out at its deadline, not before', async () => {
      const taskId = nextTaskId();
      const { result, history } = await harness.run('taskWorkflow', taskInput(taskId, { timeoutSeconds: 600 }), {
        reserve: (input) => (input.attemptNumber === 1 ? { assignment: harness.assignment(taskId, 1) } : { assignment: null, untriedOnline: 1, finishedAs: null, queued: true }),
        dispatch: async () => solverReportedFailure({ type: 'upstream_503', message: 'busy' }, true, 0),
      });
      expect(result).toMatchObject({ status: 'timed_out', error: { type: 'task_timeout', message: 'The task did not finish before its deadline.' } });
      expect(harness.calls.reserved).toHaveLength(2);
      expect(workflowTime(history)).toBeGreaterThanOrEqual(10 * MINUTE);
    });

    test('a slot handed after eight minutes of ten gets an attempt bounded by the two minutes left, not its own five', async () => {
      const taskId = nextTaskId();
      const handle = await harness.start('taskWorkflow', taskInput(taskId, { timeoutSeconds: 600, attemptTimeoutSeconds: 300 }), {});
      await server.sleep(8 * MINUTE);
      expect(await handle.query(taskStatusQuery)).toBe('queued');
      const handedAt = await server.now();
      await handle.signal(slotHandedSignal, { attemptNumber: 1, assignment: harness.assignment(taskId, 1) });
      expect(await handle.result()).toEqual({ taskId, status: 'completed' });
      const [dispatched] = harness.calls.dispatched;
      expect(dispatched!.deadlineMs - handedAt).toBeLessThanOrEqual(2 * MINUTE);
      expect(dispatched!.deadlineMs - handedAt).toBeGreaterThan(MINUTE);
      expect(harness.calls.reserved).toHaveLength(1);
    });
  });

  describe('reassignment after a failure', () => {
    ownServer();

    test('a failure its solver reports closes the attempt and excludes that solver from the next', async () => {
      const taskId = nextTaskId();
      const { result } = await harness.run('taskWorkflow', taskInput(taskId), {
        reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
        dispatch: async (input) => (input.attemptId.endsWith('.a1') ? solverReportedFailure({ type: 'upstream_503', message: 'busy' }, true, 0) : { ok: true, chunks: 0, status: 'completed' }),
      });
      expect(result).toEqual({ taskId, status: 'completed' });
      expect(harness.calls.closed).toEqual([{ attemptId: `${taskId}.a1`, outcome: 'error', error: { type: 'upstream_503', message: 'busy' } }]);
      expect(harness.calls.reserved.map((r) => [r.attemptNumber, r.excludedSolverIds, r.lastResortSolverIds])).toEqual([
        [1, [], []],
        [2, ['solver-1'], []],
      ]);
    });

    test('an attempt lost with its node keeps its solver as a last resort for the next', async () => {
      const taskId = nextTaskId();
      const { result } = await harness.run('taskWorkflow', taskInput(taskId), {
        reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
        dispatch: async (input) => {
          if (input.attemptId.endsWith('.a1')) throw ApplicationFailure.nonRetryable('node went away');
          return { ok: true, chunks: 0, status: 'completed' };
        },
      });
      expect(result).toEqual({ taskId, status: 'completed' });
      expect(harness.calls.closed).toEqual([expect.objectContaining({ outcome: 'lost', error: expect.objectContaining({ type: 'node_unavailable' }) })]);
      expect(harness.calls.reserved[1]).toMatchObject({ attemptNumber: 2, excludedSolverIds: [], lastResortSolverIds: ['solver-1'] });
    });

    test('after a failure with no other solver free, it waits minutes without asking again and runs the slot then handed to it', async () => {
      const taskId = nextTaskId();
      const handle = await harness.start('taskWorkflow', taskInput(taskId, { timeoutSeconds: 600 }), {
        reserve: (input) => (input.attemptNumber === 1 ? { assignment: harness.assignment(taskId, 1) } : { assignment: null, untriedOnline: 1, finishedAs: null, queued: true }),
        dispatch: async (input) => (input.attemptId.endsWith('.a1') ? solverReportedFailure({ type: 'upstream_503', message: 'busy' }, true, 0) : { ok: true, chunks: 0, status: 'completed' }),
      });
      while (harness.calls.reserved.length < 2) await new Promise((resolve) => setTimeout(resolve, 10));
      await server.sleep(4 * MINUTE);
      expect(await handle.query(taskStatusQuery)).toBe('queued');
      await handle.signal(slotHandedSignal, { attemptNumber: 2, assignment: harness.assignment(taskId, 2) });
      expect(await handle.result()).toEqual({ taskId, status: 'completed' });
      expect(harness.calls.reserved).toHaveLength(2);
      expect(harness.calls.dispatched.map((d) => d.solverId)).toEqual(['solver-1', 'solver-2']);
    });
  });

  describe('every solver tried', () => {
    ownServer();

    test('with no untried solver online after a failure it fails at once, not at its deadline an hour later', async () => {
      const taskId = nextTaskId();
      const { result, history } = await harness.run('taskWorkflow', taskInput(taskId, { timeoutSeconds: 3600 }), {
        reserve: (input) => (input.attemptNumber === 1 ? { assignment: harness.assignment(taskId, 1) } : { assignment: null, untriedOnline: 0, finishedAs: null }),
        dispatch: async () => attemptFailed('accept_timeout', 'did not accept', 0),
      });
      expect(result).toMatchObject({ status: 'failed', error: { type: 'solver_failed' } });
      expect(result.error?.message).toMatch(/^No untried solver is online after 1 failed attempt\(s\); last: did not accept/);
      expect(workflowTime(history)).toBeLessThan(MINUTE);
    });

    test('after its attempt limit it fails with the last error, each solver tried once', async () => {
      const taskId = nextTaskId();
      const { result, history } = await harness.run('taskWorkflow', taskInput(taskId, { maxAttempts: 3, timeoutSeconds: 3600 }), {
        reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
        dispatch: async () => attemptFailed('attempt_timeout', 'silent', 0),
      });
      expect(result).toMatchObject({ status: 'failed', error: { type: 'solver_failed', message: 'All 3 attempts failed; last: silent' } });
      expect(harness.calls.reserved.at(-1)).toMatchObject({ excludedSolverIds: ['solver-1', 'solver-2'] });
      expect(harness.calls.dispatched.map((d) => d.solverId)).toEqual(['solver-1', 'solver-2', 'solver-3']);
      expect(workflowTime(history)).toBeLessThan(MINUTE);
    });
  });

  describe('admin completion', () => {
    ownServer();

    test('an admin completes a task queued for five minutes; its hold is settled, not released', async () => {
      const taskId = nextTaskId();
      const handle = await harness.start('taskWorkflow', taskInput(taskId, { timeoutSeconds: 600 }), {});
      await server.sleep(5 * MINUTE);
      expect(await handle.query(taskStatusQuery)).toBe('queued');
      await handle.signal(adminCompleteSignal, { solverId: 'solver-admin', result: { results: [] } });
      expect(await handle.result()).toEqual({ taskId, status: 'completed' });
      expect(harness.calls.completedByAdmin).toEqual([{ kind: 'admin', solverId: 'solver-admin', result: { results: [] } }]);
      expect(harness.calls.finished).toEqual([]);
      expect(harness.calls.reserved).toHaveLength(1);
    });
  });

  describe('admin completion during an attempt', () => {
    ownServer();

    test('an admin completion during an attempt cancels the attempt and completes the task', async () => {
      const taskId = nextTaskId();
      let cancelled = false;
      const handle = await harness.start('taskWorkflow', taskInput(taskId, { attemptTimeoutSeconds: 300 }), {
        reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
        dispatch: untilCancelled(() => (cancelled = true)),
      });
      await harness.dispatched();
      await handle.signal(adminCompleteSignal, { solverId: 'solver-admin', result: { results: [] } });
      expect(await handle.result()).toEqual({ taskId, status: 'completed' });
      expect(harness.calls.completedByAdmin).toHaveLength(1);
      expect(harness.calls.closed).toEqual([]);
      // The attempt's activity hears of its cancellation at its next heartbeat.
      for (let waited = 0; !cancelled && waited < 5000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
      expect(cancelled).toBe(true);
    });
  });

  describe('an attempt whose node is seen gone', () => {
    ownServer();

    test('is lost at once, its activity not waited for, and its solver kept as a last resort for the next', async () => {
      const taskId = nextTaskId();
      const handle = await harness.start('taskWorkflow', taskInput(taskId, { attemptTimeoutSeconds: 300 }), {
        reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
        dispatch: async (input) => (input.attemptId.endsWith('.a1') ? untilCancelled()() : { ok: true, chunks: 0, status: 'completed' }),
      });
      await harness.dispatched();
      // Another attempt's loss is not this one's.
      await handle.signal(attemptNodeLostSignal, { attemptId: `${taskId}.a9`, nodeId: harness.nodeId });
      await handle.signal(attemptNodeLostSignal, { attemptId: `${taskId}.a1`, nodeId: harness.nodeId });
      expect(await handle.result()).toEqual({ taskId, status: 'completed' });
      expect(harness.calls.closed).toEqual([
        expect.objectContaining({ attemptId: `${taskId}.a1`, outcome: 'lost', error: expect.objectContaining({ type: 'node_unavailable', message: expect.stringMatching(/is gone/) }) }),
      ]);
      expect(harness.calls.reserved[1]).toMatchObject({ attemptNumber: 2, excludedSolverIds: [], lastResortSolverIds: ['solver-1'] });
    });
  });

  describe('client cancel', () => {
    ownServer();

    test("its client's cancel ends a task queued for five minutes at once, not at its deadline", async () => {
      const taskId = nextTaskId();
      const handle = await harness.start('taskWorkflow', taskInput(taskId, { timeoutSeconds: 3600 }), {});
      await server.sleep(5 * MINUTE);
      await handle.signal(cancelTaskSignal);
      expect(await handle.result()).toEqual({ taskId, status: 'cancelled', error: { type: 'task_cancelled', message: 'Cancelled by its client.' } });
      expect(workflowTime(await handle.fetchHistory(), temporal.api.enums.v1.EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)).toBeLessThan(MINUTE);
      expect(harness.calls.finished).toEqual([{ status: 'cancelled', error: { type: 'task_cancelled', message: 'Cancelled by its client.' } }]);
      expect(harness.calls.dispatched).toEqual([]);
    });

    test('a cancelled workflow (its chat client went away) fails the task as client_cancelled, releasing its hold', async () => {
      const taskId = nextTaskId();
      const handle = await harness.start('chatCompletionWorkflow', taskInput(taskId, { taskType: 'chat_completion', timeoutSeconds: 600 }), {});
      await server.sleep(2 * MINUTE);
      await handle.cancel();
      await expect(handle.result()).rejects.toBeInstanceOf(WorkflowFailedError);
      expect(harness.calls.finished).toEqual([{ status: 'failed', error: { type: 'client_cancelled', message: 'The client went away before the result.' } }]);
    });
  });

  describe("a chat's lost node", () => {
    ownServer();

    const chat = (taskId: string) => taskInput(taskId, { taskType: 'chat_completion', stream: { clientNodeId: harness.nodeId, completionId: `chatcmpl-${taskId}` } });
    const lostFirst = async (input: { attemptId: string }): Promise<AttemptReport> => {
      if (input.attemptId.endsWith('.a1')) throw ApplicationFailure.nonRetryable('node went away');
      return { ok: true, chunks: 2, status: 'completed' };
    };

    test('a chat attempt lost with its node is reassigned when the client node says no delta reached the client', async () => {
      const taskId = nextTaskId();
      const { result } = await harness.run('chatCompletionWorkflow', chat(taskId), {
        reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
        dispatch: lostFirst,
        fence: () => 0,
      });
      expect(result).toEqual({ taskId, status: 'completed' });
      expect(harness.calls.fenced).toEqual([`${taskId}.a1`]);
      expect(harness.calls.dispatched.map((d) => d.solverId)).toEqual(['solver-1', 'solver-2']);
    });

    test('a chat attempt lost with its node fails the completion when the client node says deltas reached the client', async () => {
      const taskId = nextTaskId();
      const { result } = await harness.run('chatCompletionWorkflow', chat(taskId), {
        reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
        dispatch: lostFirst,
        fence: () => 3,
      });
      expect(result).toMatchObject({ status: 'failed', error: { type: 'solver_failed', message: 'The solver failed after streaming began: node went away' } });
      expect(harness.calls.dispatched).toHaveLength(1);
    });

    test('a lost chat attempt whose client node cannot say counts as having reached the client: the completion fails', async () => {
      const taskId = nextTaskId();
      const { result } = await harness.run('chatCompletionWorkflow', chat(taskId), {
        reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
        dispatch: lostFirst,
        fence: () => {
          throw ApplicationFailure.nonRetryable('client node shutting down');
        },
      });
      expect(result).toMatchObject({ status: 'failed', error: { type: 'solver_failed', message: 'The solver failed after streaming began: node went away' } });
      expect(harness.calls.fenced).toEqual([`${taskId}.a1`]);
      expect(harness.calls.dispatched).toHaveLength(1);
    });
  });
});
