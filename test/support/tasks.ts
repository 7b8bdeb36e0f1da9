import { createTaskWithHold, type NewTask } from '../../src/db/tasks/create';
import { finishTask } from '../../src/tasks/finish';
import type { Db } from '../../src/db/pool';
import { DEFAULT_TRUST_POLICY, type TrustPolicy } from '../../src/db/reputation';
import { taskFailure, type TaskErrorType } from '../../src/contract/lifecycle';

/**
 * Creates a task that must be created (a test's premise), with its first assignment if one was matched;
 * matched under `policy` (a stack's own: `stack.config.trust`).
 */
export async function createTask(db: Db, task: NewTask, policy: TrustPolicy = DEFAULT_TRUST_POLICY) {
  const outcome = await createTaskWithHold(db, policy, task);
  if (outcome.kind !== 'created') throw new Error(`task ${task.taskId} was not created: ${outcome.kind}`);
  return outcome;
}

/** Ends a task without a result, as its workflow would. */
export const failTask = (db: Db, taskId: string, type: TaskErrorType = 'solver_failed', message = 'test', policy: TrustPolicy = DEFAULT_TRUST_POLICY) =>
  finishTask(db, policy, taskId, { failure: taskFailure(type, message), feePercent: '0' });
