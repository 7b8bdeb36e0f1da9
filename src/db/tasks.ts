import { sql, UniqueIntegrityConstraintViolationError, type CommonQueryMethods, type DatabaseTransactionConnection } from 'slonik';
import { z } from 'zod';
import { recordAttemptReassigned, recordTaskFinished } from '../metrics/metrics';
import { TOKEN_BILLED_TASK_TYPES, WEB_TASK_TYPES, type BilledUsage, type RoutingSort } from '../schemas/domain';
import { withSafetyVerdict } from '../safety/results';
import {
  ATTEMPT_OUTCOME_TABLE,
  isTerminalState,
  TASK_STATES,
  type Assignment,
  type EndedAttemptOutcome,
  type ErrorBody,
  type TaskFailure,
  type TaskState,
  type TerminalState,
  type ActiveState,
  TARGET_FAILURE_VERDICTS,
  type TargetFailureVerdict,
  VERIFICATION_STATES,
} from '../contract/lifecycle';
import { verificationColumn } from './verification';
import { keyInWindow, releaseIdempotencyKeyIfExpired } from './retention';
import { cappedCharge, HOLD_OPEN, holdSteps, isOverdraft, PLATFORM_ACCOUNT_ID, raiseHoldSteps, release, settle, taskCostColumns } from './ledger';
import {
  ACTIVE,
  attemptIdFor,
  BEHIND_CLIENT_TASKS,
  CANDIDATE_COLUMNS,
  CandidateRow,
  clientWaiting,
  eligibleSolvers,
  figuresFrom,
  figuresIn,
  figuresOf,
  FIGURE_COLUMNS,
  handOnSlots,
  QUEUE_COLUMNS,
  queueValues,
  REASSIGNED,
  recordHandoffsCommitted,
  type RequestFigures,
  reservationSteps,
  stateValue,
  toAssignment,
  toldOnly,
  UNMEASURED_LATENCY_MS,
  withinLimits,
  type Handoff,
  type ReserveAttemptInput,
} from './matching';
import type { Db } from './pool';
import { quarantined, recordOutcomeStep } from './reputation';
import { claimFailures, judgeTargetClaimSteps, type TargetClaim } from './target-claims';
import { accountWebhookStep, DueRow, webhookOutboxSteps, type DueDelivery } from './webhooks';
import { isKeySpendLimitReached, keySpendLookup, keySpendOf, keySpendStep, returnKeySpend, type KeySpend } from './key-spend';

/**
 * Tasks and their attempts. The task row is the record clients poll; workflow activities keep it
 * current. Every function here is idempotent, because activities may run more than once.
 */

type Runner = CommonQueryMethods;

const TaskStateColumn = z.enum(TASK_STATES as [TaskState, ...TaskState[]]);

/** NOTIFY channel on which a task's terminal state is announced when its transaction commits. */
export const TASK_FINISHED_CHANNEL = 'task_finished';

const FinishRow = z.object({ task_id: z.string().nullable(), event: DueRow.shape.event.nullable() });

/**
 * Moves the task to its terminal state, takes it off the queue, announces it (delivered when the
 * transaction commits) and writes the webhook delivery its subscription wants, which it returns: the
 * committer makes its first attempt.
 */
