import {
  ActivityFailure,
  CancellationScope,
  condition,
  isCancellation,
  log,
  patched,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  TimeoutFailure,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import type { Activities, NodeActivities } from '../activities';
import type { DispatchOutcome } from '../activities/dispatch';
import type { Assignment } from '../src/db/tasks';
import type { CapabilityTaskType } from '../src/schemas/domain';
import {
  adminCompleteSignal,
  nodeTaskQueue,
  TaskStatusAttribute,
  taskStatusQuery,
  type AdminCompletion,
  type TaskWorkflowInput,
  type TaskWorkflowResult,
} from './contract';

// Database bookkeeping is cheap and idempotent: local activities, retried briefly on transient errors.
const db = proxyLocalActivities<Activities>({
  startToCloseTimeout: '10 seconds',
  retry: { initialInterval: '100 milliseconds', backoffCoefficient: 2, maximumInterval: '2 seconds', maximumAttempts: 20 },
});

// Waiting for a solver to free up or come online: short first, then every 2 s.
const FIRST_WAIT_MS = 100;
const MAX_WAIT_MS = 2000;

/**
 * One web task: match a solver, dispatch to the node holding its socket, reassign on error, silence or
 * disconnect, and settle (or release) the points hold exactly once. Admins may complete it by signal.
 */
export async function taskWorkflow(input: TaskWorkflowInput): Promise<TaskWorkflowResult> {
  try {
    return await runTask(input);
  } catch (error) {
    if (!isCancellation(error)) throw error;
    // Cancelled (a chat client went away): the attempt scope is cancelled with us, which tells the
    // solver to stop; the hold is released whatever happens next.
    await CancellationScope.nonCancellable(() =>
      db.finishTaskWithoutResult({ taskId: input.taskId, status: 'failed', error: { type: 'client_cancelled', message: 'The client went away before the result.' } }),
    );
    throw error;
  }
}

/** Chat completions run the same orchestration, restricted to strong-tier solvers, with a delta stream. */
export async function chatCompletionWorkflow(input: TaskWorkflowInput): Promise<TaskWorkflowResult> {
  return taskWorkflow(input);
}

async function runTask(input: TaskWorkflowInput): Promise<TaskWorkflowResult> {
  const deadline = Date.now() + input.timeoutSeconds * 1000;
  let status: string = 'queued';
  let admin: AdminCompletion | undefined;
  setHandler(adminCompleteSignal, (completion) => {
    admin ??= completion;
  });
  setHandler(taskStatusQuery, () => status);
  // Every search-attribute upsert is a visibility write; only the final status is worth one
  // (the task record in PostgreSQL and the `status` query show the transient states).
  const setStatus = (next: string) => {
    status = next;
    if (next === 'completed' || next === 'failed' || next === 'timed_out') upsertSearchAttributes([{ key: TaskStatusAttribute, value: next }]);
  };

  const excluded: string[] = [];
  // Solvers whose attempt was lost with its node rather than failed by them: offered again only when no
  // other solver fits (a node that died drops out of matching once its liveness lapses).
  const lastResort: string[] = [];
  let attemptNumber = 0;
  let waitMs = FIRST_WAIT_MS;
  let lastError: { type: string; message: string } | undefined;

  const end = async (final: 'failed' | 'timed_out', error: { type: string; message: string }): Promise<TaskWorkflowResult> => {
    const outcome = await db.finishTaskWithoutResult({ taskId: input.taskId, status: final, error });
    setStatus(outcome.status);
    return { taskId: input.taskId, status: outcome.status as TaskWorkflowResult['status'], error: outcome.applied ? error : undefined };
  };
  const completeByAdmin = async (completion: AdminCompletion): Promise<TaskWorkflowResult> => {
    const outcome = await db.completeTask({ taskId: input.taskId, completion: { kind: 'admin', solverId: completion.solverId, result: completion.result } });
    setStatus(outcome.status);
    log.info('task completed by an admin', { taskId: input.taskId, solverId: completion.solverId });
    return { taskId: input.taskId, status: outcome.status as TaskWorkflowResult['status'] };
  };

  for (;;) {
    if (admin) return completeByAdmin(admin);
    const remaining = deadline - Date.now();
    if (remaining <= 0) {
      return end('timed_out', {
        type: 'task_timeout',
        message: attemptNumber === 0 ? 'No solver took the task before its deadline.' : 'The task did not finish before its deadline.',
      });
    }
    if (attemptNumber >= input.maxAttempts) {
      return end('failed', { type: 'solver_failed', message: `All ${attemptNumber} attempts failed${lastError ? `; last: ${lastError.message}` : '.'}` });
    }
    // Attempt 1 may have been matched with the task itself; otherwise (and for the sweep's restarts, which
    // find that same reservation again) a local activity matches.
    const matchedWithTask = attemptNumber === 0 && input.firstAssignment !== undefined;
    const reservation =
      matchedWithTask && input.firstAssignment
        ? { assignment: input.firstAssignment }
        : await db.reserveAttempt({
            taskId: input.taskId,
            attemptNumber: attemptNumber + 1,
            taskType: input.taskType,
            maxPricePoints: input.maxPricePoints,
            excludedSolverIds: excluded,
            lastResortSolverIds: lastResort,
            strongModels: input.strongModels,
          });
    if (!reservation.assignment) {
      if (reservation.finishedAs) {
        // Finished meanwhile, e.g. an attempt completed and settled whose report to us was lost with its node.
        setStatus(reservation.finishedAs);
        return { taskId: input.taskId, status: reservation.finishedAs as TaskWorkflowResult['status'] };
      }
      if (attemptNumber > 0 && reservation.untriedOnline === 0) {
        return end('failed', { type: 'solver_failed', message: `No untried solver is online after ${attemptNumber} failed attempt(s)${lastError ? `; last: ${lastError.message}` : '.'}` });
      }
      await condition(() => admin !== undefined, Math.min(waitMs, remaining));
      waitMs = Math.min(waitMs * 2, MAX_WAIT_MS);
      continue;
    }
    attemptNumber += 1;
    waitMs = FIRST_WAIT_MS;
    const assignment = reservation.assignment;
    setStatus('assigned');
    const startedEarly = matchedWithTask && input.firstAttemptStartedEarly === true;
    const outcome = await runAttempt(input, assignment, Math.min(input.attemptTimeoutSeconds * 1000, remaining), () => admin !== undefined, startedEarly);
    if (outcome === 'superseded') continue;
    if (outcome.ok) {
      // The dispatch activity stored the result and settled the task.
      setStatus(outcome.status);
      return { taskId: input.taskId, status: outcome.status as TaskWorkflowResult['status'] };
    }
    await db.closeAttempt({ attemptId: assignment.attemptId, outcome: outcome.outcome, error: outcome.error });
    if (outcome.outcome === 'error' && !outcome.retryable) {
      // The solver says the task itself cannot succeed (e.g. a refused target): no point trying others.
      return end('failed', { type: 'solver_failed', message: outcome.error.message });
    }
    if (input.stream && (await deltasGiven(input.stream, assignment.attemptId, outcome.chunks)) !== 0) {
      // The client already holds part of this solver's answer; another solver cannot continue it.
      return end('failed', { type: 'solver_failed', message: `The solver failed after streaming began: ${outcome.error.message}` });
    }
    log.info('attempt failed; reassigning', { taskId: input.taskId, solverId: assignment.solverId, outcome: outcome.outcome });
    if (outcome.error.type === 'node_unavailable') lastResort.push(assignment.solverId);
    else excluded.push(assignment.solverId);
    lastError = outcome.error;
    setStatus('queued');
  }
}

// Dispatch activities tried for one attempt sent early, before it counts as lost.
const MAX_TAKE_OVERS = 3;

// Workflows started before the client node could be asked keep failing such a stream on replay.
const FENCE_LOST_ATTEMPT_PATCH = 'fence-lost-chat-attempt';

/**
 * How many deltas of a chat the client holds. A failed attempt reports its own count; one lost with its
 * node (or never run) cannot (-1), so the client's node shuts it out and answers: if it gave the client
 * nothing, another solver can still answer from the start. No answer from that node counts as some.
 */
async function deltasGiven(stream: NonNullable<TaskWorkflowInput['stream']>, attemptId: string, reported: number): Promise<number> {
  if (reported >= 0 || !patched(FENCE_LOST_ATTEMPT_PATCH)) return reported;
  const clientNode = proxyActivities<NodeActivities>({
    taskQueue: nodeTaskQueue(stream.clientNodeId),
    scheduleToStartTimeout: '5 seconds',
    startToCloseTimeout: '5 seconds',
    retry: { maximumAttempts: 1 },
  });
  try {
    return (await clientNode.fenceChatAttempt({ completionId: stream.completionId, attemptId })) ?? -1;
  } catch (error) {
    if (isCancellation(error)) throw error;
    return -1;
  }
}

/**
 * Dispatches one attempt to the node holding the solver's socket. An admin completion arriving
 * meanwhile cancels the attempt (the node sends the solver a `cancel` frame).
 */
async function runAttempt(
  input: TaskWorkflowInput,
  assignment: Assignment,
  timeoutMs: number,
  superseded: () => boolean,
  startedEarly: boolean,
): Promise<DispatchOutcome | 'superseded'> {
  const node = proxyActivities<NodeActivities>({
    taskQueue: nodeTaskQueue(assignment.nodeId),
    // A node that died stops polling its queue: give up and reassign. Long enough for a live node
    // under a burst of starts to pick the attempt up.
    scheduleToStartTimeout: '15 seconds',
    startToCloseTimeout: timeoutMs + 2000,
    heartbeatTimeout: '10 seconds',
    // Never re-send an attempt: a failure goes back to the workflow, which picks another solver.
    retry: { maximumAttempts: 1 },
  });
  const scope = new CancellationScope();
  const dispatch = () =>
    scope.run(() =>
      node.dispatchAttempt({
        taskId: input.taskId,
        attemptId: assignment.attemptId,
        solverId: assignment.solverId,
        taskType: input.taskType as CapabilityTaskType,
        deadlineMs: Date.now() + timeoutMs,
        acceptTimeoutMs: input.acceptTimeoutMs,
        stream: input.stream,
        ...(startedEarly ? { startedEarly } : {}),
      }),
    );
  const dispatched = (async (): Promise<DispatchOutcome | 'superseded'> => {
    for (let takeOvers = 1; ; takeOvers++) {
      try {
        return await dispatch();
      } catch (error) {
        if (isCancellation(error)) return 'superseded';
        const timedOut = error instanceof ActivityFailure && error.cause instanceof TimeoutFailure;
        // An attempt sent early runs on its node whatever becomes of its activity: when Temporal loses
        // the activity (temporalio/temporal#11733), another one takes the attempt over. One that finds it
        // already taken over, or gone with its node, reports it lost.
        if (startedEarly && timedOut && takeOvers < MAX_TAKE_OVERS) continue;
        // The node died, or never picked the attempt up: treat like a disconnected solver. An attempt that
        // never started sent nothing, unless it went out early without it; otherwise how many deltas
        // reached the client is unknown here (-1).
        const neverStarted = timedOut && (error.cause as TimeoutFailure).timeoutType === 'SCHEDULE_TO_START';
        return {
          ok: false,
          outcome: 'disconnected',
          error: { type: 'node_unavailable', message: String((error as Error & { cause?: Error })?.cause?.message ?? (error as Error)?.message ?? error) },
          retryable: true,
          chunks: neverStarted && !startedEarly ? 0 : -1,
        };
      }
    }
  })();
  const winner = await Promise.race([dispatched, condition(superseded).then(() => 'superseded' as const)]);
  if (winner === 'superseded') {
    scope.cancel();
    await dispatched;
    return 'superseded';
  }
  return winner;
}
