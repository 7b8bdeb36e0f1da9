import { sql, UniqueIntegrityConstraintViolationError, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import type { Assignment, TaskPurpose } from '../../contract/lifecycle';
import type { RoutingSort } from '../../schemas/domain';
import { isKeySpendLimitReached, keySpendLookup, keySpendOf, keySpendStep, type KeySpend } from '../key-spend';
import { holdSteps, isOverdraft } from '../ledger';
import {
  ACTIVE,
  attemptIdFor,
  CANDIDATE_COLUMNS,
  CandidateRow,
  clientWaiting,
  eligibleSolvers,
  estimatedPrice,
  figuresOf,
  FIGURE_COLUMNS,
  handOnSlots,
  QUEUE_COLUMNS,
  queueValues,
  reservationSteps,
  stateValue,
  toAssignment,
  toldOnly,
  UNMEASURED_LATENCY_MS,
  withinLimits,
  type Handoff,
  type RequestFigures,
} from '../matching';
import type { TrustPolicy } from '../reputation';
import { keyInWindow, releaseIdempotencyKeyIfExpired } from '../retention';
import { accountWebhookStep } from '../webhooks';
import { TASK_COLUMNS, TaskRow } from './records';

/**
 * Creating tasks: a task exists only with its hold, matched or queued in the statement that inserts it,
 * once per idempotency key. Every function here is idempotent, because activities may run more than once.
 */

type Runner = CommonQueryMethods;

/**
 * An Idempotency-Key as a task stores it, and the fingerprint of the request that sent it
 * (src/http/idempotency.ts).
 */
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
  /**
   * The request's Idempotency-Key (as this task stores it) and the fingerprint of the request it came with.
   * `expiry: 'purge'` (a crawl page's key, made by the service): a key past its window is not released
   * first, which costs a statement per task; the retention purge releases it, and until then the key
   * names its first task, as a page taken up again wants.
   */
  idempotency?: Idempotency & { expiry?: 'purge' };
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
  /** What the task is for: `client` unless it is a platform task (docs/trust.md). */
  purpose?: TaskPurpose;
  /**
   * A platform task's claim, run in the same statement: CTEs, one of them named `claimed`, that return a
   * row while the task is still due (its canary inserted, its run claimed); with none, nothing is
   * created (`not_claimed`). Its workflow creates it, so it is marked started.
   */
  claim?: Fragment;
}

type Fragment = ReturnType<typeof sql.fragment>;

// Retry-After of a refusal is at least this, and at most a minute.
const MIN_RETRY_AFTER_SECONDS = 1;
const MAX_RETRY_AFTER_SECONDS = 60;

const AdmissionRow = z.object({ ahead: z.number(), rate: z.coerce.number(), busy: z.boolean() });

/**
 * What creating a task returns: the task's columns when it was inserted, the first attempt's solver, if any, and
 * (when nothing was inserted) how many eligible solvers are online.
 */
