import { condition, proxyLocalActivities, setHandler, upsertSearchAttributes, workflowInfo } from '@temporalio/workflow';
import type { Activities } from '../activities';
import type { CapabilityTaskType } from '../src/schemas/domain';
import { taskFailure, type Assignment } from '../src/contract/lifecycle';
import { slotHandedSignal, TaskStatusAttribute, type RedundantRunWorkflowInput, type RedundantRunWorkflowResult } from '../src/contract/workflows';
import { dispatchSingleAttempt } from './single-attempt';

const db = proxyLocalActivities<Activities>({
  startToCloseTimeout: '10 seconds',
  retry: { initialInterval: '100 milliseconds', backoffCoefficient: 2, maximumInterval: '2 seconds', maximumAttempts: 20 },
});

/**
 * One redundant run (docs/trust.md): after a client's web task completed, the platform runs it again
 * on another trusted solver (never the one that served it) within what the client was charged, paid from
 * the platform's hold, and compares the two results. The client's task and balance are not touched,
 * and nobody waits for this. It waits in the queue behind every client task (a slot goes to it only
 * when no waiting client task fits it), handed its slot by signal like any task, until its deadline.
 * One attempt: a second solver that fails leaves the run unanswered.
 */
export async function redundantRunWorkflow(input: RedundantRunWorkflowInput): Promise<RedundantRunWorkflowResult> {
  const finish = (result: RedundantRunWorkflowResult): RedundantRunWorkflowResult => {
    upsertSearchAttributes([{ key: TaskStatusAttribute, value: result.status }]);
    return result;
  };
  let handed: Assignment | undefined;
  setHandler(slotHandedSignal, ({ attemptNumber, assignment }) => {
    if (attemptNumber === 1 && handed === undefined) handed = assignment;
  });
  const created = await db.createRedundantRunTask({ clientTaskId: input.clientTaskId, runTaskId: input.runTaskId, workflowId: workflowInfo().workflowId });
  if (!created.created) return finish({ clientTaskId: input.clientTaskId, status: 'skipped', reason: created.reason });
  const taskId = created.runTaskId;
  const deadline = Date.now() + input.timeoutSeconds * 1000;
  const end = async (status: 'unanswered' | 'skipped', message: string): Promise<RedundantRunWorkflowResult> => {
    await db.finishTaskWithoutResult({ taskId, ...taskFailure('solver_failed', message) });
    await db.endRedundantRun({ clientTaskId: input.clientTaskId, status, reason: message });
    return finish({ clientTaskId: input.clientTaskId, status, reason: message });
  };
  const reservation = await db.reserveAttempt({
    taskId,
    attemptNumber: 1,
    taskType: input.taskType,
    maxPricePoints: created.maxPricePoints,
    excludedSolverIds: [created.firstSolverId],
    behindClientTasks: true,
  });
  let assignment: Assignment;
  if (reservation.assignment) assignment = reservation.assignment;
  else {
    if (reservation.finishedAs) return end('unanswered', `The run's task ended ${reservation.finishedAs}.`);
    if (reservation.untriedOnline === 0) return end('skipped', 'No other trusted solver within the price cap is online.');
    // Queued behind every client task: whoever frees or adds a slot that no waiting client task fits
    // hands it over; only the deadline bounds the wait.
    const remaining = deadline - Date.now();
    if (handed === undefined && (remaining <= 0 || !(await condition(() => handed !== undefined, remaining)))) {
      return end('unanswered', 'No slot of another solver was free before the deadline.');
    }
    assignment = handed!;
  }
  const report = await dispatchSingleAttempt({ ...input, taskId, taskType: input.taskType as CapabilityTaskType }, assignment, deadline);
  if (!report.ok) {
    await db.closeAttempt({ attemptId: assignment.attemptId, outcome: report.outcome, error: report.error });
    return end('unanswered', `The second solver's attempt failed: ${report.error.message}`);
  }
  // The dispatch activity stored the second result and settled it from the platform's hold.
  const status = await db.judgeRedundantRun({ clientTaskId: input.clientTaskId });
  return finish({ clientTaskId: input.clientTaskId, status: status === 'pending' ? 'unanswered' : status });
}
