import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import {
  DELIVERY_STATES,
  REFUNDED_EVENT,
  WEBHOOK_EVENTS,
  type DeliveryState,
  type TerminalState,
  type WebhookEvent,
} from '../contract/lifecycle';
import { isCrawlEventType, type CrawlEvent, type CrawlEventType } from '../contract/crawl-events';
import { newSecret } from '../signing/webhook-signature';
import type { Db } from './pool';

/**
 * Webhooks: a task's subscription (url and events), its deliveries and their attempts, and each
 * account's signing secret. A delivery row is written in the transaction that moves its task to a
 * terminal state (`webhookOutboxSteps`); once that commits, the process that committed it claims the
 * row and makes the first attempt (src/webhooks/sender.ts). A delivery whose first attempt fails, or
 * whose claimer died, is sent on by a Temporal workflow until it is accepted or its time is up.
 */

/** The events a webhook can ask for: a task's terminal states, and its refund. */
export { WEBHOOK_EVENTS, type WebhookEvent };

type Runner = CommonQueryMethods;

/** What a delivery tells: a task's event, or a crawl's or batch scrape's (src/contract/crawl-events.ts). */
export type DeliveryEvent = WebhookEvent | CrawlEventType;

export const deliveryIdOf = (taskId: string, event: DeliveryEvent) => `whd_${taskId}_${event}`;
/** One workflow per subject (a task, or a crawl) and event, found in the Temporal UI by that name. */
export const deliveryWorkflowId = (taskId: string, event: DeliveryEvent) => `webhook-${taskId}-${event}`;

export async function saveSubscription(
  db: Runner,
  input: { taskId: string; accountId: string; url: string; events: readonly WebhookEvent[] },
): Promise<void> {
  await db.query(sql.unsafe`
    INSERT INTO task_webhooks (task_id, account_id, url, events)
    VALUES (${input.taskId}, ${input.accountId}, ${input.url}, ${sql.array(input.events, 'text')})
    ON CONFLICT (task_id) DO NOTHING`);
}

/** Removes the subscription of a task that was not created after all. */
export async function dropSubscription(db: Runner, taskId: string): Promise<void> {
  await db.query(
    sql.unsafe`DELETE FROM task_webhooks WHERE task_id = ${taskId} AND NOT EXISTS (SELECT 1 FROM tasks WHERE task_id = ${taskId})`,
  );
}

const AccountWebhookRow = z.object({
  url: z.string(),
  events: z.array(z.enum(WEBHOOK_EVENTS as [WebhookEvent, ...WebhookEvent[]])),
  updated_at: z.string(),
});
export type AccountWebhook = z.infer<typeof AccountWebhookRow>;

/** The account's default webhook, or null. */
export async function accountWebhook(db: Runner, accountId: string): Promise<AccountWebhook | null> {
  return db.maybeOne(
    sql.type(AccountWebhookRow)`SELECT url, events, updated_at FROM account_webhooks WHERE account_id = ${accountId}`,
  );
}

/** Sets (or replaces) the account's default webhook; tasks created from now on carry it. */
export async function setAccountWebhook(
  db: Runner,
  accountId: string,
  input: { url: string; events: readonly WebhookEvent[] },
): Promise<AccountWebhook> {
  return db.one(sql.type(AccountWebhookRow)`
    INSERT INTO account_webhooks (account_id, url, events) VALUES (${accountId}, ${input.url}, ${sql.array(input.events, 'text')})
    ON CONFLICT (account_id) DO UPDATE SET url = EXCLUDED.url, events = EXCLUDED.events, updated_at = now()
    RETURNING url, events, updated_at`);
}

/** Removes the account's default webhook (the tasks that already carry it keep it); null when there was none. */
export async function deleteAccountWebhook(db: Runner, accountId: string): Promise<AccountWebhook | null> {
  return db.maybeOne(
    sql.type(
      AccountWebhookRow,
    )`DELETE FROM account_webhooks WHERE account_id = ${accountId} RETURNING url, events, updated_at`,
  );
}

