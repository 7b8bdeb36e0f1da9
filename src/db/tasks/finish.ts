import { sql, type CommonQueryMethods, type DatabaseTransactionConnection } from 'slonik';
import { z } from 'zod';
import { recordTaskFinished } from '../../metrics/metrics';
import { TOKEN_BILLED_TASK_TYPES, WEB_TASK_TYPES, type BilledUsage } from '../../schemas/domain';
import { withSafetyVerdict } from '../../safety/results';
import {
  isTerminalState,
  TASK_ERRORS,
  type ActiveState,
  type TaskFailure,
  type TerminalState,
} from '../../contract/lifecycle';
import { returnKeySpend } from '../key-spend';
import { cappedCharge, PLATFORM_ACCOUNT_ID, release, settle } from '../ledger';
import { attemptIdFor, type Handoff } from '../matching';
import type { Db } from '../pool';
import { quarantined, type TrustPolicy } from '../reputation';
import { DueRow, webhookOutboxSteps, type DueDelivery } from '../webhooks';
import { afterCommit, closeAttemptIn, handOnFreed, type AttemptEnd, type FreedSlots } from './attempts';
import { TaskStateColumn } from './records';

/**
 * How a task ends, in the task engine's finishing transaction (src/tasks/finish.ts): completed with a
 * result and settled, or failed and released. Every function here is idempotent, because activities may
 * run more than once.
 */

type Runner = CommonQueryMethods;
type Fragment = ReturnType<typeof sql.fragment>;

/** NOTIFY channel on which a task's terminal state is announced when its transaction commits. */
export const TASK_FINISHED_CHANNEL = 'task_finished';

const FinishRow = z.object({ task_id: z.string().nullable(), event: DueRow.shape.event.nullable() });

/**
 * Moves the task to its terminal state, takes it off the queue, announces it (delivered when the
 * transaction commits) and writes the webhook delivery its subscription wants, which it returns: the
 * committer makes its first attempt.
 */
async function finishRow(
  tx: Runner,
  taskId: string,
  status: TerminalState,
  fields: ReturnType<typeof sql.fragment>,
): Promise<DueDelivery[]> {
  const rows = await tx.any(sql.type(FinishRow)`
    WITH dequeued AS (
      DELETE FROM task_queue WHERE task_id = ${taskId}
    ), finished AS (
      UPDATE tasks SET status = ${status}, ${fields}, updated_at = now(), completed_at = now()
      WHERE task_id = ${taskId}
      RETURNING task_id
    ), ${webhookOutboxSteps(status)}, announced AS (
      SELECT pg_notify(${TASK_FINISHED_CHANNEL}, ${JSON.stringify({ task_id: taskId, status })}) FROM finished
    )
    -- The announcement is read too: an unread CTE that only reads is not run.
    SELECT task_id, event FROM due
    UNION ALL SELECT NULL, NULL FROM announced`);
  return rows.filter((row): row is DueDelivery => row.task_id != null && row.event != null);
}

export type Completion =
  /**
   * A solver's validated result for its (still open) attempt; a chat's with the tokens it is billed for,
   * which a per_token offer charges (src/chat/usage.ts meters them).
   */
  | { kind: 'attempt'; attemptId: string; result: Record<string, unknown>; billed?: BilledUsage; stored?: StoredParts }
  | { kind: 'admin'; solverId: string; result: Record<string, unknown>; stored?: StoredParts };

/**
 * The result's top-level fields as the row keeps them, where they differ from `result`: large parts
 * replaced by references to the artifact store (src/artifacts/results.ts), written before this ends the
 * task. Everything that judges the result (safety scan, canary) reads `result` itself.
 */
export type StoredParts = Record<string, unknown>;

/**
 * What finishing a task did: `applied` when this call finished it. Otherwise the task had finished
 * already, or (`attemptClosed`) the attempt whose result this was had ended meanwhile (e.g. timed out
 * and reassigned while its result was on the way), and the task was left as it is.
 */
