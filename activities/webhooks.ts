import dns from 'node:dns';
import net from 'node:net';
import { ApplicationFailure } from '@temporalio/activity';
import { getTaskRecord } from '../src/db/tasks';
import { recordWebhookAttempt } from '../src/metrics/metrics';
import { deliveryToSend, finishDelivery, recordAttempt, webhookSecret } from '../src/db/webhooks';
import { refusalReason } from '../src/solver/net-guard';
import { signatureOf } from '../src/webhooks/signature';
import type { ActivityDeps } from './deps';

/**
 * Sends webhook deliveries, run by the workflow worker. One call is one HTTP attempt, logged with its
 * answer; a failure throws, and the delivery workflow's retry policy decides when to try again.
 */
export function createWebhookActivities({ db, config }: ActivityDeps) {
  /** The target's addresses are checked at each attempt too, so a name that now points inside is refused. */
  async function assertPublic(url: URL): Promise<void> {
    if (config.allowPrivateNetworks) return;
    const host = url.hostname.replace(/^\[|\]$/g, '');
    const addresses = net.isIP(host) ? [host] : (await dns.promises.lookup(host, { all: true, verbatim: true })).map((entry) => entry.address);
    for (const address of addresses) {
      const reason = refusalReason(address);
      if (reason) throw ApplicationFailure.nonRetryable(`the webhook target ${host} resolves to ${address} (${reason}), which is refused`, 'webhook_target_refused');
    }
  }

  return {
    async deliverWebhook(input: { deliveryId: string }): Promise<'delivered' | 'already_finished'> {
      const delivery = await deliveryToSend(db, input.deliveryId);
      if (!delivery || delivery.status !== 'pending') return 'already_finished';
      const task = await getTaskRecord(db, delivery.task_id);
      const { secret } = await webhookSecret(db, delivery.account_id);
      const body = JSON.stringify({ id: delivery.delivery_id, type: `task.${delivery.event}`, created_at: delivery.created_at, data: task });
      const timestamp = Math.floor(Date.now() / 1000);
      const attempt = delivery.attempts + 1;
      const started = Date.now();
      let statusCode: number | null = null;
      let error: string | null = null;
      try {
        const url = new URL(delivery.url);
        await assertPublic(url);
        const response = await fetch(url, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'user-agent': 'task-marketplace-webhooks/1',
            'webhook-id': delivery.delivery_id,
            'webhook-timestamp': String(timestamp),
            'webhook-signature': signatureOf(secret, timestamp, body),
          },
          body,
          redirect: 'manual',
          signal: AbortSignal.timeout(config.webhookTimeoutMs),
        });
        statusCode = response.status;
        await response.arrayBuffer().catch(() => undefined);
        if (statusCode < 200 || statusCode >= 300) error = `the receiver answered ${statusCode}`;
      } catch (failure) {
        error = failure instanceof Error ? failure.message : String(failure);
        if (failure instanceof ApplicationFailure && failure.nonRetryable) {
          recordWebhookAttempt(delivery.event, 'refused');
          await recordAttempt(db, { deliveryId: delivery.delivery_id, attempt, durationMs: Date.now() - started, statusCode, error });
          throw failure;
        }
      }
      recordWebhookAttempt(delivery.event, error ? 'failed' : 'delivered');
      await recordAttempt(db, { deliveryId: delivery.delivery_id, attempt, durationMs: Date.now() - started, statusCode, error });
      if (error) throw ApplicationFailure.retryable(error, 'webhook_attempt_failed');
      await finishDelivery(db, delivery.delivery_id, 'delivered');
      return 'delivered';
    },

    async failWebhookDelivery(input: { deliveryId: string }): Promise<void> {
      await finishDelivery(db, input.deliveryId, 'failed');
    },
  };
}
