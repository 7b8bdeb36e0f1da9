import { ApplicationFailure } from '@temporalio/activity';
import { deliveryToSend, finishDelivery } from '../src/db/webhooks';
import { attemptDelivery } from '../src/webhooks/attempt';
import type { ActivityDeps } from './deps';

/**
 * The attempts of a delivery workflow, run by the workflow worker. One call is one HTTP attempt
 * (src/webhooks/attempt.ts, as the first attempt is made); a failure throws, and the workflow's retry
 * policy decides when to try again.
 */
export function createWebhookActivities({ db, config, artifacts }: ActivityDeps) {
  return {
    async deliverWebhook(input: { deliveryId: string }): Promise<'delivered' | 'already_finished'> {
      const delivery = await deliveryToSend(db, input.deliveryId);
      if (!delivery || delivery.status !== 'pending') return 'already_finished';
      const outcome = await attemptDelivery({ db, config, artifacts }, delivery, 'workflow');
      if (outcome.result === 'refused') throw ApplicationFailure.nonRetryable(outcome.error, 'webhook_target_refused');
      if (outcome.result === 'failed') throw ApplicationFailure.retryable(outcome.error, 'webhook_attempt_failed');
      return 'delivered';
    },

    async failWebhookDelivery(input: { deliveryId: string }): Promise<void> {
      await finishDelivery(db, input.deliveryId, 'failed');
    },
  };
}