export type FinishOutcome =
  | Finished
  | { applied: false; status: ActiveState; attemptClosed: true; handoffs?: Handoff[]; webhooks?: DueDelivery[] };
/**
 * `handoffs`, when there are any: the slots its attempts freed, handed to waiting tasks whose workflows
 * are to be told. `webhooks`, when there are any: the deliveries written, whose first attempt is the
 * caller's to make (WebhookSender).
 */
export type Finished = {
  applied: boolean;
  status: TerminalState;
  attemptClosed?: undefined;
  handoffs?: Handoff[];
  webhooks?: DueDelivery[];
};

/**
 * What a finishing transaction notes for after its commit: the task's type (for the count of finished
 * tasks), the webhook deliveries it wrote and the slots its attempts freed; and the trust policy its
 * attempts' outcomes are counted under.
 */
export interface Finishing {
  policy: TrustPolicy;
  type: string;
  webhooks: DueDelivery[];
  freed: FreedSlots;
}

export const startFinishing = (policy: TrustPolicy): Finishing => ({
  policy,
  type: '',
  webhooks: [],
  freed: { freed: [], handoffs: [] },
});

/**
 * After the commit of a finishing transaction (the task engine's, src/tasks/finish.ts): counts the
 * finished task and hands on freed slots no waiting task could see; returns the outcome with its
 * handoffs and webhook deliveries.
 */
export async function afterFinishing<T extends FinishOutcome>(db: Db, outcome: T, finishing: Finishing): Promise<T> {
  // Counted once its transaction has committed; `applied` is true exactly once per task.
  if (outcome.applied) recordTaskFinished(finishing.type, outcome.status as TerminalState);
  const handoffs = await afterCommit(db, finishing.policy, finishing.freed);
  return {
    ...outcome,
    ...(handoffs.length > 0 ? { handoffs } : {}),
    ...(finishing.webhooks.length > 0 ? { webhooks: finishing.webhooks } : {}),
  };
}

/** Closes attempts of a finishing task and hands their slots on, noting both in `freed`. */
async function closeAndHandOn(
  tx: Runner,
  policy: TrustPolicy,
  attempts: AttemptEnd[],
  freed: FreedSlots,
): Promise<boolean[]> {
  const closings = [];
  for (const attempt of attempts) closings.push(await closeAttemptIn(tx, policy, attempt));
  const handed = await handOnFreed(tx, policy, closings);
  freed.freed.push(...handed.freed);
  freed.handoffs.push(...handed.handoffs);
  if (handed.deferred) freed.deferred = true;
  return closings.map((closing) => closing.closed);
}

/**
 * The facts of a task completed with a result (completeTaskIn), that settlement and the trust
 * reactions read: which task, by whom, at what price, and what the task was.
 */
export interface Completed {
  taskId: string;
  taskType: string;
  accountId: string;
  solverId: string;
  /** The price settled (capped at the hold): the attempt's, priced by its billed tokens, or the admin's pick. */
  price: string;
  /** The maximum the task held, and whether it counts against a key's spend limit. */
  maxPricePoints: string;
  keyLimited: boolean;
  /** A platform task (a canary or a redundant run): the platform account pays it. */
  platform: boolean;
  /** The solver was in an open quarantine when the task completed. */
  quarantined: boolean;
  /** The solver's attempt (null for an admin's completion), and whether an earlier attempt failed before it. */
  attemptId: string | null;
  afterFailedAttempt: boolean;
}

/** What completing a task found: it completed (the facts), had finished already, or its attempt had ended meanwhile. */
export type Completing =
  | { kind: 'completed'; completed: Completed }
  | { kind: 'finished_already'; status: TerminalState }
  | { kind: 'attempt_closed'; status: ActiveState };

/**
 * What attempt `ta` of task `t` charges for its billed tokens (expressions): per_request the matched
 * price; per_token (chat only) min_price_points + prompt rate × prompt tokens / 1000 + completion rate ×
 * completion tokens / 1000 (an attempt from before the rates: marginal_cost × total tokens / 1000), which
 * settle caps at the hold. A per_token offer of another task type (refused at registration) is charged
 * its min_price_points. Exact NUMERIC arithmetic.
 */
