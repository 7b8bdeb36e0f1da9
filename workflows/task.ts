import {
  ActivityCancellationType,
  ActivityFailure,
  CancellationScope,
  condition,
  isCancellation,
  log,
  patched,
  proxyActivities,
  setHandler,
  TimeoutFailure,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import type { NodeActivities } from '../activities';
import type { CapabilityTaskType } from '../src/schemas/domain';
import {
  attemptFailed,
  isPlatformFault,
  isTerminalState,
  solverAfter,
  taskFailure,
  UNKNOWN_CHUNKS,
  type Assignment,
  solverErrorTypeOf,
  type AttemptFailed,
  type AttemptReport,
  type TaskErrorType,
  type TaskState,
} from '../src/contract/lifecycle';
import {
  adminCompleteSignal,
  attemptNodeLostSignal,
  cancelTaskSignal,
  nodeTaskQueue,
  slotHandedSignal,
  TaskStatusAttribute,
  taskStatusQuery,
  type AdminCompletion,
  type PlatformMatch,
  type SkippedTaskResult,
  type SlotHanded,
  type TaskWorkflowInput,
  type TaskWorkflowResult,
} from '../src/contract/workflows';
import { db } from './bookkeeping';
import { afterNoResult, afterResult, beforeAttempt, noneOnline } from './platform';

// Workflows started before the queue polled for a slot, short first, then every 2 s; they keep doing so
// on replay. Since, a waiting task is handed its slot by signal (docs/queue.md) and waits for nothing else.
const SLOT_BY_SIGNAL_PATCH = 'slot-handed-by-signal';
const FIRST_WAIT_MS = 100;
const MAX_WAIT_MS = 2000;

// Workflows started before a claim that the target failed got a second solver's opinion end the task
// at once on replay.
const SECOND_OPINION_PATCH = 'target-failure-second-opinion';

// Workflows started before an attempt lost to a platform fault was nobody's failure count it toward the
// attempt limit on replay, and end when no solver is online after it.
const PLATFORM_FAULT_PATCH = 'platform-fault-not-counted';
// Attempts of one task lost to platform faults that are not counted (docs/decisions.md, "Platform
// faults"): a platform that keeps failing cannot retry a task for ever; beyond this they count toward
// the attempt limit (still not against their solvers). A crash of the whole stack loses one per task.
const MAX_UNCOUNTED_PLATFORM_FAULTS = 5;

/**
 * One web task: match a solver, dispatch to the node holding its socket, reassign on error, silence or
 * disconnect, and settle (or release) the points hold exactly once. Admins may complete it by signal,
 * and its client may cancel it by signal. A platform task (`platform`: a canary or a verification run)
 * runs the same way with one attempt, created and matched as its step before the attempt says, and
 * judged by its step after (workflows/platform.ts).
 */
export async function taskWorkflow(input: TaskWorkflowInput): Promise<TaskWorkflowResult | SkippedTaskResult> {
  const running: RunningAttempt = {};
  try {
    return await runTask(input, running);
  } catch (error) {
    if (!isCancellation(error)) throw error;
    // Cancelled (a chat client went away): the attempt scope is cancelled with us, which tells the
    // solver to stop. A chat's attempt is waited for: it keeps what it delivered, which the ending bills
    // (docs/queue.md, "What a chat pays"); with nothing delivered the hold is released.
    await CancellationScope.nonCancellable(async () => {
      await running.ended;
      await db.finishTaskWithoutResult({
        taskId: input.taskId,
        ...taskFailure('client_cancelled', 'The client went away before the result.'),
      });
      if (input.platform) await afterNoResult(input.taskId, input.platform, { reason: 'The workflow was cancelled.' });
    });
    throw error;
  }
}

/** Chat completions run the same orchestration, restricted to strong-tier solvers, with a delta stream. */
export async function chatCompletionWorkflow(
  input: TaskWorkflowInput,
): Promise<TaskWorkflowResult | SkippedTaskResult> {
  return taskWorkflow(input);
}

/** A chat attempt's dispatch, while it runs: a cancelled workflow waits for it to end before it ends the task. */
interface RunningAttempt {
  ended?: Promise<unknown>;
}

// Workflows started before a stopped chat attempt was billed for what it delivered end the task without
// waiting for the attempt on replay.
const BILL_DELIVERED_PATCH = 'bill-delivered-on-cancel';

async function runTask(
  input: TaskWorkflowInput,
  running: RunningAttempt,
): Promise<TaskWorkflowResult | SkippedTaskResult> {
  // A platform task is created by its workflow, only while it is still due: a late start creates nothing.
  let match: PlatformMatch = {};
  if (input.platform) {
    const prepared = await beforeAttempt(input, input.platform);
    if (!prepared.created) {
      upsertSearchAttributes([{ key: TaskStatusAttribute, value: 'skipped' }]);
      return { taskId: input.taskId, status: 'skipped', reason: prepared.reason };
    }
    match = prepared.match;
  }
  const deadline = Date.now() + input.timeoutSeconds * 1000;
  let status: TaskState = 'queued';
  let admin: AdminCompletion | undefined;
  setHandler(adminCompleteSignal, (completion) => {
    // A platform task's result is its solver's to give: an admin's would be judged as the solver's.
    if (!input.platform) admin ??= completion;
  });
  // Without this signal every predicate below reads as before, so histories without it replay unchanged.
  let cancelled = false;
  setHandler(cancelTaskSignal, () => {
    cancelled = true;
  });
  const interrupted = () => admin !== undefined || cancelled;
  setHandler(taskStatusQuery, () => status);
  // Slots handed while the task waited, by attempt number (a repeated signal changes nothing).
  const handed = new Map<number, SlotHanded>();
  setHandler(slotHandedSignal, (slot) => {
    if (!handed.has(slot.attemptNumber)) handed.set(slot.attemptNumber, slot);
  });
  // Attempts whose node is gone, as a worker saw its sessions end (src/tasks/node-watch.ts). Without this
  // signal the attempt's race below reads as before, so histories without it replay unchanged.
  const nodeLost = new Set<string>();
  setHandler(attemptNodeLostSignal, (lost) => {
    nodeLost.add(lost.attemptId);
  });
  // Every search-attribute upsert is a visibility write; only the final status is worth one
  // (the task record in PostgreSQL and the `status` query show the transient states).
  const setStatus = (next: TaskState) => {
    status = next;
    if (isTerminalState(next)) upsertSearchAttributes([{ key: TaskStatusAttribute, value: next }]);
  };

  const excluded: string[] = [];
  // Solvers whose attempt was lost with its node rather than failed by them: offered again only when no
  // other solver fits (a node that died drops out of matching once its liveness lapses).
  const lastResort: string[] = [];
  let attemptNumber = 0;
  // Attempts lost to a platform fault (its node died or shut down, its activity failed): not counted
  // toward the attempt limit, and no reason to give up while a solver may yet come back.
  let platformFaults = 0;
  const failedAttempts = () => attemptNumber - platformFaults;
  let waitMs = FIRST_WAIT_MS;
  let lastFailure: AttemptFailed | undefined;
  // A claim that the target failed, held against its solver, gets one other solver's opinion, from a slot free now.
  let secondOpinion: 'none' | 'asking' | 'asked' = 'none';

  const end = async (
    type: TaskErrorType,
    message: string,
    solverErrorType?: string,
    skipped = false,
  ): Promise<TaskWorkflowResult> => {
    const failure = taskFailure(type, message, solverErrorType);
    const outcome = await db.finishTaskWithoutResult({ taskId: input.taskId, ...failure });
    if (input.platform) await afterNoResult(input.taskId, input.platform, { reason: message, skipped });
    setStatus(outcome.status);
    return { taskId: input.taskId, status: outcome.status, error: outcome.applied ? failure.error : undefined };
  };
  const completeByAdmin = async (completion: AdminCompletion): Promise<TaskWorkflowResult> => {
    const outcome = await db.completeTask({
      taskId: input.taskId,
      taskType: input.taskType,
      completion: { kind: 'admin', solverId: completion.solverId, result: completion.result },
    });
    setStatus(outcome.status);
    log.info('task completed by an admin', { taskId: input.taskId, solverId: completion.solverId });
    return { taskId: input.taskId, status: outcome.status };
  };

  for (;;) {
    if (admin) return completeByAdmin(admin);
    if (cancelled) return end('task_cancelled', 'Cancelled by its client.');
    const remaining = deadline - Date.now();
    if (remaining <= 0) {
      return end(
        'task_timeout',
        attemptNumber === 0
          ? 'No solver took the task before its deadline.'
          : 'The task did not finish before its deadline.',
      );
    }
    if (failedAttempts() >= input.maxAttempts) {
      return end(
        'solver_failed',
        `All ${failedAttempts()} attempts failed${lastFailure ? `; last: ${lastFailure.error.message}` : '.'}`,
        lastFailure && solverErrorTypeOf(lastFailure),
      );
    }
    // Attempt 1 may have been matched with the task itself; otherwise (and for the sweep's restarts, which
    // find that same reservation again) a local activity matches.
    const matchedWithTask = attemptNumber === 0 && input.firstAssignment !== undefined;
    // Workflows that polled (no marker) had any such signal ignored, and keep asking matching on replay.
    const handedSlot =
      handed.has(attemptNumber + 1) && patched(SLOT_BY_SIGNAL_PATCH) ? handed.get(attemptNumber + 1) : undefined;
    const reservation =
      matchedWithTask && input.firstAssignment
        ? { assignment: input.firstAssignment }
        : handedSlot
          ? { assignment: handedSlot.assignment }
          : await db.reserveAttempt({
              taskId: input.taskId,
              attemptNumber: attemptNumber + 1,
              taskType: input.taskType,
              maxPricePoints: match.maxPricePoints ?? input.maxPricePoints,
              excludedSolverIds: match.excludedSolverIds ? [...match.excludedSolverIds, ...excluded] : excluded,
              lastResortSolverIds: lastResort,
              strongModels: match.strongModels ?? input.strongModels,
              ...(input.platform
                ? {
                    canaryFor: match.canaryFor,
                    verifiersOnly: match.verifiersOnly,
                    behindClientTasks: match.behindClientTasks,
                  }
                : {}),
            });
    if (!reservation.assignment) {
      if (reservation.finishedAs) {
        // Finished meanwhile, e.g. an attempt completed and settled whose report to us was lost with its node.
        if (input.platform && reservation.finishedAs === 'completed') await afterResult(input, input.platform);
        else if (input.platform)
          await afterNoResult(input.taskId, input.platform, { reason: `The task ended ${reservation.finishedAs}.` });
        setStatus(reservation.finishedAs);
        return { taskId: input.taskId, status: reservation.finishedAs };
      }
      // No other solver free now to give its opinion: the target's failure ends the task, as it said.
      if (secondOpinion === 'asking')
        return end('solver_failed', lastFailure!.error.message, solverErrorTypeOf(lastFailure!));
      // A platform task is for solvers online now: with none, it ends at once.
      if (input.platform && reservation.untriedOnline === 0)
        return end('solver_failed', noneOnline(input.platform, match), undefined, true);
      // After attempts lost to platform faults only, it waits like a new task: their solvers come back
      // (reconnect to a live node) and are handed the task as their slots free.
      if (failedAttempts() > 0 && reservation.untriedOnline === 0) {
        return end(
          'solver_failed',
          `No untried solver is online after ${failedAttempts()} failed attempt(s)${lastFailure ? `; last: ${lastFailure.error.message}` : '.'}`,
          lastFailure && solverErrorTypeOf(lastFailure),
        );
      }
      if (patched(SLOT_BY_SIGNAL_PATCH)) {
        // Queued: whoever frees a slot it fits hands it over by signal; only its deadline bounds the wait.
        await condition(() => interrupted() || handed.has(attemptNumber + 1), remaining);
      } else {
        await condition(interrupted, Math.min(waitMs, remaining));
        waitMs = Math.min(waitMs * 2, MAX_WAIT_MS);
      }
      continue;
    }
    attemptNumber += 1;
    waitMs = FIRST_WAIT_MS;
    if (secondOpinion === 'asking') secondOpinion = 'asked';
    const assignment = reservation.assignment;
    setStatus('assigned');
    // Sent to its solver before this workflow asked: with the task (a chat's first attempt), or by the
    // node that handed the slot; the dispatch activity takes the running attempt over.
    const startedEarly = matchedWithTask ? input.firstAttemptStartedEarly === true : handedSlot?.startedEarly === true;
    const outcome =
      matchedWithTask && input.firstAttemptReport
        ? input.firstAttemptReport
        : await runAttempt(
            input,
            assignment,
            Math.min(input.attemptTimeoutSeconds * 1000, remaining),
            interrupted,
            startedEarly,
            running,
            () => nodeLost.has(assignment.attemptId),
          );
    if (outcome === 'superseded') continue;
    if (outcome.ok) {
      // The dispatch activity stored the result and settled the task.
      if (input.platform) await afterResult(input, input.platform);
      setStatus(outcome.status);
      return { taskId: input.taskId, status: outcome.status };
    }
    const closing: unknown = await db.closeAttempt({
      attemptId: assignment.attemptId,
      outcome: outcome.outcome,
      error: outcome.error,
    });
    if (outcome.outcome === 'error' && !outcome.retryable) {
      // The solver says the task itself cannot succeed (e.g. a refused target): no point trying others,
      // unless it says the target failed and nothing corroborated it (docs/trust.md, "Target failures"):
      // then another solver free now either corroborates it or answers the task.
      const uncorroborated = (closing as { targetVerdict?: string } | null)?.targetVerdict === 'solver';
      // A platform task has one attempt: no other solver's opinion is asked.
      if (secondOpinion !== 'none' || !uncorroborated || input.platform || !patched(SECOND_OPINION_PATCH)) {
        return end('solver_failed', outcome.error.message, solverErrorTypeOf(outcome));
      }
      secondOpinion = 'asking';
    }
    if (input.stream && (await deltasGiven(input.stream, assignment.attemptId, outcome.chunks)) !== 0) {
      // The client already holds part of this solver's answer; another solver cannot continue it.
      return end(
        'solver_failed',
        `The solver failed after streaming began: ${outcome.error.message}`,
        solverErrorTypeOf(outcome),
      );
    }
    // A client task's attempt lost to a platform fault is nobody's: it leaves the attempt limit as it was.
    if (
      isPlatformFault(outcome) &&
      !input.platform &&
      platformFaults < MAX_UNCOUNTED_PLATFORM_FAULTS &&
      patched(PLATFORM_FAULT_PATCH)
    )
      platformFaults += 1;
    log.info('attempt failed; reassigning', {
      taskId: input.taskId,
      solverId: assignment.solverId,
      outcome: outcome.outcome,
    });
    if (solverAfter(outcome) === 'last_resort') lastResort.push(assignment.solverId);
    else excluded.push(assignment.solverId);
    lastFailure = outcome;
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
async function deltasGiven(
  stream: NonNullable<TaskWorkflowInput['stream']>,
  attemptId: string,
  reported: number,
): Promise<number> {
  if (reported !== UNKNOWN_CHUNKS || !patched(FENCE_LOST_ATTEMPT_PATCH)) return reported;
  const clientNode = proxyActivities<NodeActivities>({
    taskQueue: nodeTaskQueue(stream.clientNodeId),
    scheduleToStartTimeout: '5 seconds',
    startToCloseTimeout: '5 seconds',
    retry: { maximumAttempts: 1 },
  });
  try {
    return (await clientNode.fenceChatAttempt({ completionId: stream.completionId, attemptId })) ?? UNKNOWN_CHUNKS;
  } catch (error) {
    if (isCancellation(error)) throw error;
    return UNKNOWN_CHUNKS;
  }
}

/**
 * Dispatches one attempt to the node holding the solver's socket. An admin completion or a cancel
 * arriving meanwhile cancels the attempt (the node sends the solver a `cancel` frame).
 */
async function runAttempt(
  input: TaskWorkflowInput,
  assignment: Assignment,
  timeoutMs: number,
  superseded: () => boolean,
  startedEarly: boolean,
  running: RunningAttempt,
  nodeLost: () => boolean,
): Promise<AttemptReport | 'superseded'> {
  // A chat's attempt, cancelled, is waited for until it has stopped and kept what it delivered.
  const waitsForEnd = input.stream !== undefined && patched(BILL_DELIVERED_PATCH);
  const node = proxyActivities<NodeActivities>({
    ...(waitsForEnd ? { cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED } : {}),
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
  const dispatched = (async (): Promise<AttemptReport | 'superseded'> => {
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
        // The node died, never picked the attempt up, or failed to run it: a platform fault, which the
        // solver cannot cause (its own failures come back as reports). An attempt that never started sent
        // nothing, unless it went out early without it; otherwise how many deltas reached the client is
        // unknown here (-1).
        const neverStarted = timedOut && (error.cause as TimeoutFailure).timeoutType === 'SCHEDULE_TO_START';
        const message = String(
          (error as Error & { cause?: Error })?.cause?.message ?? (error as Error)?.message ?? error,
        );
        return attemptFailed('node_unavailable', message, neverStarted && !startedEarly ? 0 : UNKNOWN_CHUNKS);
      }
    }
  })();
  if (waitsForEnd) running.ended = dispatched;
  const winner = await Promise.race([
    dispatched,
    condition(superseded).then(() => 'superseded' as const),
    condition(nodeLost).then(() => 'node lost' as const),
  ]);
  if (winner === 'superseded') {
    scope.cancel();
    await dispatched;
    return 'superseded';
  }
  if (winner === 'node lost') {
    // Nothing answers the cancel on a node that is gone: the activity ends by its own timeouts, unwaited.
    // How many deltas reached the client is unknown here; a chat asks the client's node.
    scope.cancel();
    return attemptFailed(
      'node_unavailable',
      `The node ${assignment.nodeId} holding the solver's socket is gone.`,
      UNKNOWN_CHUNKS,
    );
  }
  return winner;
}
