import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import { taskFailure } from '../contract/lifecycle';
import { cancelTaskSignal } from '../contract/workflows';
import type { Db } from '../db/pool';
import type { WebhookSender } from '../webhooks/sender';
import { finishTask } from './finish';
import type { HandoffSender } from './handoffs';

export interface CancelDeps {
  db: Db;
  temporal: Client;
  handoffs: HandoffSender;
  webhooks: WebhookSender;
}

/**
 * Cancels a task as its client asked: its workflow by signal, or, when it has none (not started yet, or
 * a crawl page whose first attempt runs without one), ends it here as its workflow would. True when it
 * was ended here; the caller stops its attempt on whichever node runs it.
 */
export async function cancelTask(deps: CancelDeps, taskId: string, workflowId: string): Promise<{ endedHere: boolean; applied: boolean }> {
  try {
    await deps.temporal.workflow.getHandle(workflowId).signal(cancelTaskSignal);
    return { endedHere: false, applied: false };
  } catch (error) {
    if (!(error instanceof WorkflowNotFoundError)) throw error;
    // The sweep starts only tasks still active, so no workflow starts for it afterwards.
    const finished = await finishTask(deps.db, taskId, { failure: taskFailure('task_cancelled', 'Cancelled by its client.') });
    deps.handoffs.deliver(finished.handoffs);
    deps.webhooks.send(finished.webhooks);
    return { endedHere: true, applied: finished.applied };
  }
}