function attemptPrice(tokens: { prompt: Fragment; completion: Fragment; total: Fragment }) {
  return sql.fragment`(CASE WHEN ta.billing_type = 'per_token' AND t.task_type = ANY(${sql.array([...TOKEN_BILLED_TASK_TYPES], 'text')})
        THEN ta.price_points + CASE WHEN ta.prompt_cost IS NULL THEN ta.marginal_cost * ${tokens.total} / 1000
          ELSE (ta.prompt_cost * ${tokens.prompt} + ta.completion_cost * ${tokens.completion}) / 1000 END
        ELSE ta.price_points
      END)`;
}

/**
 * In the task engine's finishing transaction: locks the task row, prices the result, closes its attempt
 * (or an admin's completion closes the open ones), scans a web result and finishes the row with it.
 * Settlement (settleCompletedIn) and the trust reactions follow in the same transaction.
 */
export async function completeTaskIn(
  tx: DatabaseTransactionConnection,
  taskId: string,
  completion: Completion,
  finishing: Finishing,
): Promise<Completing> {
  const billedTokens = completion.kind === 'attempt' ? completion.billed : undefined;
  // A reported total below the billed counts is billed as reported: prompt tokens first, then completion.
  const billed = billedTokens ?? { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
  const chargedPrompt = Math.min(billed.prompt_tokens, billed.total_tokens);
  const charged = {
    prompt: chargedPrompt,
    completion: Math.min(billed.completion_tokens, billed.total_tokens - chargedPrompt),
  };
  // The task row is locked first: completions of one task (solver, admin, timeout) take turns here.
  // Billed is the smaller of the solver's report and the bound of what the service counted; a chat not
  // metered bills no tokens.
  const task = await tx.one(sql.type(
    z.object({
      status: TaskStateColumn,
      account_id: z.string(),
      max_price_points: z.string(),
      task_type: z.string(),
      prompt_safety_scan: z.boolean(),
      solver_id: z.string().nullable(),
      quarantined: z.boolean(),
      price: z.string().nullable(),
      key_limited: z.boolean(),
    }),
  )`
    SELECT t.status, t.account_id, t.max_price_points::text AS max_price_points, t.task_type, a.prompt_safety_scan, ta.solver_id,
      t.key_spend_period IS NOT NULL AS key_limited,
      ta.solver_id IS NOT NULL AND ${quarantined(sql.fragment`ta.solver_id`)} AS quarantined,
      ${attemptPrice({ prompt: sql.fragment`${charged.prompt}::numeric`, completion: sql.fragment`${charged.completion}::numeric`, total: sql.fragment`${billed.total_tokens}::numeric` })}::text AS price
    FROM tasks t JOIN accounts a USING (account_id)
      LEFT JOIN task_attempts ta ON ta.task_id = t.task_id AND ta.attempt_id = ${completion.kind === 'attempt' ? completion.attemptId : null}
    WHERE t.task_id = ${taskId} FOR UPDATE OF t`);
  finishing.type = task.task_type;
  if (isTerminalState(task.status)) return { kind: 'finished_already', status: task.status };
  let solverId: string;
  let price: string;
  if (completion.kind === 'attempt') {
    if (!task.solver_id || !task.price)
      throw new Error(`attempt ${completion.attemptId} of task ${taskId} does not exist`);
    // Only an open attempt may complete the task; closing it is the guard (once, under its row lock).
    const [closed] = await closeAndHandOn(
      tx,
      finishing.policy,
      [{ attemptId: completion.attemptId, outcome: 'completed' }],
      finishing.freed,
    );
    if (!closed) return { kind: 'attempt_closed', status: task.status };
    solverId = task.solver_id;
    price = task.price;
  } else {
    solverId = completion.solverId;
    // The named solver's own price for this task type when it offers one, else the task's maximum.
    const offered = await tx.maybeOneFirst(sql.type(z.object({ price: z.string() }))`
      SELECT min(min_price_points)::text AS price FROM solver_capabilities WHERE solver_id = ${solverId} AND task_type = ${task.task_type}
      HAVING count(*) > 0`);
    price = offered ?? task.max_price_points;
    const open = await tx.anyFirst(sql.type(z.object({ attempt_id: z.string() }))`
      SELECT attempt_id FROM task_attempts WHERE task_id = ${taskId} AND ended_at IS NULL`);
    await closeAndHandOn(
      tx,
      finishing.policy,
      open.map((attemptId) => ({ attemptId, outcome: 'cancelled' as const })),
      finishing.freed,
    );
  }
  // Web results are scanned once, where they are stored, so polling, the convenience responses and the
  // scrape endpoint all serve the same verdict (the account's setting when the result arrived).
  // A chat's stored result shows the usage it was billed for.
  let result = billedTokens ? { ...completion.result, usage: billedTokens } : completion.result;
  if (task.prompt_safety_scan && (WEB_TASK_TYPES as readonly string[]).includes(task.task_type))
    result = withSafetyVerdict(result);
  // The row is finished before the settlement, so that the balance rows the settlement locks (the
  // client's, which a new task of the same account waits for, and the platform's, which every settlement
  // takes) are held for its one statement and the commit only.
  finishing.webhooks = await finishRow(
    tx,
    taskId,
    'completed',
    sql.fragment`result =
      ${sql.jsonb({ ...result, ...completion.stored } as never)}, price_points = (SELECT ${cappedCharge(price)} FROM holds WHERE hold_id = ${taskId}), solver_id = ${solverId}, error = NULL`,
  );
  const attemptId = completion.kind === 'attempt' ? completion.attemptId : null;
  return {
    kind: 'completed',
    completed: {
      taskId,
      taskType: task.task_type,
      accountId: task.account_id,
      solverId,
      price,
      maxPricePoints: task.max_price_points,
      keyLimited: task.key_limited,
      platform: task.account_id === PLATFORM_ACCOUNT_ID,
      quarantined: task.quarantined,
      attemptId,
      afterFailedAttempt: attemptId !== null && attemptId !== attemptIdFor(taskId, 1),
    },
  };
}

/**
 * Settles a completed task at its price (completeTaskIn's facts), in the same transaction: the solver is
 * paid, the platform takes its fee and the rest of the hold goes back; the key's spend keeps the charge.
 * Returns the ledger's facts: whether it applied, what was charged and what the solver earned.
 */
export async function settleCompletedIn(
  tx: DatabaseTransactionConnection,
  completed: Completed,
  feePercent: string,
): Promise<{ applied: boolean; charged: string; solverEarned: string }> {
  const settled = await settle(tx, {
    holdId: completed.taskId,
    price: completed.price,
    solverId: completed.solverId,
    feePercent,
  });
  // The key's spend keeps the charge; the rest of the hold is given back to it as to the account.
  if (settled.applied && completed.keyLimited)
    await returnKeySpend(
      tx,
      completed.taskId,
      sql.fragment`${completed.maxPricePoints}::numeric - ${settled.charged}::numeric`,
    );
  return { applied: settled.applied, charged: settled.charged, solverEarned: settled.solverEarned };
}

const DeliveredRow = z.object({
  attempt_id: z.string(),
  solver_id: z.string(),
  account_id: z.string(),
  max_price_points: z.string(),
  key_limited: z.boolean(),
  quarantined: z.boolean(),
  after_failed_attempt: z.boolean(),
  price: z.string(),
  usage: z.object({ prompt_tokens: z.number(), completion_tokens: z.number(), total_tokens: z.number() }),
});

/**
 * In the task engine's finishing transaction: ends a task without a result (failed, timed out or
 * cancelled). Its hold is released whole, unless its client ended it (TASK_ERRORS' `billsDelivered`)
 * after its chat attempt delivered content: then the task keeps its state and error, and is settled as a
 * completed chat is, at the price of what was delivered (`delivered`: the facts that settlement and the
 * trust reactions read, src/tasks/finish.ts). This is the one place where an ending without a result
 * decides what it costs.
 */
export async function failTaskIn(
  tx: DatabaseTransactionConnection,
  taskId: string,
  failure: TaskFailure,
  finishing: Finishing,
): Promise<Finished & { delivered?: Completed }> {
  const {
    status,
    task_type: taskType,
    key_limited: keyLimited,
  } = await tx.one(sql.type(z.object({ status: TaskStateColumn, task_type: z.string(), key_limited: z.boolean() }))`
    SELECT status, task_type, key_spend_period IS NOT NULL AS key_limited FROM tasks WHERE task_id = ${taskId} FOR UPDATE`);
  finishing.type = taskType;
  if (isTerminalState(status)) return { applied: false, status };
  // Kept by the attempt as it stopped, before this ending (the workflow waits for it; a client's going
  // away waits for an attempt sent early). Only the latest attempt's: no later attempt follows one that
  // gave the client content.
  const delivered = TASK_ERRORS[failure.error.type].billsDelivered
    ? await tx.maybeOne(sql.type(DeliveredRow)`
        SELECT ta.attempt_id, ta.solver_id, t.account_id, t.max_price_points::text AS max_price_points, t.key_spend_period IS NOT NULL AS key_limited,
          ${quarantined(sql.fragment`ta.solver_id`)} AS quarantined, ta.attempt_number > 1 AS after_failed_attempt,
          ${attemptPrice({
            prompt: sql.fragment`(ta.delivered_usage->>'prompt_tokens')::numeric`,
            completion: sql.fragment`(ta.delivered_usage->>'completion_tokens')::numeric`,
            total: sql.fragment`(ta.delivered_usage->>'total_tokens')::numeric`,
          })}::text AS price,
          ta.delivered_usage AS usage
        FROM tasks t CROSS JOIN LATERAL (SELECT * FROM task_attempts a WHERE a.task_id = t.task_id ORDER BY a.attempt_number DESC LIMIT 1) ta
        WHERE t.task_id = ${taskId} AND ta.delivered_usage IS NOT NULL`)
    : null;
  const open = await tx.anyFirst(sql.type(z.object({ attempt_id: z.string() }))`
    SELECT attempt_id FROM task_attempts WHERE task_id = ${taskId} AND ended_at IS NULL`);
  await closeAndHandOn(
    tx,
    finishing.policy,
    open.map((attemptId) => ({ attemptId, outcome: 'cancelled' as const })),
    finishing.freed,
  );
  if (delivered) {
    // Finished first, as a completion is: the balance rows are locked for the settlement and the commit only.
    finishing.webhooks = await finishRow(
      tx,
      taskId,
      failure.status,
      sql.fragment`error = ${sql.jsonb(failure.error)}, result = ${sql.jsonb({ usage: delivered.usage })},
        price_points = (SELECT ${cappedCharge(delivered.price)} FROM holds WHERE hold_id = ${taskId}), solver_id = ${delivered.solver_id}`,
    );
    return {
      applied: true,
      status: failure.status,
      delivered: {
        taskId,
        taskType,
        accountId: delivered.account_id,
        solverId: delivered.solver_id,
        price: delivered.price,
        maxPricePoints: delivered.max_price_points,
        keyLimited: delivered.key_limited,
        platform: delivered.account_id === PLATFORM_ACCOUNT_ID,
        quarantined: delivered.quarantined,
        attemptId: delivered.attempt_id,
        afterFailedAttempt: delivered.after_failed_attempt,
      },
    };
  }
  // Finished first, so that the account's balance row is locked for the release's last statement and the commit only.
  finishing.webhooks = await finishRow(
    tx,
    taskId,
    failure.status,
    sql.fragment`error = ${sql.jsonb(failure.error)}, solver_id = NULL`,
  );
  const released = await release(tx, { holdId: taskId });
  if (released.applied && keyLimited) await returnKeySpend(tx, taskId, sql.fragment`${released.released}::numeric`);
  return { applied: true, status: failure.status };
}
