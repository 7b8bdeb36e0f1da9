import http from 'node:http';
import https from 'node:https';
import type { Config } from '../config';
import type { Db } from '../db/pool';
import type { ArtifactStore } from '../artifacts/store';
import { readTaskRecord } from '../tasks/records';
import { recordAttempt, webhookSecret, type DeliveryToSend } from '../db/webhooks';
import { recordWebhookAttempt, type WebhookAttemptPath } from '../metrics/metrics';
import { SolverError } from '../solver/errors';
import { hostOf, parseTargetUrl, pinnedLookup, resolveAllowedAddresses } from '../solver/net-guard';
import { signatureOf } from '../signing/webhook-signature';

/**
 * How one attempt ended: accepted (2xx), failed (retried later) or refused (the target is not allowed: the
 * delivery has failed).
 */
export type AttemptOutcome = { result: 'delivered' } | { result: 'failed' | 'refused'; error: string };

export type AttemptDeps = { db: Db; config: Config; artifacts: ArtifactStore };

/**
 * POSTs the delivery and answers the receiver's status. The target's name is resolved once, at each
 * attempt, every address checked (so a name that now points inside is refused), and the connection made
 * to one of those addresses: a second DNS answer never gets a say (DNS rebinding).
 */
async function post(deps: AttemptDeps, rawUrl: string, headers: Record<string, string>, body: string): Promise<number> {
  const url = parseTargetUrl(rawUrl);
  const addresses = await resolveAllowedAddresses(hostOf(url), {
    allowPrivateNetworks: deps.config.allowPrivateNetworks,
  });
  const signal = AbortSignal.timeout(deps.config.webhookTimeoutMs);
  const transport = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const request = transport.request(
      url,
      {
        method: 'POST',
        headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
        lookup: pinnedLookup(addresses) as unknown as http.RequestOptions['lookup'],
        signal,
      },
      (response) => {
        response.resume();
        response.on('end', () => resolve(response.statusCode ?? 0));
        response.on('error', reject);
      },
    );
    request.on('error', (error) =>
      reject(
        signal.aborted ? new Error(`the receiver did not answer within ${deps.config.webhookTimeoutMs} ms`) : error,
      ),
    );
    request.end(body);
  });
}

/**
 * One attempt of a pending delivery: the only place that signs, POSTs and logs one. The process that
 * finished the task makes the first (`direct`, src/webhooks/sender.ts), the delivery workflow's
 * activity the later ones (`workflow`). The attempt is logged with its answer and counted; an accepted
 * one ends the delivery as delivered, and a refused target as failed.
 */
export async function attemptDelivery(
  deps: AttemptDeps,
  delivery: DeliveryToSend,
  path: WebhookAttemptPath,
): Promise<AttemptOutcome> {
  const { db } = deps;
  // A crawl's event carries the body written with it (Firecrawl's shape); a task's is the task as it is now.
  const [body, { secret, previous_secret }] = await Promise.all([
    delivery.payload
      ? JSON.stringify(delivery.payload)
      : readTaskRecord(deps, delivery.task_id).then((task) =>
          JSON.stringify({
            id: delivery.delivery_id,
            type: `task.${delivery.event}`,
            created_at: delivery.created_at,
            data: task,
          }),
        ),
    webhookSecret(db, delivery.account_id),
  ]);
  const timestamp = Math.floor(Date.now() / 1000);
  const started = Date.now();
  let statusCode: number | null = null;
  let outcome: AttemptOutcome;
  try {
    statusCode = await post(
      deps,
      delivery.url,
      {
        // The job's own headers (Firecrawl's webhook.headers) first: the signature's cannot be replaced.
        ...delivery.headers,
        'content-type': 'application/json',
        'user-agent': 'task-marketplace-webhooks/1',
        'webhook-id': delivery.delivery_id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signatureOf(
          previous_secret ? [secret, previous_secret] : [secret],
          delivery.delivery_id,
          timestamp,
          body,
        ),
      },
      body,
    );
    outcome =
      statusCode >= 200 && statusCode < 300
        ? { result: 'delivered' }
        : { result: 'failed', error: `the receiver answered ${statusCode}` };
  } catch (failure) {
    const error = failure instanceof Error ? failure.message : String(failure);
    const refused = failure instanceof SolverError && failure.type === 'target_blocked';
    outcome = { result: refused ? 'refused' : 'failed', error };
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