/**
 * A CTE for the statement that creates a task: `inserted` (a CTE returning `task_id`) is the new task,
 * which takes the account's default webhook unless its request stored one of its own under its id
 * before. In the creating statement, so no task of the account is created without it.
 */
export function accountWebhookStep(accountId: string) {
  return sql.fragment`
    default_webhook AS (
      INSERT INTO task_webhooks (task_id, account_id, url, events)
      SELECT i.task_id, w.account_id, w.url, w.events FROM inserted i JOIN account_webhooks w ON w.account_id = ${accountId}
      ON CONFLICT (task_id) DO NOTHING
    )`;
}

/**
 * A CTE for the statement that finishes a task: `finished` (a CTE returning `task_id`) moved it to
 * `status`; `due` writes the delivery its subscription wants for that event and returns it (the
 * statement selects it, so that its committer can make the first attempt).
 */
export function webhookOutboxSteps(status: TerminalState) {
  return sql.fragment`
    due AS (
      INSERT INTO webhook_deliveries (delivery_id, task_id, event)
      -- The form of deliveryIdOf.
      SELECT 'whd_' || w.task_id || '_' || ${status}::text, w.task_id, ${status}::text
      FROM task_webhooks w JOIN finished f ON f.task_id = w.task_id
      WHERE ${status}::text = ANY(w.events)
      ON CONFLICT (task_id, event) DO NOTHING
      RETURNING delivery_id, task_id, event
    )`;
}

/**
 * Writes the `refunded` delivery of a refunded task, when its subscription wants it, and returns it
 * (the refunding transaction's committer makes its first attempt).
 */
export async function refundedDeliveryIn(tx: Runner, taskId: string): Promise<DueDelivery[]> {
  const due = await tx.any(sql.type(DueRow)`
    INSERT INTO webhook_deliveries (delivery_id, task_id, event)
    -- The form of deliveryIdOf.
    SELECT 'whd_' || w.task_id || '_' || ${REFUNDED_EVENT}::text, w.task_id, ${REFUNDED_EVENT}::text
    FROM task_webhooks w WHERE w.task_id = ${taskId} AND ${REFUNDED_EVENT}::text = ANY(w.events)
    ON CONFLICT (task_id, event) DO NOTHING
    RETURNING task_id, event`);
  return [...due];
}

const EventColumn = z.union([
  z.enum(WEBHOOK_EVENTS as [WebhookEvent, ...WebhookEvent[]]),
  z.custom<CrawlEventType>(isCrawlEventType),
]);
export const DueRow = z.object({ task_id: z.string(), event: EventColumn });
export type DueDelivery = z.infer<typeof DueRow>;

// Literal, not a parameter, so that the planner can use the partial index on outstanding deliveries.
const PENDING = sql.literalValue('pending' satisfies DeliveryState);

const StrandedRow = DueRow.extend({ attempts: z.number() });
export type StrandedDelivery = z.infer<typeof StrandedRow>;

/**
 * Pending deliveries without a workflow that nobody is sending: never claimed `unclaimedSeconds` after
 * they were written (their committer died before its claim), or claimed `claimedSeconds` ago and
 * neither delivered nor handed to a workflow (their claimer died, or could not start the workflow).
 */
export async function findStrandedDeliveries(
  db: Runner,
  ages: { unclaimedSeconds: number; claimedSeconds: number },
): Promise<readonly StrandedDelivery[]> {
  return db.any(sql.type(StrandedRow)`
    SELECT d.task_id, d.event, (SELECT count(*)::int FROM webhook_attempts a WHERE a.delivery_id = d.delivery_id) AS attempts
    FROM webhook_deliveries d
    WHERE d.status = ${PENDING} AND d.workflow_started_at IS NULL
      AND d.created_at < now() - make_interval(secs => ${Math.min(ages.unclaimedSeconds, ages.claimedSeconds)})
      AND (CASE WHEN d.claimed_at IS NULL THEN d.created_at < now() - make_interval(secs => ${ages.unclaimedSeconds})
                ELSE d.claimed_at < now() - make_interval(secs => ${ages.claimedSeconds}) END)
    ORDER BY d.created_at LIMIT 100`);
}

