import { condition, patched, setHandler, upsertSearchAttributes, uuid4, workflowInfo } from '@temporalio/workflow';
import type { CapabilityTaskType } from '../src/schemas/domain';
import { taskFailure, type Assignment } from '../src/contract/lifecycle';
import {
  slotHandedSignal,
  TaskStatusAttribute,
  type RedundantRunWorkflowInput,
  type RedundantRunWorkflowResult,
} from '../src/contract/workflows';
import { db } from './bookkeeping';
import { dispatchSingleAttempt } from './single-attempt';

/** Workflows started before a disagreement could send a third run end at the disagreement. */
const THIRD_RUN_PATCH = 'third-run';

/** The task an attempt id belongs to (attempt ids are `<task id>.a<n>`). */
const taskOfAttempt = (attemptId: string) => attemptId.replace(/\.a\d+$/, '');

/**
 * Verification runs started before they ran as the task workflow (workflows/platform.ts) finish here.
 * One verification of a client task (docs/trust.md, "Verified client tasks"): after a client's web task
 * completed, the platform runs it again on a verifier, or else on another trusted solver within what
 * the client was charged (never the one that served it), paid from the platform's hold, and compares
 * the two results. When two solvers that are not verifiers disagree, a third run (any solver but the
 * two) breaks the tie. The client's task and balance are not touched but by a refund, and nobody waits
 * for this. Each run waits in the queue behind every client task (a slot goes to it only when no waiting
 * client task fits it), handed its slot by signal like any task, until its deadline. One attempt each:
 * a run that fails ends the verification without a verdict.
 */
export async function redundantRunWorkflow(input: RedundantRunWorkflowInput): Promise<RedundantRunWorkflowResult> {
  const finish = (result: RedundantRunWorkflowResult): RedundantRunWorkflowResult => {
    upsertSearchAttributes([{ key: TaskStatusAttribute, value: result.status }]);
    return result;
  };
  // Slots handed to this workflow's runs, by run task (the second run's, then the third's).
  const handed = new Map<string, Assignment>();
  setHandler(slotHandedSignal, ({ attemptNumber, assignment }) => {
    const taskId = taskOfAttempt(assignment.attemptId);
    if (attemptNumber === 1 && !handed.has(taskId)) handed.set(taskId, assignment);
  });

  /**
   * Runs one platform task once on a slot of a solver not excluded (a verifier, `verifiersOnly`): true when it
   * completed, or why not.
   */
  const runOnce = async (run: {
    taskId: string;
    maxPricePoints: string;
    excludedSolverIds: string[];
    verifiersOnly?: boolean;
  }): Promise<{ ok: true } | { ok: false; status: 'unanswered' | 'skipped'; message: string }> => {
    const deadline = Date.now() + input.timeoutSeconds * 1000;
    const fail = async (status: 'unanswered' | 'skipped', message: string) => {
      await db.finishTaskWithoutResult({ taskId: run.taskId, ...taskFailure('solver_failed', message) });
      return { ok: false as const, status, message };
    };
    const reservation = await db.reserveAttempt({
      taskId: run.taskId,
      attemptNumber: 1,
      taskType: input.taskType,
      maxPricePoints: run.maxPricePoints,
      excludedSolverIds: run.excludedSolverIds,
      verifiersOnly: run.verifiersOnly,
      behindClientTasks: true,
    });
    let assignment: Assignment;
    if (reservation.assignment) assignment = reservation.assignment;
    else {
      if (reservation.finishedAs) return fail('unanswered', `The run's task ended ${reservation.finishedAs}.`);
      if (reservation.untriedOnline === 0)
        return fail(
          'skipped',
          `No other trusted ${run.verifiersOnly ? 'verifier' : 'solver'} within the price cap is ` + `online.`,
        );
      // Queued behind every client task: whoever frees or adds a slot that no waiting client task fits
      // hands it over; only the deadline bounds the wait.
      const remaining = deadline - Date.now();
      if (!handed.has(run.taskId) && (remaining <= 0 || !(await condition(() => handed.has(run.taskId), remaining)))) {
        return fail('unanswered', 'No slot of another solver was free before the deadline.');
      }
      assignment = handed.get(run.taskId)!;
    }
    const report = await dispatchSingleAttempt(
      { ...input, taskId: run.taskId, taskType: input.taskType as CapabilityTaskType },
      assignment,
      deadline,
    );
    if (report.ok) return { ok: true };
    await db.closeAttempt({ attemptId: assignment.attemptId, outcome: report.outcome, error: report.error });
    return fail('unanswered', `The attempt failed: ${report.error.message}`);
  };

  const workflowId = workflowInfo().workflowId;
  const created = await db.createRedundantRunTask({
    clientTaskId: input.clientTaskId,
    runTaskId: input.runTaskId,
    workflowId,
  });
  if (!created.created) return finish({ clientTaskId: input.clientTaskId, status: 'skipped', reason: created.reason });
  const second = await runOnce({
    taskId: created.runTaskId,
    maxPricePoints: created.maxPricePoints,
    excludedSolverIds: created.excludedSolverIds ?? [created.firstSolverId],
    verifiersOnly: created.byVerifier,
  });
  if (!second.ok) {
    await db.endRedundantRun({ clientTaskId: input.clientTaskId, status: second.status, reason: second.message });
    return finish({ clientTaskId: input.clientTaskId, status: second.status, reason: second.message });
  }
  // The dispatch activity stored the second result and settled it from the platform's hold.
  const status = await db.judgeRedundantRun({ clientTaskId: input.clientTaskId });
  if (status !== 'disagreed' || !patched(THIRD_RUN_PATCH))
    return finish({ clientTaskId: input.clientTaskId, status: status === 'pending' ? 'unanswered' : status });

  // Two solvers that are not verifiers disagreed: a third breaks the tie.
  const third = await db.createThirdRunTask({
    clientTaskId: input.clientTaskId,
    runTaskId: `task_${uuid4().replace(/-/g, '').slice(0, 24)}`,
    workflowId,
  });
  if (!third.created) return finish({ clientTaskId: input.clientTaskId, status: 'disagreed', reason: third.reason });
  const tieBreak = await runOnce({
    taskId: third.runTaskId,
    maxPricePoints: third.maxPricePoints,
    excludedSolverIds: third.excludedSolverIds ?? [],
  });
  if (!tieBreak.ok) {
    await db.concludeDispute({ clientTaskId: input.clientTaskId, reason: tieBreak.message });
    return finish({ clientTaskId: input.clientTaskId, status: 'disagreed', reason: tieBreak.message });
  }
  const verdict = await db.judgeThirdRun({ clientTaskId: input.clientTaskId });
  return finish({ clientTaskId: input.clientTaskId, status: verdict === 'pending' ? 'disagreed' : verdict });
}