const CreatedRow = z
  .object({
    inserted: z.boolean(),
    claimed: z.boolean(),
    online: z.number(),
    online_any_price: z.number(),
    candidate: CandidateRow.nullable(),
    queued: z.boolean(),
    admission: AdmissionRow.nullable(),
  })
  .passthrough();

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
export async function createTaskWithHold(
  db: Runner,
  policy: TrustPolicy,
  task: NewTask & { claim?: undefined },
): Promise<CreateTaskOutcome>;
export async function createTaskWithHold(
  db: Runner,
  policy: TrustPolicy,
  task: NewTask,
): Promise<CreateTaskOutcome | { kind: 'not_claimed' }>;
export async function createTaskWithHold(
  db: Runner,
  policy: TrustPolicy,
  task: NewTask,
): Promise<CreateTaskOutcome | { kind: 'not_claimed' }> {
  const attemptId = attemptIdFor(task.taskId, 1);
  const requireOnline = task.match?.requireOnline ?? false;
  const country = task.country ?? null;
  const eligible = eligibleSolvers(task.taskType, { policy, strongModels: task.match?.strongModels, country });
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
  // With figures, the hold (and the task's max_price_points) is the estimate of the offer matched now, or,
  // when the chat waits, the lowest estimate of the eligible offers within its limits: a later attempt or a
  // slot handed to it on a dearer offer raises it (reserveAttempt, handOnSlots). Under a key's spend
  // limit, which counts the first hold only, a waiting chat holds its maximum, as any offer may serve it.
  const waitingHold = task.keyId
    ? sql.fragment`CASE WHEN EXISTS (SELECT 1 FROM spend_key) THEN NULL ELSE (SELECT cheapest FROM online) END`
    : sql.fragment`(SELECT cheapest FROM online)`;
  const held = task.figures
    ? sql.fragment`(SELECT
      LEAST(${task.maxPricePoints}::numeric, COALESCE((SELECT estimated_price_points FROM reserved), ${waitingHold}, ${task.maxPricePoints}::numeric)))`
    : sql.fragment`${task.maxPricePoints}::numeric`;
  // With figures, being online counts only within the request's limits (a refusal names the limit).
  const online = task.figures
    ? sql.fragment`(count(DISTINCT c.solver_id) FILTER (WHERE ${withinLimits('c', figures, sql.fragment`${task.maxPricePoints}::numeric`)}))::int`
    : sql.fragment`count(DISTINCT c.solver_id)::int`;
  const claimed = task.claim ? sql.fragment`EXISTS (SELECT 1 FROM claimed)` : sql.fragment`true`;
  // A key older than its window names its task no more: this request starts a new one.
  if (task.idempotency && task.idempotency.expiry !== 'purge')
    await releaseIdempotencyKeyIfExpired(db, task.accountId, task.idempotency.key);
  const row = await db
    .one(
      sql.type(CreatedRow)`
      WITH
        ${task.claim ? sql.fragment`${task.claim},` : sql.fragment``} ${task.keyId ? sql.fragment`${keySpendLookup(task.keyId)},` : sql.fragment``} online AS (
        SELECT ${online} AS n, count(DISTINCT c.solver_id)::int AS any_price,
               ${task.figures ? sql.fragment`min(${estimatedPrice('c', figures)}) FILTER (WHERE ${withinLimits('c', figures, sql.fragment`${task.maxPricePoints}::numeric`)})` : sql.fragment`NULL::numeric`} AS cheapest
        ${eligible}
      ), admission AS (
        -- Asked only when no slot was free: how many wait, how many tasks per second the online
        -- solvers finish (each slot at its capability's measured latency), and whether to refuse.
        SELECT ahead, rate, (${maxQueued}::int IS NOT NULL AND ahead >= ${maxQueued}::int) OR (rate > 0 AND (ahead + 1) / rate > ${task.timeoutSeconds}) AS busy
        FROM (
          SELECT (SELECT count(*)::int FROM task_queue q WHERE q.task_type = ${task.taskType} AND ${clientWaiting('q')}) AS ahead,
                 (SELECT COALESCE(sum(c.max_concurrent * 1000.0 / GREATEST(COALESCE(s.total_latency_ms::numeric / NULLIF(s.completed, 0),
                   ${UNMEASURED_LATENCY_MS}), 1)), 0)
                  ${eligible}) AS rate
        ) x
      ), ${reservationSteps({
        ...entry,
        policy,
        attemptId,
        onlyIf: task.match ? hasBalance : sql.fragment`false`,
        arrival: sql.fragment`now()`,
        sort: sql.fragment`${entry.routingSort}::text`,
        figures,
        country,
      })}, inserted AS (
        INSERT INTO tasks (task_id, account_id, task_type, payload, max_price_points, timeout_seconds, workflow_id, idempotency_key,
          request_fingerprint, status, solver_id, key_id, key_spend_period, routing_sort, country,
                           ${FIGURE_COLUMNS}, price_cap_points, purpose, workflow_started_at)
        SELECT ${task.taskId}, ${task.accountId}, ${task.taskType}, ${sql.jsonb(task.payload as never)}, ${held},
               ${task.timeoutSeconds}, ${task.workflowId}, ${task.idempotency?.key ?? null}, ${task.idempotency?.fingerprint ?? null},
               CASE WHEN r.solver_id IS NULL THEN ${stateValue('queued')} ELSE ${stateValue('assigned')} END, r.solver_id,
               ${task.keyId ?? null}, ${task.keyId ? sql.fragment`(SELECT period_start FROM spend_key)` : sql.fragment`NULL::date`}, ${entry.routingSort}::text,
               ${country}::text,
               ${figures.promptTokens}, ${figures.completionTokens}, ${figures.maxPricePrompt}, ${figures.maxPriceCompletion}, ${figures.maxPriceRequest},
               ${task.figures ? task.maxPricePoints : null}::numeric, ${task.purpose ?? ('client' satisfies TaskPurpose)},
               ${task.claim ? sql.fragment`now()` : sql.fragment`NULL::timestamptz`}
        FROM (SELECT 1) one LEFT JOIN reserved r ON true
        -- With no eligible solver online at all, nothing is created (the caller answers 402/503).
        WHERE ${hasBalance} AND ${claimed} AND (r.solver_id IS NOT NULL OR NOT ${requireOnline} OR (SELECT n FROM online) > 0)
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
      SELECT t.*, t.task_id IS NOT NULL AS inserted, ${claimed} AS claimed, CASE WHEN t.task_id IS NULL THEN (SELECT n FROM online) ELSE 0 END AS online,
             CASE WHEN t.task_id IS NULL THEN (SELECT any_price FROM online) ELSE 0 END AS online_any_price,
             (SELECT row_to_json(x) FROM (SELECT ${CANDIDATE_COLUMNS} FROM reserved) x) AS candidate,
             EXISTS (SELECT 1 FROM queued) AS queued,
             CASE WHEN t.task_id IS NULL AND ${maxQueued !== null} THEN (SELECT row_to_json(a) FROM admission a) END AS admission
      FROM (SELECT 1) one LEFT JOIN inserted t ON true`,
    )
    .catch((error) => {
      if (isOverdraft(error)) return 'overdraft' as const;
      if (isKeySpendLimitReached(error)) return 'key_limit' as const;
      if (error instanceof UniqueIntegrityConstraintViolationError && error.constraint === 'tasks_idempotency_idx')
        return 'duplicate' as const;
      throw error;
    });
  if (row === 'overdraft') return { kind: 'insufficient_balance', requiredPoints: task.maxPricePoints };
  if (row === 'key_limit')
    return {
      kind: 'key_spend_limit_reached',
      requiredPoints: task.maxPricePoints,
      keyId: task.keyId!,
      limit: await keySpendOf(db, task.keyId!),
    };
  if (row === 'duplicate') {
    const { request_fingerprint: fingerprint, ...existing } = await db.one(sql.type(
      TaskRow.extend({ request_fingerprint: z.string().nullable() }),
    )`
      SELECT ${TASK_COLUMNS}, request_fingerprint FROM tasks WHERE account_id = ${task.accountId} AND idempotency_key = ${task.idempotency?.key ?? null}`);
    // A task from before fingerprints were stored has none: its type still tells another operation.
    if (
      (fingerprint ?? task.idempotency?.fingerprint) !== task.idempotency?.fingerprint ||
      existing.task_type !== task.taskType
    )
      return { kind: 'idempotency_key_reused' };
    return { kind: 'existing', task: existing };
  }
  if (!row.inserted) {
    if (!row.claimed) return { kind: 'not_claimed' };
    if (row.online === 0 && requireOnline) {
      if (row.online_any_price === 0 || !task.figures) return { kind: 'no_solver_online' };
      return {
        kind: 'no_solver_within_price',
        limit: await priceLimitMissed(
          db,
          policy,
          task.taskType,
          task.match?.strongModels,
          task.figures,
          task.maxPricePoints,
        ),
      };
    }
    if (row.admission?.busy)
      return {
        kind: 'solvers_busy',
        retryAfterSeconds: retryAfter(row.admission, maxQueued!, task.timeoutSeconds),
        waiting: row.admission.ahead,
      };
    // No balance row: the account does not exist.
    return { kind: 'insufficient_balance', requiredPoints: task.maxPricePoints };
  }
  const created = TaskRow.parse(row);
  if (!row.queued)
    return {
      kind: 'created',
      task: created,
      firstAssignment: row.candidate ? toAssignment(attemptId, row.candidate) : null,
      handoffs: [],
    };
  // Queued: a slot freed while this statement ran could not see it (docs/queue.md, "Who hands a slot on").
  const handoffs = await handOnSlots(db, policy, [task.taskType], { knownWaiting: true });
  const own = handoffs.find((handoff) => handoff.taskId === task.taskId);
  // A chat handed a dearer slot than it holds had its hold raised with it.
  const heldNow =
    own && task.figures
      ? await db.oneFirst(
          sql.type(
            z.object({ max_price_points: z.string() }),
          )`SELECT trim_scale(max_price_points)::text AS max_price_points FROM tasks WHERE task_id = ${task.taskId}`,
        )
      : created.max_price_points;
  return {
    kind: 'created',
    task: own
      ? { ...created, status: 'assigned', solver_id: own.assignment.solverId, max_price_points: heldNow }
      : created,
    firstAssignment: own?.assignment ?? null,
    handoffs: handoffs.map((handoff) => (handoff === own ? toldOnly(handoff) : handoff)),
  };
}