export async function markDeliveryStarted(db: Runner, deliveryId: string): Promise<void> {
  await db.query(
    sql.unsafe`UPDATE webhook_deliveries SET workflow_started_at = now() WHERE delivery_id = ${deliveryId} AND workflow_started_at IS NULL`,
  );
}

const SendRow = z.object({
  delivery_id: z.string(),
  task_id: z.string(),
  event: z.string(),
  status: z.enum(DELIVERY_STATES),
  url: z.string(),
  account_id: z.string(),
  created_at: z.string(),
  attempts: z.number(),
  /** A crawl's delivery: the headers its webhook asked for, and the body written with its event. */
  headers: z.record(z.string()).nullable(),
  payload: z.record(z.any()).nullable(),
});
export type DeliveryToSend = z.infer<typeof SendRow>;

// A task's delivery goes where its subscription says, a crawl's where its job's webhook says.
const SEND_COLUMNS = sql.fragment`
  d.delivery_id, d.task_id, d.event, d.status, COALESCE(c.webhook->>'url', w.url) AS url, COALESCE(c.account_id, w.account_id) AS account_id, d.created_at,
  (SELECT count(*)::int FROM webhook_attempts a WHERE a.delivery_id = d.delivery_id) AS attempts,
  c.webhook->'headers' AS headers, d.payload`;
const SEND_TARGETS = sql.fragment`
  LEFT JOIN task_webhooks w ON d.crawl_id IS NULL AND w.task_id = d.task_id
  LEFT JOIN crawls c ON c.crawl_id = d.crawl_id`;

/** What a delivery attempt needs: the delivery, its target and how many attempts it had. */
export async function deliveryToSend(db: Runner, deliveryId: string): Promise<DeliveryToSend | null> {
  return db.maybeOne(sql.type(SendRow)`
    SELECT ${SEND_COLUMNS}
    FROM webhook_deliveries d ${SEND_TARGETS}
    WHERE d.delivery_id = ${deliveryId} AND (w.task_id IS NOT NULL OR c.crawl_id IS NOT NULL)`);
}

/**
 * Claims a delivery just written for its first attempt: null when it is not pending, already claimed,
 * already handed to a workflow, or written more than `withinSeconds` ago (the sweep's by then). Once
 * per delivery, so its committer is the only direct sender.
 */
export async function claimDelivery(
  db: Runner,
  deliveryId: string,
  claimedBy: string,
  withinSeconds: number,
): Promise<DeliveryToSend | null> {
  return db.maybeOne(sql.type(SendRow)`
    WITH claimed AS (
      UPDATE webhook_deliveries d SET claimed_at = now(), claimed_by = ${claimedBy}
      WHERE d.delivery_id = ${deliveryId}
        AND d.status = ${PENDING} AND d.claimed_at IS NULL AND d.workflow_started_at IS NULL
        AND d.created_at > now() - make_interval(secs => ${withinSeconds})
      RETURNING d.*
    )
    SELECT ${SEND_COLUMNS} FROM claimed d ${SEND_TARGETS}
    WHERE w.task_id IS NOT NULL OR c.crawl_id IS NOT NULL`);
}

/**
 * Logs one attempt; with `finish`, the attempt also ends its pending delivery (delivered, or failed for
 * a target that is refused), in the same statement, so no delivery is left pending with its last answer logged.
 */
export async function recordAttempt(
  db: Runner,
  input: {
    deliveryId: string;
    attempt: number;
    durationMs: number;
    statusCode: number | null;
    error: string | null;
    finish: Exclude<DeliveryState, 'pending'> | null;
  },
): Promise<void> {
  await db.query(sql.unsafe`
    WITH logged AS (
      INSERT INTO webhook_attempts (delivery_id, attempt, duration_ms, status_code, error)
      VALUES (${input.deliveryId}, ${input.attempt}, ${input.durationMs}, ${input.statusCode}, ${input.error})
      ON CONFLICT DO NOTHING
    )
    UPDATE webhook_deliveries SET status = ${input.finish ?? 'pending'}, finished_at = now()
    WHERE ${input.finish !== null} AND delivery_id = ${input.deliveryId} AND status = ${'pending' satisfies DeliveryState}`);
}

