import { ApplicationFailure } from '@temporalio/common';
import { WorkflowFailedError } from '@temporalio/client';
import { attemptFailed, solverReportedFailure } from '../src/contract/lifecycle';
import { adminCompleteSignal, cancelTaskSignal, slotHandedSignal, taskStatusQuery, thirdRunWorkflowId } from '../src/contract/workflows';
import { testConfig, testEndpoints } from './support/stack';
import { canaryInput, taskInput, untilCancelled, verificationInput, WorkflowHarness } from './support/workflow-harness';

/** The task workflow's branches, with its activities replaced: no database, no solvers, no API node. */
describe('the task workflow', () => {
  jest.setTimeout(60_000);
  let harness: WorkflowHarness;
  let n = 0;
  const nextTaskId = () => `task_wf${Date.now()}${n++}`;

  beforeAll(async () => {
    harness = await WorkflowHarness.start(testEndpoints().temporalAddress, { codePath: testConfig().workflowBundlePath! });
  });
  afterAll(async () => {
    await harness?.close();
  });

  test('with no solver free before its deadline it times out, releasing its hold, having asked matching once', async () => {
    const taskId = nextTaskId();
    const { result } = await harness.run('taskWorkflow', taskInput(taskId, { timeoutSeconds: 1 }), {});
    expect(result).toMatchObject({ taskId, status: 'timed_out', error: { type: 'task_timeout', message: 'No solver took the task before its deadline.' } });
    expect(harness.calls.finished).toEqual([{ status: 'timed_out', error: result.error }]);
    expect(harness.calls.dispatched).toEqual([]);
    expect(harness.calls.reserved).toHaveLength(1);
  });

  test('a queued task shows queued, waits without asking again, and runs the slot handed to it by signal', async () => {
    const taskId = nextTaskId();
    const handle = await harness.start('taskWorkflow', taskInput(taskId), {});
    while (harness.calls.reserved.length === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await handle.query(taskStatusQuery)).toBe('queued');
    const slot = harness.assignment(taskId, 1, 'solver-handed');
    // Repeated (the sweep may send a handoff twice): the first counts.
    await handle.signal(slotHandedSignal, { attemptNumber: 1, assignment: slot });
    await handle.signal(slotHandedSignal, { attemptNumber: 1, assignment: harness.assignment(taskId, 1, 'other') });
    expect(await handle.result()).toEqual({ taskId, status: 'completed' });
    expect(harness.calls.reserved).toHaveLength(1);
    expect(harness.calls.dispatched.map((d) => [d.attemptId, d.solverId])).toEqual([[`${taskId}.a1`, 'solver-handed']]);
  });

  test('a failed attempt is closed and the task reassigned to a solver not tried yet', async () => {
    const taskId = nextTaskId();
    const { result } = await harness.run('taskWorkflow', taskInput(taskId), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: async (input) =>
        input.attemptId.endsWith('.a1') ? solverReportedFailure({ type: 'upstream_503', message: 'busy' }, true, 0) : { ok: true, chunks: 0, status: 'completed' },
    });
    expect(result).toEqual({ taskId, status: 'completed' });
    expect(harness.calls.closed).toEqual([{ attemptId: `${taskId}.a1`, outcome: 'error', error: { type: 'upstream_503', message: 'busy' } }]);
    expect(harness.calls.reserved.map((r) => [r.attemptNumber, r.excludedSolverIds, r.lastResortSolverIds])).toEqual([
      [1, [], []],
      [2, ['solver-1'], []],
    ]);
  });

  test('an attempt lost with its node leaves its solver as a last resort, not excluded', async () => {
    const taskId = nextTaskId();
    const { result } = await harness.run('taskWorkflow', taskInput(taskId), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: async (input) => {
        if (input.attemptId.endsWith('.a1')) throw ApplicationFailure.nonRetryable('node went away');
        return { ok: true, chunks: 0, status: 'completed' };
      },
    });
    expect(result.status).toBe('completed');
    expect(harness.calls.closed[0]).toMatchObject({ outcome: 'lost', error: { type: 'node_unavailable' } });
    expect(harness.calls.reserved[1]).toMatchObject({ excludedSolverIds: [], lastResortSolverIds: ['solver-1'] });
  });

  test('attempts lost to platform faults do not count toward the attempt limit', async () => {
    const taskId = nextTaskId();
    const { result } = await harness.run('taskWorkflow', taskInput(taskId, { maxAttempts: 1 }), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber, 'solver-1') }),
      dispatch: async (input) => {
        if (!input.attemptId.endsWith('.a3')) throw ApplicationFailure.nonRetryable('node went away');
        return { ok: true, chunks: 0, status: 'completed' };
      },
    });
    expect(result).toEqual({ taskId, status: 'completed' });
    expect(harness.calls.closed.map((c) => c.outcome)).toEqual(['lost', 'lost']);
    // The same solver again: nobody else fits, and a lost attempt does not exclude it.
    expect(harness.calls.dispatched.map((d) => d.solverId)).toEqual(['solver-1', 'solver-1', 'solver-1']);
  });

  test('after an attempt lost to a platform fault with no solver online, it waits for one instead of failing', async () => {
    const taskId = nextTaskId();
    const handle = await harness.start('taskWorkflow', taskInput(taskId), {
      reserve: (input) => (input.attemptNumber === 1 ? { assignment: harness.assignment(taskId, 1) } : { assignment: null, untriedOnline: 0, finishedAs: null, queued: true }),
      dispatch: async (input) => {
        if (input.attemptId.endsWith('.a1')) throw ApplicationFailure.nonRetryable('node went away');
        return { ok: true, chunks: 0, status: 'completed' };
      },
    });
    while (harness.calls.reserved.length < 2) await new Promise((resolve) => setTimeout(resolve, 20));
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await handle.query(taskStatusQuery)).toBe('queued');
    // Its solver reconnects (to a live node): its slot is handed to the task.
    await handle.signal(slotHandedSignal, { attemptNumber: 2, assignment: harness.assignment(taskId, 2, 'solver-1') });
    expect(await handle.result()).toEqual({ taskId, status: 'completed' });
    expect(harness.calls.finished).toEqual([]);
  });

  test('platform faults beyond the bound count toward the attempt limit, so a failing platform cannot retry a task for ever', async () => {
    const taskId = nextTaskId();
    const { result } = await harness.run('taskWorkflow', taskInput(taskId, { maxAttempts: 2 }), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber, 'solver-1') }),
      dispatch: async () => {
        throw ApplicationFailure.nonRetryable('node went away');
      },
    });
    // Five uncounted (MAX_UNCOUNTED_PLATFORM_FAULTS), then two counted toward the limit of 2.
    expect(result).toMatchObject({ status: 'failed', error: { type: 'solver_failed' } });
    expect(result.error?.message).toMatch(/^All 2 attempts failed; last: node went away/);
    expect(harness.calls.closed.map((c) => c.outcome)).toEqual(Array(7).fill('lost'));
  });

  test("a solver's own error frame of a platform fault's type is the solver's failure", async () => {
    const taskId = nextTaskId();
    const { result } = await harness.run('taskWorkflow', taskInput(taskId, { maxAttempts: 1 }), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: async () => solverReportedFailure({ type: 'node_unavailable', message: 'mine' }, true, 0),
    });
    expect(result).toMatchObject({ status: 'failed', error: { type: 'solver_failed', message: 'All 1 attempts failed; last: mine' } });
    expect(harness.calls.closed.map((c) => c.outcome)).toEqual(['error']);
  });

  test('a solver that says the task cannot succeed fails it at once, without another attempt', async () => {
    const taskId = nextTaskId();
    const { result } = await harness.run('taskWorkflow', taskInput(taskId), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: async () => solverReportedFailure({ type: 'target_refused', message: 'refused by the target' }, false, 0),
    });
    expect(result).toMatchObject({ status: 'failed', error: { type: 'solver_failed', message: 'refused by the target' } });
    expect(harness.calls.reserved).toHaveLength(1);
  });

  test('after max attempts the task fails with the last error', async () => {
    const taskId = nextTaskId();
    const { result } = await harness.run('taskWorkflow', taskInput(taskId, { maxAttempts: 2 }), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: async () => attemptFailed('attempt_timeout', 'silent', 0),
    });
    expect(result).toMatchObject({ status: 'failed', error: { type: 'solver_failed', message: 'All 2 attempts failed; last: silent' } });
    expect(harness.calls.closed.map((c) => c.outcome)).toEqual(['timeout', 'timeout']);
  });

  test('with every eligible solver tried, it fails instead of waiting for its deadline', async () => {
    const taskId = nextTaskId();
    const { result } = await harness.run('taskWorkflow', taskInput(taskId), {
      reserve: (input) => (input.attemptNumber === 1 ? { assignment: harness.assignment(taskId, 1) } : { assignment: null, untriedOnline: 0, finishedAs: null }),
      dispatch: async () => attemptFailed('accept_timeout', 'did not accept', 0),
    });
    expect(result).toMatchObject({ status: 'failed', error: { type: 'solver_failed' } });
    expect(result.error?.message).toMatch(/^No untried solver is online after 1 failed attempt/);
  });

  test('an admin completion during an attempt cancels the attempt and completes the task', async () => {
    const taskId = nextTaskId();
    let dispatchCancelled = false;
    const handle = await harness.start('taskWorkflow', taskInput(taskId), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: untilCancelled(() => (dispatchCancelled = true)),
    });
    await harness.dispatched();
    await handle.signal(adminCompleteSignal, { solverId: 'solver-admin', result: { results: [] } });
    expect(await handle.result()).toEqual({ taskId, status: 'completed' });
    expect(harness.calls.completedByAdmin).toEqual([{ kind: 'admin', solverId: 'solver-admin', result: { results: [] } }]);
    expect(harness.calls.finished).toEqual([]);
    // The attempt's activity hears of its cancellation at its next heartbeat.
    for (let waited = 0; !dispatchCancelled && waited < 5000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(dispatchCancelled).toBe(true);
  });

  test("its client's cancel during an attempt stops the attempt and ends the task cancelled, without another attempt", async () => {
    const taskId = nextTaskId();
    let dispatchCancelled = false;
    const handle = await harness.start('taskWorkflow', taskInput(taskId), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: untilCancelled(() => (dispatchCancelled = true)),
    });
    await harness.dispatched();
    await handle.signal(cancelTaskSignal);
    expect(await handle.result()).toEqual({ taskId, status: 'cancelled', error: { type: 'task_cancelled', message: 'Cancelled by its client.' } });
    expect(harness.calls.finished).toEqual([{ status: 'cancelled', error: { type: 'task_cancelled', message: 'Cancelled by its client.' } }]);
    expect(harness.calls.dispatched).toHaveLength(1);
    expect(harness.calls.closed).toEqual([]);
    for (let waited = 0; !dispatchCancelled && waited < 5000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(dispatchCancelled).toBe(true);
  });

  test("its client's cancel of a queued task ends it at once, not at its deadline", async () => {
    const taskId = nextTaskId();
    const handle = await harness.start('taskWorkflow', taskInput(taskId, { timeoutSeconds: 30 }), {});
    while (harness.calls.reserved.length === 0) await new Promise((resolve) => setTimeout(resolve, 50));
    const started = Date.now();
    await handle.signal(cancelTaskSignal);
    expect(await handle.result()).toMatchObject({ taskId, status: 'cancelled' });
    expect(Date.now() - started).toBeLessThan(3000);
    expect(harness.calls.dispatched).toEqual([]);
  });

  test('a cancelled workflow (its chat client went away) fails the task as client_cancelled', async () => {
    const taskId = nextTaskId();
    const handle = await harness.start('taskWorkflow', taskInput(taskId), {});
    while (harness.calls.reserved.length === 0) await new Promise((resolve) => setTimeout(resolve, 50));
    await handle.cancel();
    await expect(handle.result()).rejects.toBeInstanceOf(WorkflowFailedError);
    expect(harness.calls.finished).toEqual([{ status: 'failed', error: { type: 'client_cancelled', message: 'The client went away before the result.' } }]);
  });

  test('a chat attempt lost with its node is reassigned when the client node says no delta reached the client', async () => {
    const taskId = nextTaskId();
    const stream = { clientNodeId: harness.nodeId, completionId: `chatcmpl-${taskId}` };
    const { result } = await harness.run('chatCompletionWorkflow', taskInput(taskId, { taskType: 'chat_completion', stream }), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: async (input) => {
        if (input.attemptId.endsWith('.a1')) throw ApplicationFailure.nonRetryable('node went away');
        return { ok: true, chunks: 2, status: 'completed' };
      },
      fence: () => 0,
    });
    expect(result.status).toBe('completed');
    expect(harness.calls.fenced).toEqual([`${taskId}.a1`]);
  });

  test('a chat attempt that failed after deltas reached the client fails the completion', async () => {
    const taskId = nextTaskId();
    const stream = { clientNodeId: harness.nodeId, completionId: `chatcmpl-${taskId}` };
    const { result } = await harness.run('chatCompletionWorkflow', taskInput(taskId, { taskType: 'chat_completion', stream }), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
      dispatch: async () => solverReportedFailure({ type: 'upstream_reset', message: 'reset' }, true, 3),
    });
    expect(result).toMatchObject({ status: 'failed', error: { type: 'solver_failed', message: 'The solver failed after streaming began: reset' } });
    expect(harness.calls.fenced).toEqual([]);
  });
});

