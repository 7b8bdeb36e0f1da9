import { workflowInfo } from '@temporalio/workflow';
import type { CanaryTaskType } from '../src/trust/canaries';
import type { PlatformTask, PlatformTaskPrepared } from '../src/contract/workflows';
import { db } from './bookkeeping';

/**
 * The steps of a platform task (docs/trust.md) around its one attempt in the task workflow: before, its
 * task is created with what it is checked against (a canary's page, prompt or query), only while it is
 * still due; after, its verdict when no result came (a result's verdict is given in the transaction
 * that stores it and settles the task).
 */

/** Creates the platform task, and says whom its attempt may go to; or why there is none. */
export async function beforeAttempt(input: { taskId: string; taskType: string; timeoutSeconds: number }, platform: PlatformTask): Promise<PlatformTaskPrepared> {
  const created = await db.createCanary({
    taskId: input.taskId,
    solverId: platform.solverId,
    taskType: input.taskType as CanaryTaskType,
    sent: platform.sent,
    workflowId: workflowInfo().workflowId,
    timeoutSeconds: input.timeoutSeconds,
  });
  if (!created.created) return { created: false, reason: created.reason };
  return { created: true, match: { canaryFor: platform.solverId } };
}

/** The platform task ended without a result: a canary is marked unanswered (no verdict on its solver's honesty). */
export async function afterNoResult(taskId: string, _platform: PlatformTask): Promise<void> {
  await db.markCanaryUnanswered({ taskId });
}