/** Ends a pending delivery (delivered, or failed when its time is up); a finished one stays as it is. */
export async function finishDelivery(
  db: Runner,
  deliveryId: string,
  status: Exclude<DeliveryState, 'pending'>,
): Promise<void> {
  await db.query(sql.unsafe`
    UPDATE webhook_deliveries SET status = ${status}, finished_at = now() WHERE delivery_id = ${deliveryId} AND status = ${'pending' satisfies DeliveryState}`);
}

export type ReopenOutcome =
  | { outcome: 'reopened'; delivery: DueDelivery; attempts: number }
  | { outcome: 'task_not_found' }
  | { outcome: 'delivery_not_found' }
  | { outcome: 'not_failed'; status: Exclude<DeliveryState, 'failed'> };

const ReopenedRow = DueRow.extend({ attempts: z.number() });

/**
 * Puts a failed delivery of the account's task back in the outbox, pending and claimed by `claimedBy`
 * with no workflow, so that its claimer hands it to its workflow (or the sweep does, once the claim is
 * old). Only a failed delivery is reopened: of two resends at once one wins, and a pending one is
 * already being sent.
 */
export async function reopenFailedDelivery(
  db: Runner,
  input: { taskId: string; accountId: string; event: WebhookEvent; claimedBy: string },
): Promise<ReopenOutcome> {
  const reopened = await db.maybeOne(sql.type(ReopenedRow)`
    UPDATE webhook_deliveries d
    SET status = ${'pending' satisfies DeliveryState}, finished_at = NULL, claimed_at = now(), claimed_by = ${input.claimedBy}, workflow_started_at = NULL
    FROM tasks t
    WHERE d.delivery_id = ${deliveryIdOf(input.taskId, input.event)} AND t.task_id = d.task_id AND t.account_id = ${input.accountId}
      AND d.status = ${'failed' satisfies DeliveryState}
    RETURNING d.task_id, d.event, (SELECT count(*)::int FROM webhook_attempts a WHERE a.delivery_id = d.delivery_id) AS attempts`);
  if (reopened)
    return {
      outcome: 'reopened',
      delivery: { task_id: reopened.task_id, event: reopened.event },
      attempts: reopened.attempts,
    };
  const found = await db.maybeOne(sql.type(z.object({ status: z.enum(DELIVERY_STATES).nullable() }))`
    SELECT d.status FROM tasks t LEFT JOIN webhook_deliveries d ON d.task_id = t.task_id AND d.event = ${input.event}
    WHERE t.task_id = ${input.taskId} AND t.account_id = ${input.accountId}`);
  if (!found) return { outcome: 'task_not_found' };
  // Failed again since the update looked (a concurrent resend reopened it and its attempt was refused at once).
  if (found.status === null) return { outcome: 'delivery_not_found' };
  return { outcome: 'not_failed', status: found.status === 'failed' ? 'pending' : found.status };
}

const LogRow = z.object({
  delivery_id: z.string(),
  event: z.string(),
  status: z.enum(DELIVERY_STATES),
  url: z.string(),
  created_at: z.string(),
  finished_at: z.string().nullable(),
  attempts: z.array(
    z.object({
      attempt: z.number(),
      started_at: z.string(),
      duration_ms: z.number(),
      status_code: z.number().nullable(),
      error: z.string().nullable(),
    }),
  ),
});
export type DeliveryLogEntry = z.infer<typeof LogRow>;