async function finishRow(tx: Runner, taskId: string, status: TerminalState, fields: ReturnType<typeof sql.fragment>): Promise<DueDelivery[]> {
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

export { attemptIdFor, type Handoff, type ReserveAttemptInput } from './matching';

export const TaskRow = z.object({
  task_id: z.string(),
  account_id: z.string(),
  task_type: z.string(),
  status: TaskStateColumn,
  payload: z.record(z.any()),
  max_price_points: z.string(),
  price_points: z.string().nullable(),
  timeout_seconds: z.number(),
  solver_id: z.string().nullable(),
  result: z.record(z.any()).nullable(),
  result_expired_at: z.string().nullable(),
  error: z.object({ type: z.string(), message: z.string() }).passthrough().nullable(),
  workflow_id: z.string(),
  created_at: z.string(),
  updated_at: z.string(),
  completed_at: z.string().nullable(),
});
export type TaskRow = z.infer<typeof TaskRow>;

const AttemptRow = z.object({
  attempt_id: z.string(),
  solver_id: z.string(),
  started_at: z.string(),
  ended_at: z.string().nullable(),
  outcome: z.string(),
});

/** Every column of the record but the result, which can be large (listings leave it out). */
export const TASK_SUMMARY_COLUMNS = sql.fragment`
  task_id, account_id, task_type, status, payload, trim_scale(max_price_points)::text AS max_price_points,
  trim_scale(price_points)::text AS price_points, timeout_seconds, solver_id, error, workflow_id,
  created_at, updated_at, completed_at, result_expired_at`;
const TASK_COLUMNS = sql.fragment`${TASK_SUMMARY_COLUMNS}, result`;

/** What a task held and was charged (`taskCostColumns`), and what is known of its result (`verificationColumn`). */
export const TaskCostRow = z.object({
  held_points: z.string().nullable(),
  estimated_price_points: z.string().nullable(),
  hold_status: z.string().nullable(),
  charged_points: z.string(),
  verification: z.enum(VERIFICATION_STATES),
});
export type TaskCost = z.infer<typeof TaskCostRow>;

export interface TaskRecord extends Omit<TaskRow, 'account_id'>, TaskCost {
  attempts: { solver_id: string; started_at: string; ended_at: string | null; outcome: string }[];
  /** While it waits for a slot: its place in its type's line (1 is next) and how long it has waited. */
  queue?: QueuePlace;
}

const QueuePlace = z.object({ position: z.number(), waited_seconds: z.number() });
export type QueuePlace = z.infer<typeof QueuePlace>;

/** An Idempotency-Key as a task stores it, and the fingerprint of the request that sent it (src/http/idempotency.ts). */
export interface Idempotency {
  key: string;
  fingerprint: string;
}

export interface NewTask {
  taskId: string;
  accountId: string;
  taskType: string;
  payload: Record<string, unknown>;
  maxPricePoints: string;
  timeoutSeconds: number;
  workflowId: string;
  /** The request's Idempotency-Key (as this task stores it) and the fingerprint of the request it came with. */
  idempotency?: Idempotency;
  /** The API key that asks for it: its hold counts against the key's spend limit, if it has one. */
  keyId?: string;
  /**
   * Match the first attempt in the same statement (chat: among these strong-tier models), so the
   * workflow can dispatch at once. Without a solver free now, the workflow matches later as usual; with
   * none online at all and `requireOnline`, nothing is created.
   */
  match?: { strongModels?: string[]; requireOnline?: boolean };
  /**
   * Refuse instead of queueing (nothing created, nothing held) when this many tasks of the type wait
   * already, or when the wait the queue and its solvers' measured rate promise exceeds the task's timeout.
   */
  admission?: { maxQueued: number };
  /** The strict order the client asked for, kept for every attempt (docs/queue.md, "Sharing work"). */
  routingSort?: RoutingSort;
  /**
   * A chat's token figures and price limits, kept for every attempt: offers are ranked by their estimated
   * price for it, and a first attempt matched now holds that estimate (capped at `maxPricePoints`) instead
   * of the maximum (docs/queue.md, "What a chat pays").
   */
  figures?: RequestFigures;
  /** The country the task must be fetched from: only capabilities that declare it take it, every attempt. */
  country?: string;
}

// Retry-After of a refusal is at least this, and at most a minute.
const MIN_RETRY_AFTER_SECONDS = 1;
const MAX_RETRY_AFTER_SECONDS = 60;

const AdmissionRow = z.object({ ahead: z.number(), rate: z.coerce.number(), busy: z.boolean() });

/** What creating a task did. */
export type CreateTaskOutcome =
  /** `handoffs`: slots handed to waiting tasks (this one's own may be among them) once it had queued. */
  | { kind: 'created'; task: TaskRow; firstAssignment: Assignment | null; handoffs: Handoff[] }
  /** The account used this idempotency key before, with the same request: that task is the answer. */
  | { kind: 'existing'; task: TaskRow }
  /** The account used this idempotency key before with another request: nothing is created. */
  | { kind: 'idempotency_key_reused' }
  /** The hold does not fit the account's available points (or the account does not exist). */
  | { kind: 'insufficient_balance'; requiredPoints: string }
  /** The hold does not fit what is left of the key's spend limit in its period. */
  | { kind: 'key_spend_limit_reached'; requiredPoints: string; keyId: string; limit: KeySpend | null }
  /** `requireOnline` and no eligible solver is online at all. */
  | { kind: 'no_solver_online' }
  /** `requireOnline` with figures: solvers are online, but none within the request's price limits. */
  | { kind: 'no_solver_within_price'; limit: PriceLimit }
  /** `admission`: the queue is full, or would not serve the task before its deadline. */
  | { kind: 'solvers_busy'; retryAfterSeconds: number; waiting: number };

/**
 * Inserts the task, matches its first attempt (or queues it) and holds its maximum price in one
 * statement, so a task exists only with its hold and the locks it takes (the solver's capability row,
 * then the client's balance row, in the order settlement takes them) are held for one statement, not
 * for a transaction's round trips. A task whose request stored no webhook takes the account's default
 * one in the same statement. With an idempotency key already used by this account, returns that
 * earlier task instead.
 */
export async function createTaskWithHold(db: Db, task: NewTask): Promise<CreateTaskOutcome> {
  const attemptId = attemptIdFor(task.taskId, 1);
  const requireOnline = task.match?.requireOnline ?? false;
  const country = task.country ?? null;
  const eligible = eligibleSolvers(task.taskType, { strongModels: task.match?.strongModels, country });
  const hasBalance = sql.fragment`EXISTS (SELECT 1 FROM balances WHERE account_id = ${task.accountId})`;
  const entry = {
    taskId: task.taskId,
    taskType: task.taskType,
    attemptNumber: 1,
    maxPricePoints: task.maxPricePoints,
    strongModels: task.match?.strongModels,
    excludedSolverIds: [],
    routingSort: task.routingSort ?? null,
  };
  const maxQueued = task.admission?.maxQueued ?? null;
  const figures = figuresOf(task.figures);
  // With figures, the hold (and the task's max_price_points) is the estimate of the offer matched now,
  // the maximum when none is yet; a later attempt on a dearer offer raises it (reserveAttempt).
  const held = task.figures
    ? sql.fragment`(SELECT LEAST(${task.maxPricePoints}::numeric, COALESCE((SELECT estimated_price_points FROM reserved), ${task.maxPricePoints}::numeric)))`
    : sql.fragment`${task.maxPricePoints}::numeric`;
  // With figures, being online counts only within the request's limits (a refusal names the limit).
  const online = task.figures
    ? sql.fragment`(count(DISTINCT c.solver_id) FILTER (WHERE ${withinLimits('c', figures, sql.fragment`${task.maxPricePoints}::numeric`)}))::int`
    : sql.fragment`count(DISTINCT c.solver_id)::int`;
  // A key older than its window names its task no more: this request starts a new one.
  if (task.idempotency) await releaseIdempotencyKeyIfExpired(db, task.accountId, task.idempotency.key);
  const row = await db
    .one(sql.type(CreatedRow)`
      WITH ${task.keyId ? sql.fragment`${keySpendLookup(task.keyId)},` : sql.fragment``} online AS (
        SELECT ${online} AS n, count(DISTINCT c.solver_id)::int AS any_price ${eligible}
      ), admission AS (
        -- Asked only when no slot was free: how many wait, how many tasks per second the online
        -- solvers finish (each slot at its capability's measured latency), and whether to refuse.
        SELECT ahead, rate, (${maxQueued}::int IS NOT NULL AND ahead >= ${maxQueued}::int) OR (rate > 0 AND (ahead + 1) / rate > ${task.timeoutSeconds}) AS busy
        FROM (
          SELECT (SELECT count(*)::int FROM task_queue q WHERE q.task_type = ${task.taskType} AND ${clientWaiting('q')}) AS ahead,
                 (SELECT COALESCE(sum(c.max_concurrent * 1000.0 / GREATEST(COALESCE(s.total_latency_ms::numeric / NULLIF(s.completed, 0), ${UNMEASURED_LATENCY_MS}), 1)), 0)
                  ${eligible}) AS rate
        ) x
      ), ${reservationSteps({
        ...entry,
        attemptId,
        onlyIf: task.match ? hasBalance : sql.fragment`false`,
        arrival: sql.fragment`now()`,
        sort: sql.fragment`${entry.routingSort}::text`,
        figures,
        country,
      })}, inserted AS (
        INSERT INTO tasks (task_id, account_id, task_type, payload, max_price_points, timeout_seconds, workflow_id, idempotency_key, request_fingerprint, status, solver_id, key_id, key_spend_period, routing_sort, country,
                           ${FIGURE_COLUMNS}, price_cap_points)
        SELECT ${task.taskId}, ${task.accountId}, ${task.taskType}, ${sql.jsonb(task.payload as never)}, ${held},
               ${task.timeoutSeconds}, ${task.workflowId}, ${task.idempotency?.key ?? null}, ${task.idempotency?.fingerprint ?? null},
               CASE WHEN r.solver_id IS NULL THEN ${stateValue('queued')} ELSE ${stateValue('assigned')} END, r.solver_id,
               ${task.keyId ?? null}, ${task.keyId ? sql.fragment`(SELECT period_start FROM spend_key)` : sql.fragment`NULL::date`}, ${entry.routingSort}::text,
               ${country}::text,
               ${figures.promptTokens}, ${figures.completionTokens}, ${figures.maxPricePrompt}, ${figures.maxPriceCompletion}, ${figures.maxPriceRequest},
               ${task.figures ? task.maxPricePoints : null}::numeric
        FROM (SELECT 1) one LEFT JOIN reserved r ON true
        -- With no eligible solver online at all, nothing is created (the caller answers 402/503).
        WHERE ${hasBalance} AND (r.solver_id IS NOT NULL OR NOT ${requireOnline} OR (SELECT n FROM online) > 0)
          AND (r.solver_id IS NOT NULL OR ${maxQueued === null} OR NOT (SELECT busy FROM admission))
        RETURNING ${TASK_COLUMNS}
      ), queued AS (
        -- Matched but no slot free for it: it waits in line.
        INSERT INTO task_queue (${QUEUE_COLUMNS})
        SELECT i.created_at, i.workflow_id, i.timeout_seconds, ${queueValues(entry, undefined, figures)}
        FROM inserted i WHERE ${task.match !== undefined} AND i.solver_id IS NULL
        RETURNING task_id
      ), ${accountWebhookStep(task.accountId)}, ${holdSteps(sql.fragment`SELECT task_id AS hold_id FROM inserted`, task.accountId, held)}
      ${task.keyId ? sql.fragment`, ${keySpendStep(held)}` : sql.fragment``}
      -- The count of solvers online is needed (and taken) only when nothing was created.
      SELECT t.*, t.task_id IS NOT NULL AS inserted, CASE WHEN t.task_id IS NULL THEN (SELECT n FROM online) ELSE 0 END AS online,
             CASE WHEN t.task_id IS NULL THEN (SELECT any_price FROM online) ELSE 0 END AS online_any_price,
             (SELECT row_to_json(x) FROM (SELECT ${CANDIDATE_COLUMNS} FROM reserved) x) AS candidate,
             EXISTS (SELECT 1 FROM queued) AS queued,
             CASE WHEN t.task_id IS NULL AND ${maxQueued !== null} THEN (SELECT row_to_json(a) FROM admission a) END AS admission
      FROM (SELECT 1) one LEFT JOIN inserted t ON true`)
    .catch((error) => {
      if (isOverdraft(error)) return 'overdraft' as const;
      if (isKeySpendLimitReached(error)) return 'key_limit' as const;
      if (error instanceof UniqueIntegrityConstraintViolationError && error.constraint === 'tasks_idempotency_idx') return 'duplicate' as const;
      throw error;
    });
  if (row === 'overdraft') return { kind: 'insufficient_balance', requiredPoints: task.maxPricePoints };
  if (row === 'key_limit') return { kind: 'key_spend_limit_reached', requiredPoints: task.maxPricePoints, keyId: task.keyId!, limit: await keySpendOf(db, task.keyId!) };
  if (row === 'duplicate') {
    const { request_fingerprint: fingerprint, ...existing } = await db.one(sql.type(TaskRow.extend({ request_fingerprint: z.string().nullable() }))`
      SELECT ${TASK_COLUMNS}, request_fingerprint FROM tasks WHERE account_id = ${task.accountId} AND idempotency_key = ${task.idempotency?.key ?? null}`);
    // A task from before fingerprints were stored has none: its type still tells another operation.
    if ((fingerprint ?? task.idempotency?.fingerprint) !== task.idempotency?.fingerprint || existing.task_type !== task.taskType) return { kind: 'idempotency_key_reused' };
    return { kind: 'existing', task: existing };
  }
  if (!row.inserted) {
    if (row.online === 0 && requireOnline) {
      if (row.online_any_price === 0 || !task.figures) return { kind: 'no_solver_online' };
      return { kind: 'no_solver_within_price', limit: await priceLimitMissed(db, task.taskType, task.match?.strongModels, task.figures, task.maxPricePoints) };
    }
    if (row.admission?.busy) return { kind: 'solvers_busy', retryAfterSeconds: retryAfter(row.admission, maxQueued!, task.timeoutSeconds), waiting: row.admission.ahead };
    // No balance row: the account does not exist.
    return { kind: 'insufficient_balance', requiredPoints: task.maxPricePoints };
  }
  const created = TaskRow.parse(row);
  if (!row.queued) return { kind: 'created', task: created, firstAssignment: row.candidate ? toAssignment(attemptId, row.candidate) : null, handoffs: [] };
  // Queued: a slot freed while this statement ran could not see it (docs/queue.md, "Who hands a slot on").
  const handoffs = await handOnSlots(db, [task.taskType], { knownWaiting: true });
  const own = handoffs.find((handoff) => handoff.taskId === task.taskId);
  return {
    kind: 'created',
    task: own ? { ...created, status: 'assigned', solver_id: own.assignment.solverId } : created,
    firstAssignment: own?.assignment ?? null,
    handoffs: handoffs.map((handoff) => (handoff === own ? toldOnly(handoff) : handoff)),
  };
}

/** Which of a request's price limits keeps every online offer from it (`combined`: none alone does). */
export type PriceLimit = 'prompt' | 'completion' | 'request' | 'max_price_points' | 'combined';

async function priceLimitMissed(db: Runner, taskType: string, strongModels: string[] | undefined, figures: RequestFigures, maxPricePoints: string): Promise<PriceLimit> {
  const only = (limit: Partial<RequestFigures>, maxPrice: string | null) =>
    sql.fragment`(count(*) FILTER (WHERE ${withinLimits('c', figuresOf({ ...figures, maxPricePrompt: null, maxPriceCompletion: null, maxPriceRequest: null, ...limit }), sql.fragment`${maxPrice}::numeric`)}))::int`;
  const none = { promptTokens: null, completionTokens: null };
  const row = await db.one(sql.type(z.object({ prompt: z.number(), completion: z.number(), request: z.number(), max_price_points: z.number() }))`
    SELECT ${only({ ...none, maxPricePrompt: figures.maxPricePrompt }, null)} AS prompt,
           ${only({ ...none, maxPriceCompletion: figures.maxPriceCompletion }, null)} AS completion,
           ${only({ ...none, maxPriceRequest: figures.maxPriceRequest }, null)} AS request,
           ${only({}, maxPricePoints)} AS max_price_points
    ${eligibleSolvers(taskType, { strongModels })}`);
  return (['prompt', 'completion', 'request', 'max_price_points'] as const).find((limit) => row[limit] === 0) ?? 'combined';
}

/**
 * Whether the account used any of these idempotency keys (as tasks store them) with a request other than
 * the one of `fingerprint`: a request making several tasks asks before it makes any.
 */
export async function idempotencyKeyReused(db: Runner, accountId: string, idempotency: { keys: string[]; fingerprint: string }): Promise<boolean> {
  return db.oneFirst(sql.type(z.object({ reused: z.boolean() }))`
    SELECT EXISTS (
      SELECT 1 FROM tasks t
      WHERE account_id = ${accountId} AND idempotency_key = ANY(${sql.array(idempotency.keys, 'text')}) AND request_fingerprint <> ${idempotency.fingerprint}
        AND ${keyInWindow('t')}
    ) AS reused`);
}

/** When a refused task would be admitted: once the queue has shrunk below both limits at its measured rate. */
function retryAfter({ ahead, rate }: z.infer<typeof AdmissionRow>, maxQueued: number, timeoutSeconds: number): number {
  if (rate <= 0) return MIN_RETRY_AFTER_SECONDS;
  const admissible = Math.min(maxQueued, rate * timeoutSeconds - 1);
  const seconds = Math.ceil((ahead - admissible + 1) / rate);
  return Math.max(MIN_RETRY_AFTER_SECONDS, Math.min(MAX_RETRY_AFTER_SECONDS, seconds));
}

export async function markWorkflowStarted(db: Runner, taskId: string): Promise<void> {
  await db.query(sql.unsafe`UPDATE tasks SET workflow_started_at = now() WHERE task_id = ${taskId} AND workflow_started_at IS NULL`);
}

export async function getTaskRow(db: Runner, taskId: string): Promise<TaskRow | null> {
  return db.maybeOne(sql.type(TaskRow)`SELECT ${TASK_COLUMNS} FROM tasks WHERE task_id = ${taskId}`);
}

/** The task record of decisions.md, or null when the task does not exist or belongs to another account. */
export async function getTaskRecord(db: Runner, taskId: string, accountId?: string): Promise<TaskRecord | null> {
  // One round trip: the attempts come along as JSON, their times in the same ISO 8601 form as the task's.
  const iso = (column: string) => sql.fragment`to_char(${sql.identifier(['ta', column])} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
  const row = await db.maybeOne(sql.type(TaskRow.merge(TaskCostRow).extend({ attempts: z.array(AttemptRow), queue: QueuePlace.nullable() }))`
    SELECT ${TASK_COLUMNS}, ${taskCostColumns(sql.fragment`tasks.task_id`)}, ${verificationColumn(sql.fragment`tasks.task_id`)},
      (SELECT json_build_object(
                -- Among client tasks: canaries and runs waiting behind clients are the platform's.
                'position', (SELECT count(*)::int FROM task_queue a WHERE a.task_type = q.task_type AND (a.arrival, a.task_id) <= (q.arrival, q.task_id) AND ${clientWaiting('a')}),
                'waited_seconds', round(extract(epoch FROM now() - q.arrival)::numeric, 3))
       FROM task_queue q WHERE q.task_id = tasks.task_id) AS queue,
      COALESCE((SELECT json_agg(json_build_object('attempt_id', ta.attempt_id, 'solver_id', ta.solver_id, 'started_at', ${iso('started_at')},
                                                  'ended_at', ${iso('ended_at')}, 'outcome', ta.outcome) ORDER BY ta.attempt_number)
                FROM task_attempts ta WHERE ta.task_id = tasks.task_id), '[]') AS attempts
    FROM tasks WHERE task_id = ${taskId}`);
  if (!row || (accountId !== undefined && row.account_id !== accountId)) return null;
  const { account_id: _account, attempts, queue, ...record } = row;
  return { ...record, attempts: attempts.map(({ attempt_id: _id, ...attempt }) => attempt), ...(queue ? { queue } : {}) };
}

export type { Assignment } from '../contract/lifecycle';

/** What creating a task returns: the task's columns when it was inserted, the first attempt's solver, if any, and (when nothing was inserted) how many eligible solvers are online. */
const CreatedRow = z
  .object({ inserted: z.boolean(), online: z.number(), online_any_price: z.number(), candidate: CandidateRow.nullable(), queued: z.boolean(), admission: AdmissionRow.nullable() })
  .passthrough();

/** What asking for an attempt's slot gave: a slot, or a place in the queue (or a task that has finished). */
export type Reservation =
  | { assignment: Assignment; handoffs?: Handoff[] }
  | { assignment: null; untriedOnline: number; finishedAs: TerminalState | null; queued?: boolean; handoffs?: Handoff[] };

/**
 * The most an offer's estimate may be for a later attempt of task row `t`: a chat falls back to a dearer
 * offer than its hold (max_price_points) by raising the hold, up to its maximum price and what the
 * account has available; not under a key's spend limit, which counted the first hold only.
 */
const fallbackCeiling = (t: string) => {
  const col = (name: string) => sql.identifier([t, name]);
  return sql.fragment`CASE WHEN ${col('price_cap_points')} IS NULL OR ${col('key_spend_period')} IS NOT NULL THEN ${col('max_price_points')}
    ELSE LEAST(${col('price_cap_points')}, ${col('max_price_points')} + COALESCE((SELECT b.available FROM balances b WHERE b.account_id = ${col('account_id')}), 0)) END`;
};

/**
 * Picks a solver for attempt `attemptNumber` and reserves one of its concurrency slots, or (none free
 * that no earlier waiting task fits) queues the task in the same statement; its slot is then handed to
 * it (matching.ts, handOnSlots) and its workflow told. Eligible: online on a live node, offers the task
 * type at a price within the task's maximum, below max_concurrent, not tried before. Cheapest first;
 * among equal prices shared by a weighted draw, or in the strict order the task's client asked for
 * (reservationSteps). Returns the same assignment when called again for
 * the same attempt, and a task already waiting for it is left waiting.
 */
export async function reserveAttempt(db: Runner, input: ReserveAttemptInput): Promise<Reservation> {
  const attemptId = attemptIdFor(input.taskId, input.attemptNumber);
  const entry = { ...input, lastResortSolverIds: input.lastResortSolverIds ?? [] };
  const neither = sql.fragment`NOT EXISTS (SELECT 1 FROM existing) AND NOT EXISTS (SELECT 1 FROM waiting)`;
  const ceiling = sql.fragment`COALESCE((SELECT ${fallbackCeiling('t')} FROM task t WHERE t.price_cap_points IS NOT NULL), ${input.maxPricePoints}::numeric)`;
  // One statement, so one round trip and atomic without a transaction.
  const row = await db.one(sql.type(z.object({ candidate: CandidateRow.nullable(), queued: z.boolean(), waiting: z.boolean(), reassigned: z.boolean() }))`
    WITH existing AS (
      SELECT solver_id, node_id, model_name, price_points AS min_price_points, billing_type, marginal_cost, estimated_price_points
      FROM task_attempts WHERE attempt_id = ${attemptId}
    ), waiting AS (
      SELECT 1 FROM task_queue WHERE task_id = ${input.taskId} AND attempt_number = ${input.attemptNumber}
    ), task AS (
      SELECT created_at, workflow_id, timeout_seconds, routing_sort, country, ${FIGURE_COLUMNS}, account_id, max_price_points, price_cap_points, key_spend_period
      FROM tasks WHERE task_id = ${input.taskId} AND status = ANY(${ACTIVE})
    ), ${reservationSteps({
      ...input,
      attemptId,
      onlyIf: sql.fragment`${neither} AND EXISTS (SELECT 1 FROM task)`,
      arrival: input.behindClientTasks ? BEHIND_CLIENT_TASKS : sql.fragment`(SELECT created_at FROM task)`,
      sort: sql.fragment`(SELECT routing_sort FROM task)`,
      figures: figuresFrom('task'),
      ceiling,
      country: sql.fragment`(SELECT country FROM task)`,
    })}, ${raiseHoldSteps(sql.fragment`
      SELECT h.hold_id, h.account_id, r.estimated_price_points - h.amount AS extra, ${attemptId}::text AS raise_id
      FROM reserved r JOIN holds h ON h.hold_id = ${input.taskId} AND h.status = ${HOLD_OPEN}
      WHERE EXISTS (SELECT 1 FROM task WHERE price_cap_points IS NOT NULL) AND r.estimated_price_points > h.amount`)}, assigned AS (
      UPDATE tasks SET status = ${stateValue('assigned')}, solver_id = r.solver_id, updated_at = now(),
        max_price_points = max_price_points + COALESCE((SELECT extra FROM raise), 0)
      FROM reserved r WHERE task_id = ${input.taskId} AND status = ANY(${ACTIVE})
    ), dequeued AS (
      -- A place kept for an earlier attempt (not expected, but never to be handed a second slot).
      DELETE FROM task_queue WHERE task_id = ${input.taskId} AND EXISTS (SELECT 1 FROM reserved)
    ), queued AS (
      INSERT INTO task_queue (${QUEUE_COLUMNS})
      SELECT ${input.behindClientTasks ? BEHIND_CLIENT_TASKS : sql.fragment`t.created_at`}, t.workflow_id, t.timeout_seconds, ${queueValues(entry, sql.fragment`t.routing_sort`, figuresIn('t'))}
      FROM task t WHERE ${neither} AND NOT EXISTS (SELECT 1 FROM reserved)
      ON CONFLICT (task_id) DO UPDATE SET attempt_number = EXCLUDED.attempt_number, max_price_points = EXCLUDED.max_price_points,
        strong_models = EXCLUDED.strong_models, excluded_solver_ids = EXCLUDED.excluded_solver_ids, last_resort_solver_ids = EXCLUDED.last_resort_solver_ids,
        verifiers_only = EXCLUDED.verifiers_only
      RETURNING task_id
    )
    SELECT (SELECT row_to_json(x) FROM (
              SELECT ${CANDIDATE_COLUMNS}
              FROM (SELECT * FROM existing UNION ALL SELECT solver_id, node_id, model_name, min_price_points, billing_type, marginal_cost, estimated_price_points FROM reserved) chosen
            ) x) AS candidate,
           EXISTS (SELECT 1 FROM queued) AS queued, EXISTS (SELECT 1 FROM waiting) AS waiting, ${REASSIGNED} AS reassigned`);
  // Reserved by this call (not found again on a retry); a queued attempt counts when its slot is handed.
  if (row.reassigned) recordAttemptReassigned(input.taskType);
  if (row.candidate) return { assignment: toAssignment(attemptId, row.candidate) };
  const handoffs = row.queued ? await handOnSlots(db, [input.taskType], { knownWaiting: true }) : [];
  const own = handoffs.find((handoff) => handoff.taskId === input.taskId && handoff.attemptNumber === input.attemptNumber);
  if (own) return { assignment: own.assignment, handoffs: handoffs.map((handoff) => (handoff === own ? toldOnly(handoff) : handoff)) };
  const eligible = eligibleSolvers(input.taskType, {
    strongModels: input.strongModels,
    excludedSolverIds: input.excludedSolverIds,
    verifiersOnly: input.verifiersOnly,
    canaryFor: input.canaryFor,
    country: sql.fragment`(SELECT country FROM tasks WHERE task_id = ${input.taskId})`,
  });
  // A run behind client tasks waits for no solver that its price cap keeps from it; nor does a chat.
  const priceFits = input.behindClientTasks
    ? sql.fragment`AND c.min_price_points <= ${input.maxPricePoints}::numeric`
    : sql.fragment`AND NOT EXISTS (
        SELECT 1 FROM tasks t WHERE t.task_id = ${input.taskId} AND t.estimate_prompt_tokens IS NOT NULL
          AND NOT ${withinLimits('c', figuresIn('t'), fallbackCeiling('t'))})`;
  const { count, status } = await db.one(sql.type(z.object({ count: z.number(), status: z.string().nullable() }))`
    SELECT (SELECT count(DISTINCT c.solver_id)::int ${eligible} ${priceFits}) AS count, (SELECT status FROM tasks WHERE task_id = ${input.taskId}) AS status`);
  const finishedAs = status && isTerminalState(status) ? status : null;
  return {
    assignment: null,
    untriedOnline: count,
    finishedAs,
    ...(row.queued || row.waiting ? { queued: true } : {}),
    ...(handoffs.length > 0 ? { handoffs } : {}),
  };
}

export async function markAttemptAccepted(db: Runner, attemptId: string): Promise<void> {
  await db.query(sql.unsafe`UPDATE task_attempts SET accepted_at = now() WHERE attempt_id = ${attemptId} AND accepted_at IS NULL`);
}

/**
 * Ends an attempt once: frees the solver's slot, counts it in the solver's record and reputation and, unless the task
 * has finished, puts the task back to queued for reassignment. Returns whether it closed the attempt,
 * its task type and whether tasks of that type were waiting (the slot is then handed on before commit).
 * An attempt that makes its solver due a canary announces it (docs/trust.md).
 */
async function closeAttemptIn(tx: Runner, input: AttemptEnd): Promise<Closing> {
  const counts = ATTEMPT_OUTCOME_TABLE[input.outcome].counts;
  const succeeded = counts === 'completed';
  const failed = counts === 'failed';
  // A claim that the target failed is judged in the same statement: its failure counts unless corroborated.
  const claim = failed && input.claim ? input.claim : null;
  // One statement: the attempt ends once (ended_at IS NULL), and only then are the slot, the stats
  // and the task's state touched.
  return tx.one(sql.type(ClosingRow)`
    WITH closed AS (
      UPDATE task_attempts SET ended_at = now(), outcome = ${input.outcome}, error = ${input.error ? sql.jsonb({ ...input.error }) : null}
      WHERE attempt_id = ${input.attemptId} AND ended_at IS NULL
      RETURNING attempt_id, solver_id, task_type, model_name, slot, task_id, (extract(epoch FROM (now() - started_at)) * 1000)::int AS latency_ms
    ), ${claim ? sql.fragment`${judgeTargetClaimSteps(claim)},` : sql.fragment``} freed AS (
      UPDATE solver_slots sl SET attempt_id = NULL
      FROM closed
      WHERE (sl.solver_id, sl.task_type, sl.model_name, sl.slot) = (closed.solver_id, closed.task_type, closed.model_name, closed.slot)
        AND sl.attempt_id = closed.attempt_id
    ), counted AS (
      UPDATE solver_stats s SET
        attempts = s.attempts + 1,
        completed = s.completed + ${succeeded ? 1 : 0},
        failed = s.failed + ${failed ? 1 : 0},
        total_latency_ms = s.total_latency_ms + ${succeeded ? sql.fragment`closed.latency_ms` : sql.fragment`0`}
      FROM closed WHERE s.solver_id = closed.solver_id
    ), ${recordOutcomeStep(counts, claim ? claimFailures : undefined)}, requeued AS (
      UPDATE tasks t SET status = ${stateValue('queued')}, solver_id = NULL, updated_at = now()
      FROM closed WHERE ${!succeeded} AND t.task_id = closed.task_id AND t.status = ${stateValue('assigned')} AND t.solver_id = closed.solver_id
    )
    SELECT EXISTS (SELECT 1 FROM closed) AS closed, (SELECT task_type FROM closed) AS "taskType",
           EXISTS (SELECT 1 FROM task_queue q JOIN closed ON q.task_type = closed.task_type) AS waiting,
           -- Read, so that the announcement is made: the workers start the canary once this commits.
           EXISTS (SELECT 1 FROM canary_due) AS "canaryDue",
           ${claim ? sql.fragment`(SELECT verdict FROM claim)` : sql.fragment`NULL::text`} AS "targetVerdict"`);
}

const ClosingRow = z.object({
  closed: z.boolean(),
  taskType: z.string().nullable(),
  waiting: z.boolean(),
  canaryDue: z.boolean(),
  targetVerdict: z.enum(TARGET_FAILURE_VERDICTS).nullable(),
});
type Closing = z.infer<typeof ClosingRow>;

/** Freed slots of these closings go to waiting tasks, in the transaction that freed them. */
async function handOnFreed(tx: Runner, closings: { closed: boolean; taskType: string | null; waiting: boolean }[]): Promise<FreedSlots> {
  const freed = closings.flatMap((c) => (c.closed && c.taskType ? [c.taskType] : []));
  const waiting = closings.flatMap((c) => (c.closed && c.waiting && c.taskType ? [c.taskType] : []));
  const handoffs = waiting.length > 0 ? await handOnSlots(tx, waiting, { knownWaiting: true, inTransaction: true }) : [];
  return { freed, handoffs };
}

interface FreedSlots {
  /** Task types of the slots freed. */
  freed: string[];
  handoffs: Handoff[];
}

/**
 * After the commit that freed slots without handing any: a task queued meanwhile could not see them
 * while they were being freed (matching.ts, handOnSlots).
 */
async function afterCommit(db: Runner, { freed, handoffs }: FreedSlots): Promise<Handoff[]> {
  if (freed.length === 0 || handoffs.length > 0) return recordHandoffsCommitted(handoffs);
  return handOnSlots(db, freed);
}

/** How an attempt ended. */
export interface AttemptEnd {
  attemptId: string;
  outcome: EndedAttemptOutcome;
  error?: ErrorBody;
  /** The solver's claim that the target failed, examined (src/trust/target-failures.ts). */
  claim?: TargetClaim;
}

/**
 * Ends an attempt once (`closed`) and hands its slot to the oldest waiting task it fits. `targetVerdict`:
 * how its claim that the target failed was judged, when it made one.
 */
export async function closeAttempt(db: Db, input: AttemptEnd): Promise<{ closed: boolean; handoffs: Handoff[]; targetVerdict: TargetFailureVerdict | null }> {
  const { closed, targetVerdict, ...freed } = await db.transaction(async (tx) => {
    const closing = await closeAttemptIn(tx, input);
    return { closed: closing.closed, targetVerdict: closing.targetVerdict, ...(await handOnFreed(tx, [closing])) };
  });
  return { closed, targetVerdict, handoffs: await afterCommit(db, freed) };
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
export type FinishOutcome = Finished | { applied: false; status: ActiveState; attemptClosed: true; handoffs?: Handoff[]; webhooks?: DueDelivery[] };
/**
 * `handoffs`, when there are any: the slots its attempts freed, handed to waiting tasks whose workflows
 * are to be told. `webhooks`, when there are any: the deliveries written, whose first attempt is the
 * caller's to make (WebhookSender).
 */
export type Finished = { applied: boolean; status: TerminalState; attemptClosed?: undefined; handoffs?: Handoff[]; webhooks?: DueDelivery[] };

/**
 * What a finishing transaction notes for after its commit: the task's type (for the count of finished
 * tasks), the webhook deliveries it wrote and the slots its attempts freed.
 */
export interface Finishing {
  type: string;
  webhooks: DueDelivery[];
  freed: FreedSlots;
}

export const startFinishing = (): Finishing => ({ type: '', webhooks: [], freed: { freed: [], handoffs: [] } });

/**
 * After the commit of a finishing transaction (the task engine's, src/tasks/finish.ts): counts the
 * finished task and hands on freed slots no waiting task could see; returns the outcome with its
 * handoffs and webhook deliveries.
 */
export async function afterFinishing<T extends FinishOutcome>(db: Db, outcome: T, finishing: Finishing): Promise<T> {
  // Counted once its transaction has committed; `applied` is true exactly once per task.
  if (outcome.applied) recordTaskFinished(finishing.type, outcome.status as TerminalState);
  const handoffs = await afterCommit(db, finishing.freed);
  return { ...outcome, ...(handoffs.length > 0 ? { handoffs } : {}), ...(finishing.webhooks.length > 0 ? { webhooks: finishing.webhooks } : {}) };
}

/** Closes attempts of a finishing task and hands their slots on, noting both in `freed`. */
async function closeAndHandOn(tx: Runner, attempts: AttemptEnd[], freed: FreedSlots): Promise<boolean[]> {
  const closings = [];
  for (const attempt of attempts) closings.push(await closeAttemptIn(tx, attempt));
  const handed = await handOnFreed(tx, closings);
  freed.freed.push(...handed.freed);
  freed.handoffs.push(...handed.handoffs);
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
 * In the task engine's finishing transaction: locks the task row, prices the result, closes its attempt
 * (or an admin's completion closes the open ones), scans a web result and finishes the row with it.
 * Settlement (settleCompletedIn) and the trust reactions follow in the same transaction.
 */
export async function completeTaskIn(tx: DatabaseTransactionConnection, taskId: string, completion: Completion, finishing: Finishing): Promise<Completing> {
  const billedTokens = completion.kind === 'attempt' ? completion.billed : undefined;
  // A reported total below the billed counts is billed as reported: prompt tokens first, then completion.
  const billed = billedTokens ?? { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
  const chargedPrompt = Math.min(billed.prompt_tokens, billed.total_tokens);
  const charged = { prompt: chargedPrompt, completion: Math.min(billed.completion_tokens, billed.total_tokens - chargedPrompt) };
  // The task row is locked first: completions of one task (solver, admin, timeout) take turns here.
  // per_request: the matched price; per_token (chat only): min_price_points + prompt rate × billed
  // prompt_tokens / 1000 + completion rate × billed completion_tokens / 1000 (an attempt from before the
  // rates: marginal_cost × billed total_tokens / 1000), which settle caps at the hold. Billed is the
  // smaller of the solver's report and the bound of what the service counted; a chat not metered bills
  // no tokens. A per_token offer of another task type (refused at registration) is charged its
  // min_price_points. Exact NUMERIC arithmetic.
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
      CASE WHEN ta.billing_type = 'per_token' AND t.task_type = ANY(${sql.array([...TOKEN_BILLED_TASK_TYPES], 'text')})
        THEN ta.price_points + CASE WHEN ta.prompt_cost IS NULL THEN ta.marginal_cost * ${billed.total_tokens}::numeric / 1000
          ELSE (ta.prompt_cost * ${charged.prompt}::numeric + ta.completion_cost * ${charged.completion}::numeric) / 1000 END
        ELSE ta.price_points
      END::text AS price
    FROM tasks t JOIN accounts a USING (account_id)
      LEFT JOIN task_attempts ta ON ta.task_id = t.task_id AND ta.attempt_id = ${completion.kind === 'attempt' ? completion.attemptId : null}
    WHERE t.task_id = ${taskId} FOR UPDATE OF t`);
  finishing.type = task.task_type;
  if (isTerminalState(task.status)) return { kind: 'finished_already', status: task.status };
  let solverId: string;
  let price: string;
  if (completion.kind === 'attempt') {
    if (!task.solver_id || !task.price) throw new Error(`attempt ${completion.attemptId} of task ${taskId} does not exist`);
    // Only an open attempt may complete the task; closing it is the guard (once, under its row lock).
    const [closed] = await closeAndHandOn(tx, [{ attemptId: completion.attemptId, outcome: 'completed' }], finishing.freed);
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
    await closeAndHandOn(tx, open.map((attemptId) => ({ attemptId, outcome: 'cancelled' as const })), finishing.freed);
  }
  // Web results are scanned once, where they are stored, so polling, the convenience responses and the
  // scrape endpoint all serve the same verdict (the account's setting when the result arrived).
  // A chat's stored result shows the usage it was billed for.
  let result = billedTokens ? { ...completion.result, usage: billedTokens } : completion.result;
  if (task.prompt_safety_scan && (WEB_TASK_TYPES as readonly string[]).includes(task.task_type)) result = withSafetyVerdict(result);
  // The row is finished before the settlement, so that the balance rows the settlement locks (the
  // client's, which a new task of the same account waits for, and the platform's, which every settlement
  // takes) are held for its one statement and the commit only.
  finishing.webhooks = await finishRow(
    tx,
    taskId,
    'completed',
    sql.fragment`result = ${sql.jsonb({ ...result, ...completion.stored } as never)}, price_points = (SELECT ${cappedCharge(price)} FROM holds WHERE hold_id = ${taskId}), solver_id = ${solverId}, error = NULL`,
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
export async function settleCompletedIn(tx: DatabaseTransactionConnection, completed: Completed, feePercent: string): Promise<{ applied: boolean; charged: string; solverEarned: string }> {
  const settled = await settle(tx, { holdId: completed.taskId, price: completed.price, solverId: completed.solverId, feePercent });
  // The key's spend keeps the charge; the rest of the hold is given back to it as to the account.
  if (settled.applied && completed.keyLimited) await returnKeySpend(tx, completed.taskId, sql.fragment`${completed.maxPricePoints}::numeric - ${settled.charged}::numeric`);
  return { applied: settled.applied, charged: settled.charged, solverEarned: settled.solverEarned };
}

/** In the task engine's finishing transaction: ends a task without a result (failed or timed out) and releases its whole hold. */
export async function failTaskIn(tx: DatabaseTransactionConnection, taskId: string, failure: TaskFailure, finishing: Finishing): Promise<Finished> {
  const { status, task_type: taskType, key_limited: keyLimited } = await tx.one(sql.type(z.object({ status: TaskStateColumn, task_type: z.string(), key_limited: z.boolean() }))`
    SELECT status, task_type, key_spend_period IS NOT NULL AS key_limited FROM tasks WHERE task_id = ${taskId} FOR UPDATE`);
  finishing.type = taskType;
  if (isTerminalState(status)) return { applied: false, status };
  const open = await tx.anyFirst(sql.type(z.object({ attempt_id: z.string() }))`
    SELECT attempt_id FROM task_attempts WHERE task_id = ${taskId} AND ended_at IS NULL`);
  await closeAndHandOn(tx, open.map((attemptId) => ({ attemptId, outcome: 'cancelled' as const })), finishing.freed);
  // Finished first, so that the account's balance row is locked for the release's last statement and the commit only.
  finishing.webhooks = await finishRow(tx, taskId, failure.status, sql.fragment`error = ${sql.jsonb(failure.error)}, solver_id = NULL`);
  const released = await release(tx, { holdId: taskId });
  if (released.applied && keyLimited) await returnKeySpend(tx, taskId, sql.fragment`${released.released}::numeric`);
  return { applied: true, status: failure.status };
}

/** Tasks whose workflow start was never confirmed, older than `seconds`: a node died between insert and start. */
export async function findUnstartedTasks(db: Runner, seconds: number) {
  return db.any(sql.type(TaskRow)`
    SELECT ${TASK_COLUMNS} FROM tasks
    -- 'assigned' too: the first attempt may be matched with the task itself (the restarted workflow finds it).
    -- One whose solver accepted an attempt waits out that attempt's time as well: a crawl page's first
    -- attempt runs without a workflow (docs/crawl.md), and a workflow started while it still runs would
    -- send the page again.
    WHERE workflow_started_at IS NULL AND status = ANY(${ACTIVE})
      AND created_at < now() - make_interval(secs => ${seconds} + CASE WHEN EXISTS (
        SELECT 1 FROM task_attempts a WHERE a.task_id = tasks.task_id AND a.ended_at IS NULL AND a.accepted_at IS NOT NULL
      ) THEN timeout_seconds ELSE 0 END)
    ORDER BY created_at LIMIT 100`);
}

export async function taskCounts(db: Runner): Promise<Record<string, number>> {
  const rows = await db.any(sql.type(z.object({ status: z.string(), count: z.number() }))`
    SELECT status, count(*)::int AS count FROM tasks GROUP BY status`);
  return Object.fromEntries(rows.map((row) => [row.status, row.count]));
}
