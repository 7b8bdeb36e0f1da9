import { condition, setHandler, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import type { CanaryTaskType } from '../src/contract/canaries';
import { taskFailure, type Assignment } from '../src/contract/lifecycle';
import {
  slotHandedSignal,
  TaskStatusAttribute,
  type CanaryWorkflowInput,
  type CanaryWorkflowResult,
} from '../src/contract/workflows';
import { db } from './bookkeeping';
import { dispatchSingleAttempt } from './single-attempt';

/**
 * Canaries started before they ran as the task workflow (workflows/platform.ts) finish here.
 * One canary (docs/trust.md): creates the platform's task for the canary page, takes a free slot of its
 * one solver or waits in the queue until that solver's next free slot is handed to it (by signal, the
 * canary first), and dispatches it like any attempt. The dispatch activity stores the result, and the
 * transaction that settles it (paid by the platform account) judges it. One attempt: a canary that
 * fails otherwise (error, timeout) counts as an ordinary failed attempt and is marked unanswered.
 */
export async function canaryWorkflow(input: CanaryWorkflowInput): Promise<CanaryWorkflowResult> {
  let handed: Assignment | undefined;
  setHandler(slotHandedSignal, ({ attemptNumber, assignment }) => {
    if (attemptNumber === 1 && handed === undefined) handed = assignment;
  });
  const created = await db.createCanary({
    taskId: input.taskId,
    solverId: input.solverId,
    taskType: input.taskType as CanaryTaskType,
    sent: input.sent,
    workflowId: workflowInfo().workflowId,
    timeoutSeconds: input.timeoutSeconds,
  });
  if (!created.created) {
    upsertSearchAttributes([{ key: TaskStatusAttribute, value: 'skipped' }]);
    return { taskId: input.taskId, status: 'skipped', reason: created.reason };
  }
  const deadline = Date.now() + input.timeoutSeconds * 1000;
  const end = async (message: string): Promise<CanaryWorkflowResult> => {
    const outcome = await db.finishTaskWithoutResult({
      taskId: input.taskId,
      ...taskFailure('solver_failed', message),
    });
    await db.markCanaryUnanswered({ taskId: input.taskId });
    upsertSearchAttributes([{ key: TaskStatusAttribute, value: outcome.status }]);
    return { taskId: input.taskId, status: outcome.status };
  };
  const reservation = await db.reserveAttempt({
    taskId: input.taskId,
    attemptNumber: 1,
    taskType: input.taskType,
    maxPricePoints: input.maxPricePoints,
    // A chat audit: queued with the allowlist too, so that only the solver's strong capability takes it.
    strongModels: input.strongModels,
    excludedSolverIds: [],
    canaryFor: input.solverId,
  });
  let assignment: Assignment;
  if (reservation.assignment) assignment = reservation.assignment;
  else {
    if (reservation.finishedAs) return { taskId: input.taskId, status: reservation.finishedAs };
    if (reservation.untriedOnline === 0) return end('The solver went offline or was quarantined before the canary.');
    // Queued for its solver: whoever frees or adds one of its slots hands it over; only the deadline bounds the wait.
    const remaining = deadline - Date.now();
    if (handed === undefined && (remaining <= 0 || !(await condition(() => handed !== undefined, remaining)))) {
      return end('No slot of the solver was free before the canary deadline.');
    }
    assignment = handed!;
  }
  const report = await dispatchSingleAttempt(
    { ...input, taskType: input.taskType as CanaryTaskType },
    assignment,
    deadline,
  );
  if (report.ok) {
    upsertSearchAttributes([{ key: TaskStatusAttribute, value: report.status }]);
    return { taskId: input.taskId, status: report.status };
  }
  await db.closeAttempt({ attemptId: assignment.attemptId, outcome: report.outcome, error: report.error });
  return end(`The canary's attempt failed: ${report.error.message}`);
}