/** Which of a request's price limits keeps every online offer from it (`combined`: none alone does). */
export type PriceLimit = 'prompt' | 'completion' | 'request' | 'max_price_points' | 'combined';

async function priceLimitMissed(
  db: Runner,
  policy: TrustPolicy,
  taskType: string,
  strongModels: string[] | undefined,
  figures: RequestFigures,
  maxPricePoints: string,
): Promise<PriceLimit> {
  const only = (limit: Partial<RequestFigures>, maxPrice: string | null) =>
    sql.fragment`(count(*) FILTER (WHERE
      ${withinLimits('c', figuresOf({ ...figures, maxPricePrompt: null, maxPriceCompletion: null, maxPriceRequest: null, ...limit }), sql.fragment`${maxPrice}::numeric`)}))::int`;
  const none = { promptTokens: null, completionTokens: null };
  const row = await db.one(sql.type(
    z.object({ prompt: z.number(), completion: z.number(), request: z.number(), max_price_points: z.number() }),
  )`
    SELECT ${only({ ...none, maxPricePrompt: figures.maxPricePrompt }, null)} AS prompt,
           ${only({ ...none, maxPriceCompletion: figures.maxPriceCompletion }, null)} AS completion,
           ${only({ ...none, maxPriceRequest: figures.maxPriceRequest }, null)} AS request,
           ${only({}, maxPricePoints)} AS max_price_points
    ${eligibleSolvers(taskType, { policy, strongModels })}`);
  return (
    (['prompt', 'completion', 'request', 'max_price_points'] as const).find((limit) => row[limit] === 0) ?? 'combined'
  );
}

/**
 * Whether the account used any of these idempotency keys (as tasks store them) with a request other than
 * the one of `fingerprint`: a request making several tasks asks before it makes any.
 */
export async function idempotencyKeyReused(
  db: Runner,
  accountId: string,
  idempotency: { keys: string[]; fingerprint: string },
): Promise<boolean> {
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
  await db.query(
    sql.unsafe`UPDATE tasks SET workflow_started_at = now() WHERE task_id = ${taskId} AND workflow_started_at IS NULL`,
  );
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
