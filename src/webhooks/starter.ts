import { WorkflowExecutionAlreadyStartedError, type Client } from '@temporalio/client';
import type { Config } from '../config';
import type { NotifyBus } from '../db/notify';
import type { Db } from '../db/pool';
import { deliveryIdOf, deliveryWorkflowId, findUnstartedDeliveries, markDeliveryStarted, WEBHOOK_DUE_CHANNEL, WEBHOOK_EVENTS, type DueDelivery } from '../db/webhooks';
import type { Logger } from '../logger';
import type { WebhookDeliveryInput } from '../../workflows/contract';

export interface WebhookStartDeps {
  config: Config;
  db: Db;
  temporal: Client;
  logger: Logger;
}

/**
 * Starts a delivery's workflow. Idempotent (the workflow id is the task's and the event's), so every
 * worker that hears of a delivery may start it, and the sweep may start it again.
 */
export async function startDelivery(deps: WebhookStartDeps, due: DueDelivery): Promise<void> {
  const deliveryId = deliveryIdOf(due.task_id, due.event);
  const input: WebhookDeliveryInput = { deliveryId, retryForSeconds: deps.config.webhookRetryForSeconds, attemptTimeoutMs: deps.config.webhookTimeoutMs };
  try {
    await deps.temporal.workflow.start('webhookDeliveryWorkflow', { taskQueue: deps.config.taskQueue, workflowId: deliveryWorkflowId(due.task_id, due.event), args: [input] });
  } catch (error) {
    if (!(error instanceof WorkflowExecutionAlreadyStartedError)) throw error;
  }
  await markDeliveryStarted(deps.db, deliveryId);
}

/** Starts each delivery as its task's terminal state commits (announced on WEBHOOK_DUE_CHANNEL). */
export async function listenForDeliveries(deps: WebhookStartDeps, bus: NotifyBus): Promise<void> {
  await bus.subscribe(WEBHOOK_DUE_CHANNEL, (payload) => {
    const due = payload as Partial<DueDelivery>;
    if (typeof due?.task_id !== 'string' || !(WEBHOOK_EVENTS as readonly string[]).includes(due.event ?? '')) return;
    startDelivery(deps, due as DueDelivery).catch((error) => deps.logger.warn({ err: error, task_id: due.task_id }, 'webhook delivery not started; the sweep will'));
  });
}

/**
 * Starts deliveries whose start was not recorded `olderThanSeconds` after they were written: no worker
 * heard of them (none was listening, or its start failed).
 */
export async function sweepUnstartedDeliveries(deps: WebhookStartDeps, olderThanSeconds: number): Promise<number> {
  const due = await findUnstartedDeliveries(deps.db, olderThanSeconds);
  for (const delivery of due) {
    await startDelivery(deps, delivery).catch((error) => deps.logger.error({ err: error, task_id: delivery.task_id }, 'webhook delivery not started'));
  }
  return due.length;
}
