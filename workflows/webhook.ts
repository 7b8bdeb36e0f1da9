import { ActivityFailure, proxyActivities, sleep } from '@temporalio/workflow';
import type { Activities } from '../activities';
import type { WebhookDeliveryInput } from '../src/contract/workflows';

// Between attempts: 1 s, 2 s, 4 s... at most 10 min apart.
const FIRST_RETRY_MS = 1000;
const BACKOFF_COEFFICIENT = 2;
const MAX_RETRY_INTERVAL_MS = 10 * 60 * 1000;

/** The wait before the attempt that follows `attempts` failed ones. */
const retryIntervalMs = (attempts: number) =>
  Math.min(FIRST_RETRY_MS * BACKOFF_COEFFICIENT ** Math.max(attempts - 1, 0), MAX_RETRY_INTERVAL_MS);

/**
 * One webhook delivery (one task, one event) whose first attempt failed, or whose sender died: attempts
 * until the receiver accepts it (2xx) or its time is up, then records the verdict. Its own workflow
 * (`webhook-<task id>-<event>`), so a delivery outlives every node and its attempts are visible in the
 * Temporal UI. A delivery accepted at its first attempt has none (src/webhooks/sender.ts).
 */
export async function webhookDeliveryWorkflow(
  input: WebhookDeliveryInput,
): Promise<'delivered' | 'already_finished' | 'failed'> {
  const made = input.attemptsMade ?? 0;
  // The attempts made before the start used up the first steps of the backoff.
  const waitMs = made > 0 ? retryIntervalMs(made) : 0;
  const send = proxyActivities<Activities>({
    // One HTTP attempt: the receiver's own timeout plus a margin for logging it.
    startToCloseTimeout: input.attemptTimeoutMs + 5000,
    // Retried for a bounded time.
    scheduleToCloseTimeout: Math.max(input.retryForSeconds * 1000 - waitMs, input.attemptTimeoutMs + 5000),
    retry: {
      initialInterval: made > 0 ? retryIntervalMs(made + 1) : FIRST_RETRY_MS,
      backoffCoefficient: BACKOFF_COEFFICIENT,
      maximumInterval: MAX_RETRY_INTERVAL_MS,
      nonRetryableErrorTypes: ['webhook_target_refused'],
    },
  });
  const record = proxyActivities<Activities>({
    startToCloseTimeout: '10 seconds',
    retry: { maximumInterval: '10 seconds' },
  });
  if (waitMs > 0) await sleep(waitMs);
  try {
    return await send.deliverWebhook({ deliveryId: input.deliveryId });
  } catch (error) {
    // Out of time, or a target that is refused: the delivery has failed.
    if (!(error instanceof ActivityFailure)) throw error;
    await record.failWebhookDelivery({ deliveryId: input.deliveryId });
    return 'failed';
  }
}
