import { createTaskWithHold, type NewTask } from '../../src/db/tasks/create';
import { finishTask } from '../../src/tasks/finish';
import type { Db } from '../../src/db/pool';
import { taskFailure, type TaskErrorType } from '../../src/contract/lifecycle';

/** Creates a task that must be created (a test's premise), with its first assignment if one was matched. */
export async function createTask(db: Db, task: NewTask) {
  const outcome = await createTaskWithHold(db, task);
  if (outcome.kind !== 'created') throw new Error(`task ${task.taskId} was not created: ${outcome.kind}`);
  return outcome;
}

/** Ends a task without a result, as its workflow would. */
export const failTask = (db: Db, taskId: string, type: TaskErrorType = 'solver_failed', message = 'test') => finishTask(db, taskId, { failure: taskFailure(type, message) });
