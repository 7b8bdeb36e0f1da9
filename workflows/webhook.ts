import { ActivityFailure, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../activities';
import type { WebhookDeliveryInput } from './contract';

/**
 * One webhook delivery (one task, one event): attempts until the receiver accepts it (2xx) or its time
 * is up, then records the verdict. Its own workflow (`webhook-<task id>-<event>`), so a delivery outlives
 * every node and its attempts are visible in the Temporal UI.
 */
export async function webhookDeliveryWorkflow(input: WebhookDeliveryInput): Promise<'delivered' | 'already_finished' | 'failed'> {
  const send = proxyActivities<Activities>({
    // One HTTP attempt: the receiver's own timeout plus a margin for logging it.
    startToCloseTimeout: input.attemptTimeoutMs + 5000,
    // Retried for a bounded time: 1 s, 2 s, 4 s... at most 10 min apart.
    scheduleToCloseTimeout: input.retryForSeconds * 1000,
    retry: { initialInterval: '1 second', backoffCoefficient: 2, maximumInterval: '10 minutes', nonRetryableErrorTypes: ['webhook_target_refused'] },
  });
  const record = proxyActivities<Activities>({ startToCloseTimeout: '10 seconds', retry: { maximumInterval: '10 seconds' } });
  try {
    return await send.deliverWebhook({ deliveryId: input.deliveryId });
  } catch (error) {
    // Out of time, or a target that is refused: the delivery has failed.
    if (!(error instanceof ActivityFailure)) throw error;
    await record.failWebhookDelivery({ deliveryId: input.deliveryId });
    return 'failed';
  }
}
