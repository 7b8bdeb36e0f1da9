import { findUnstartedTasks } from '../db/tasks/create';
import { startTaskWorkflow, type StartDeps } from './service';

/**
 * Starts the workflows of tasks whose start was never recorded `olderThanSeconds` after creation: their
 * API node died between the insert and the start. Returns the ids it handled. Starting is idempotent
 * (the workflow id is the task's), so a start the mark merely missed is harmless.
 */
export async function sweepUnstartedTasks(deps: StartDeps, olderThanSeconds: number): Promise<string[]> {
  const stranded = await findUnstartedTasks(deps.db, olderThanSeconds);
  const handled: string[] = [];
  for (const task of stranded) {
    deps.logger.warn({ task_id: task.task_id }, 'starting the workflow of a stranded task');
    try {
      if (await startTaskWorkflow(deps, task)) handled.push(task.task_id);
    } catch (error) {
      deps.logger.error({ err: error, task_id: task.task_id }, 'stranded task not started');
    }
  }
  return handled;
}
