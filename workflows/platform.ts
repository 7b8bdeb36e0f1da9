import { ParentClosePolicy, startChild, uuid4, workflowInfo } from '@temporalio/workflow';
import type { CanaryTaskType } from '../src/contract/canaries';
import {
  AccountIdAttribute,
  redundantSearchTaskType,
  TaskStatusAttribute,
  TaskTypeAttribute,
  thirdRunWorkflowId,
  verificationSummary,
  type PlatformMatch,
  type PlatformTask,
  type PlatformTaskPrepared,
  type TaskWorkflowInput,
} from '../src/contract/workflows';
import { PLATFORM_ACCOUNT_ID } from '../src/contract/ledger';
import { db } from './bookkeeping';

/**
 * The steps of a platform task (docs/trust.md) around its one attempt in the task workflow. Before: its
 * task is created with what it is checked against (a canary's page, prompt or query; a verification
 * run's copy of the client's task), only while it is still due, and whom it may go to is decided.
 * After: its verdict. A canary's result is judged in the transaction that stores it and settles the
 * task; a verification run's is compared with the client's once it is stored.
 */

/** Creates the platform task, and says whom its attempt may go to; or why there is none. */
export async function beforeAttempt(input: TaskWorkflowInput, platform: PlatformTask): Promise<PlatformTaskPrepared> {
  const workflowId = workflowInfo().workflowId;
  if (platform.purpose === 'canary') {
    const created = await db.createCanary({
      taskId: input.taskId,
      solverId: platform.solverId,
      taskType: input.taskType as CanaryTaskType,
      sent: platform.sent,
      workflowId,
      timeoutSeconds: input.timeoutSeconds,
      pricePoints: input.maxPricePoints,
    });
    if (!created.created) return { created: false, reason: created.reason };
    return { created: true, match: { canaryFor: platform.solverId } };
  }
  const run = { clientTaskId: platform.clientTaskId, runTaskId: input.taskId, workflowId };
  const created = platform.run === 'second' ? await db.createRedundantRunTask(run) : await db.createThirdRunTask(run);
  if (!created.created) return { created: false, reason: created.reason };
  // Queued behind every client task: it takes only a slot that no waiting client task fits.
  return {
    created: true,
    match: {
      excludedSolverIds: created.excludedSolverIds ?? [created.firstSolverId],
      verifiersOnly: created.byVerifier,
      behindClientTasks: true,
      maxPricePoints: created.maxPricePoints,
      ...(created.strongModels ? { strongModels: created.strongModels } : {}),
    },
  };
}

/** Why a platform task ended at once: no solver it may go to is online. */
export function noneOnline(platform: PlatformTask, match: PlatformMatch): string {
  if (platform.purpose === 'canary') return 'The solver went offline or was quarantined before the canary.';
  return `No other trusted ${match.verifiersOnly ? 'verifier' : 'solver'} within the price cap is online.`;
}

/**
 * The platform task ended without a result (`skipped`: no solver it may go to was online). A canary is
 * marked unanswered (no verdict on its solver's honesty); a second run ends its verification without a
 * verdict, and a third concludes the dispute with none.
 */
export async function afterNoResult(
  taskId: string,
  platform: PlatformTask,
  why: { reason: string; skipped?: boolean },
): Promise<void> {
  if (platform.purpose === 'canary') await db.markCanaryUnanswered({ taskId });
  else if (platform.run === 'second')
    await db.endRedundantRun({
      clientTaskId: platform.clientTaskId,
      status: why.skipped ? 'skipped' : 'unanswered',
      reason: why.reason,
    });
  else await db.concludeDispute({ clientTaskId: platform.clientTaskId, reason: why.reason });
}

/**
 * The platform task completed (its result stored and settled). A verification run's result is compared
 * with the client's; when two solvers that are not verifiers disagree, a third run breaks the tie, and a
 * verifier's disagreement, or a chat's first check, gets the verifier's second: a task workflow of its
 * own, left running when this one ends.
 */
export async function afterResult(input: TaskWorkflowInput, platform: PlatformTask): Promise<void> {
  if (platform.purpose === 'canary') return;
  if (platform.run === 'third') {
    await db.judgeThirdRun({ clientTaskId: platform.clientTaskId });
    return;
  }
  // A disagreement, or a chat's first check compared: a third run decides.
  const judged = await db.judgeRedundantRun({ clientTaskId: platform.clientTaskId });
  if (judged !== 'disagreed' && judged !== 'compared') return;
  const third: TaskWorkflowInput = {
    ...input,
    taskId: `task_${uuid4().replace(/-/g, '').slice(0, 24)}`,
    platform: { purpose: 'verification', clientTaskId: platform.clientTaskId, run: 'third' },
  };
  await startChild('taskWorkflow', {
    workflowId: thirdRunWorkflowId(platform.clientTaskId),
    args: [third],
    parentClosePolicy: ParentClosePolicy.ABANDON,
    staticSummary: verificationSummary(input.taskType, platform.clientTaskId, 'third'),
    typedSearchAttributes: [
      { key: TaskTypeAttribute, value: redundantSearchTaskType(input.taskType) },
      { key: AccountIdAttribute, value: PLATFORM_ACCOUNT_ID },
      { key: TaskStatusAttribute, value: 'queued' },
    ],
  });
}
