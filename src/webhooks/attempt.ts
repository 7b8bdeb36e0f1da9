import dns from 'node:dns';
import net from 'node:net';
import type { Config } from '../config';
import type { Db } from '../db/pool';
import { getTaskRecord } from '../db/tasks';
import { recordAttempt, webhookSecret, type DeliveryToSend } from '../db/webhooks';
import { recordWebhookAttempt, type WebhookAttemptPath } from '../metrics/metrics';
import { refusalReason } from '../policy/special-addresses';
import { signatureOf } from './signature';

/** How one attempt ended: accepted (2xx), failed (retried later) or refused (the target is not allowed: the delivery has failed). */
export type AttemptOutcome = { result: 'delivered' } | { result: 'failed' | 'refused'; error: string };

class TargetRefused extends Error {}

/** The target's addresses are checked at each attempt too, so a name that now points inside is refused. */
async function assertPublic(config: Config, url: URL): Promise<void> {
  if (config.allowPrivateNetworks) return;
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const addresses = net.isIP(host) ? [host] : (await dns.promises.lookup(host, { all: true, verbatim: true })).map((entry) => entry.address);
  for (const address of addresses) {
    const reason = refusalReason(address);
    if (reason) throw new TargetRefused(`the webhook target ${host} is refused: ${reason} addresses are not allowed`);
  }
}

/**
 * One attempt of a pending delivery: the only place that signs, POSTs and logs one. The process that
 * finished the task makes the first (`direct`, src/webhooks/sender.ts), the delivery workflow's
 * activity the later ones (`workflow`). The attempt is logged with its answer and counted; an accepted
 * one ends the delivery as delivered, and a refused target as failed.
 */
export async function attemptDelivery(deps: { db: Db; config: Config }, delivery: DeliveryToSend, path: WebhookAttemptPath): Promise<AttemptOutcome> {
  const { db, config } = deps;
  const [task, { secret }] = await Promise.all([getTaskRecord(db, delivery.task_id), webhookSecret(db, delivery.account_id)]);
  const body = JSON.stringify({ id: delivery.delivery_id, type: `task.${delivery.event}`, created_at: delivery.created_at, data: task });
  const timestamp = Math.floor(Date.now() / 1000);
  const started = Date.now();
  let statusCode: number | null = null;
  let outcome: AttemptOutcome;
  try {
    const url = new URL(delivery.url);
    await assertPublic(config, url);
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
    outcome = statusCode >= 200 && statusCode < 300 ? { result: 'delivered' } : { result: 'failed', error: `the receiver answered ${statusCode}` };
  } catch (failure) {
    const error = failure instanceof Error ? failure.message : String(failure);
    outcome = { result: failure instanceof TargetRefused ? 'refused' : 'failed', error };
  }
  recordWebhookAttempt(delivery.event, outcome.result, path);
  await recordAttempt(db, {
    deliveryId: delivery.delivery_id,
    attempt: delivery.attempts + 1,
    durationMs: Date.now() - started,
    statusCode,
    error: outcome.result === 'delivered' ? null : outcome.error,
    finish: outcome.result === 'delivered' ? 'delivered' : outcome.result === 'refused' ? 'failed' : null,
  });
  return outcome;
}