/** A task's webhook and its deliveries with every attempt; null when the task is not the account's. */
export async function deliveryLog(
  db: Runner,
  taskId: string,
  accountId: string,
): Promise<{ webhook: { url: string; events: string[] } | null; deliveries: readonly DeliveryLogEntry[] } | null> {
  const owned = await db.maybeOne(sql.type(
    z.object({ url: z.string().nullable(), events: z.array(z.string()).nullable() }),
  )`
    SELECT w.url, w.events FROM tasks t LEFT JOIN task_webhooks w USING (task_id) WHERE t.task_id = ${taskId} AND t.account_id = ${accountId}`);
  if (!owned) return null;
  const iso = (column: string) =>
    sql.fragment`to_char(${sql.identifier(['a', column])} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
  const deliveries = await db.any(sql.type(LogRow)`
    SELECT d.delivery_id, d.event, d.status, w.url, d.created_at, d.finished_at,
      COALESCE((SELECT json_agg(json_build_object('attempt', a.attempt, 'started_at', ${iso('started_at')}, 'duration_ms', a.duration_ms,
                                                  'status_code', a.status_code, 'error', a.error) ORDER BY a.attempt)
                FROM webhook_attempts a WHERE a.delivery_id = d.delivery_id), '[]') AS attempts
    FROM webhook_deliveries d JOIN task_webhooks w USING (task_id)
    WHERE d.task_id = ${taskId} AND d.crawl_id IS NULL ORDER BY d.created_at`);
  return { webhook: owned.url && owned.events ? { url: owned.url, events: owned.events } : null, deliveries };
}

// After a rotation the replaced secret still signs, beside the new one, this long: a day for the receiver
// to deploy the new secret, as Svix (whose scheme Standard Webhooks is) allows.
export const SECRET_OVERLAP_SECONDS = 24 * 60 * 60;

const SecretRow = z.object({
  secret: z.string(),
  rotated_at: z.string(),
  previous_secret: z.string().nullable(),
  previous_secret_expires_at: z.string().nullable(),
});
export type WebhookSecret = z.infer<typeof SecretRow>;

// The replaced secret only while its overlap lasts.
const SECRET_COLUMNS = sql.fragment`
  secret, rotated_at,
  CASE WHEN rotated_at > now() - make_interval(secs => ${SECRET_OVERLAP_SECONDS}) THEN previous_secret END AS previous_secret,
  CASE WHEN previous_secret IS NOT NULL AND rotated_at > now() - make_interval(secs => ${SECRET_OVERLAP_SECONDS})
       THEN rotated_at + make_interval(secs => ${SECRET_OVERLAP_SECONDS}) END AS previous_secret_expires_at`;

/**
 * The account's signing secret, with the one it replaced while that still signs; made on first use
 * (one statement when it exists, as for every delivery but the first).
 */
export async function webhookSecret(db: Runner, accountId: string): Promise<WebhookSecret> {
  const read = sql.type(SecretRow)`SELECT ${SECRET_COLUMNS} FROM webhook_secrets WHERE account_id = ${accountId}`;
  const existing = await db.maybeOne(read);
  if (existing) return existing;
  // A concurrent first use may make it first; DO NOTHING keeps that one, which the read then returns.
  await db.query(
    sql.unsafe`INSERT INTO webhook_secrets (account_id, secret) VALUES (${accountId}, ${newSecret()}) ON CONFLICT (account_id) DO NOTHING`,
  );
  return db.one(read);
}

/**
 * Replaces the account's secret. Deliveries sent from now on (retries too) are signed with the new one
 * and, for SECRET_OVERLAP_SECONDS, with the replaced one as well; a second rotation within the overlap
 * ends the overlap of the secret before.
 */
export async function rotateWebhookSecret(db: Runner, accountId: string): Promise<WebhookSecret> {
  return db.one(sql.type(SecretRow)`
    INSERT INTO webhook_secrets AS s (account_id, secret) VALUES (${accountId}, ${newSecret()})
    ON CONFLICT (account_id) DO UPDATE SET previous_secret = s.secret, secret = EXCLUDED.secret, rotated_at = now()
    RETURNING ${SECRET_COLUMNS}`);
}