/** Canaries and verification runs: the task workflow with one attempt and its steps before and after. */
describe('platform tasks in the task workflow', () => {
  jest.setTimeout(60_000);
  let harness: WorkflowHarness;
  let n = 0;
  const nextTaskId = () => `task_pf${Date.now()}${n++}`;

  beforeAll(async () => {
    harness = await WorkflowHarness.start(testEndpoints().temporalAddress, { codePath: testConfig().workflowBundlePath! });
  });
  afterAll(async () => {
    await harness?.close();
  });

  test('a canary is created first and goes to its solver alone; a failed attempt ends it unanswered, with no second one', async () => {
    const taskId = nextTaskId();
    const { result } = await harness.run('taskWorkflow', canaryInput(taskId), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber, input.canaryFor) }),
      dispatch: async () => solverReportedFailure({ type: 'upstream_503', message: 'busy' }, true, 0),
    });
    expect(result).toMatchObject({ taskId, status: 'failed', error: { type: 'solver_failed' } });
    expect(harness.calls.canaries).toEqual([taskId]);
    expect(harness.calls.reserved.map((r) => [r.attemptNumber, r.canaryFor, r.behindClientTasks])).toEqual([[1, 'solver-checked', undefined]]);
    expect(harness.calls.dispatched.map((d) => d.solverId)).toEqual(['solver-checked']);
    expect(harness.calls.unanswered).toEqual([taskId]);
  });

  test('a canary no longer due creates nothing and asks matching nothing: it ends skipped', async () => {
    const taskId = nextTaskId();
    const { result } = await harness.run('taskWorkflow', canaryInput(taskId), { createCanary: () => ({ created: false, reason: 'not_due' }) });
    expect(result).toEqual({ taskId, status: 'skipped', reason: 'not_due' });
    expect(harness.calls.reserved).toEqual([]);
    expect(harness.calls.finished).toEqual([]);
  });

  test('a canary whose solver is offline ends at once, unanswered, not at its deadline', async () => {
    const taskId = nextTaskId();
    const { result } = await harness.run('taskWorkflow', canaryInput(taskId), { reserve: () => ({ assignment: null, untriedOnline: 0, finishedAs: null }) });
    expect(result).toMatchObject({ status: 'failed', error: { message: 'The solver went offline or was quarantined before the canary.' } });
    expect(harness.calls.unanswered).toEqual([taskId]);
  });

  test('a verification run waits behind client tasks, never for the solver it checks, at the cap its step before chose; agreement ends it', async () => {
    const taskId = nextTaskId();
    const { result } = await harness.run('taskWorkflow', verificationInput(taskId), {
      reserve: (input) => ({ assignment: harness.assignment(taskId, input.attemptNumber) }),
    });
    expect(result).toEqual({ taskId, status: 'completed' });
    expect(harness.calls.reserved.map((r) => [r.behindClientTasks, r.excludedSolverIds, r.maxPricePoints])).toEqual([[true, ['solver-checked'], '1']]);
    expect(harness.calls.verification).toEqual([`create-second ${taskId}_client`, `judge-second ${taskId}_client`]);
  });

  test('a verification run with nobody online to take it ends its verification skipped, with the reason', async () => {
    const taskId = nextTaskId();
    await harness.run('taskWorkflow', verificationInput(taskId), { reserve: () => ({ assignment: null, untriedOnline: 0, finishedAs: null }) });
    expect(harness.calls.finished).toEqual([{ status: 'failed', error: { type: 'solver_failed', message: 'No other trusted solver within the price cap is online.' } }]);
    expect(harness.calls.verification).toEqual([`create-second ${taskId}_client`, `end ${taskId}_client`]);
  });

  test('two solvers that disagree start a third run, a task workflow of its own, which is judged as it completes', async () => {
    const taskId = nextTaskId();
    await harness.run('taskWorkflow', verificationInput(taskId), {
      reserve: (input) => ({ assignment: harness.assignment(input.taskId, input.attemptNumber) }),
      verdict: (run) => (run === 'second' ? 'disagreed' : 'upheld'),
    });
    const third = await harness.client.workflow.getHandle(thirdRunWorkflowId(`${taskId}_client`)).result();
    expect(third).toMatchObject({ status: 'completed' });
    expect(harness.calls.verification).toEqual([
      `create-second ${taskId}_client`,
      `judge-second ${taskId}_client`,
      `create-third ${taskId}_client`,
      `judge-third ${taskId}_client`,
    ]);
    expect(harness.calls.reserved[1].excludedSolverIds).toEqual(['solver-checked', 'solver-1']);
  });
});
