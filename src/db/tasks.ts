import { sql, UniqueIntegrityConstraintViolationError, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { isTerminalState, WEB_TASK_TYPES, type AttemptOutcome, type TaskState } from '../schemas/domain';
import { withSafetyVerdict } from '../safety/results';
import { cappedCharge, holdSteps, insufficientBalance, isOverdraft, release, settle } from './ledger';
import type { Db } from './pool';
import { eligibleSolvers } from './solvers';

/**
 * Tasks and their attempts. The task row is the record clients poll; workflow activities keep it
 * current. Every function here is idempotent, because activities may run more than once.
 */

type Runner = CommonQueryMethods;

/** NOTIFY channel on which a task's terminal state is announced when its transaction commits. */
export const TASK_FINISHED_CHANNEL = 'task_finished';

/** Moves the task to its terminal state and announces it (delivered when the transaction commits). */
async function finishRow(tx: Runner, taskId: string, status: TaskState, fields: ReturnType<typeof sql.fragment>) {
  await tx.query(sql.unsafe`
    WITH finished AS (
      UPDATE tasks SET status = ${status}, ${fields}, updated_at = now(), completed_at = now()
      WHERE task_id = ${taskId}
      RETURNING task_id
    )
    SELECT pg_notify(${TASK_FINISHED_CHANNEL}, ${JSON.stringify({ task_id: taskId, status })}) FROM finished`);
}

export const attemptIdFor = (taskId: string, attemptNumber: number) => `${taskId}.a${attemptNumber}`;

const TaskRow = z.object({
  task_id: z.string(),
  account_id: z.string(),
  task_type: z.string(),
  status: z.enum(['queued', 'assigned', 'completed', 'failed', 'timed_out']),
  payload: z.record(z.any()),
  max_price_points: z.string(),
  price_points: z.string().nullable(),
  timeout_seconds: z.number(),
  solver_id: z.string().nullable(),
  result: z.record(z.any()).nullable(),
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

const TASK_COLUMNS = sql.fragment`
  task_id, account_id, task_type, status, payload, trim_scale(max_price_points)::text AS max_price_points,
  trim_scale(price_points)::text AS price_points, timeout_seconds, solver_id, result, error, workflow_id,
  created_at, updated_at, completed_at`;

export interface TaskRecord extends Omit<TaskRow, 'account_id'> {
  attempts: { solver_id: string; started_at: string; ended_at: string | null; outcome: string }[];
}

export interface NewTask {
  taskId: string;
  accountId: string;
  taskType: string;
  payload: Record<string, unknown>;
  maxPricePoints: string;
  /** The request set (or could have set) max_price_points: a 402 then says it may lower it. */
  priceFromRequest?: boolean;
  timeoutSeconds: number;
  workflowId: string;
  idempotencyKey?: string;
  /**
   * Match the first attempt in the same statement (chat: among these strong-tier models), so the
   * workflow can dispatch at once. Without a solver free now, the workflow matches later as usual; with
   * none online at all, `unavailable` (when given) is thrown and nothing is created.
   */
  match?: { strongModels?: string[]; unavailable?: () => Error };
}

/**
 * Inserts the task, matches its first attempt and holds its maximum price in one statement, so a task
 * exists only with its hold and the locks it takes (the solver's capability row, then the client's
 * balance row, in the order settlement takes them) are held for one statement, not for a transaction's
 * round trips. With an idempotency key already used by this account, returns that earlier task instead.
 */
export async function createTaskWithHold(db: Db, task: NewTask): Promise<{ task: TaskRow; created: boolean; firstAssignment: Assignment | null }> {
  const attemptId = attemptIdFor(task.taskId, 1);
  const requireOnline = Boolean(task.match?.unavailable);
  const eligible = eligibleSolvers(task.taskType, { strongModels: task.match?.strongModels });
  const hasBalance = sql.fragment`EXISTS (SELECT 1 FROM balances WHERE account_id = ${task.accountId})`;
  const row = await db
    .one(sql.type(CreatedRow)`
      WITH online AS (
        SELECT count(DISTINCT c.solver_id)::int AS n ${eligible}
      ), ${reservationSteps({
        attemptId,
        taskId: task.taskId,
        attemptNumber: 1,
        taskType: task.taskType,
        maxPricePoints: task.maxPricePoints,
        excludedSolverIds: [],
        strongModels: task.match?.strongModels,
        onlyIf: task.match ? hasBalance : sql.fragment`false`,
      })}, inserted AS (
        INSERT INTO tasks (task_id, account_id, task_type, payload, max_price_points, timeout_seconds, workflow_id, idempotency_key, status, solver_id)
        SELECT ${task.taskId}, ${task.accountId}, ${task.taskType}, ${sql.jsonb(task.payload as never)}, ${task.maxPricePoints}::numeric,
               ${task.timeoutSeconds}, ${task.workflowId}, ${task.idempotencyKey ?? null},
               CASE WHEN r.solver_id IS NULL THEN 'queued' ELSE 'assigned' END, r.solver_id
        FROM (SELECT 1) one LEFT JOIN reserved r ON true
        -- With no eligible solver online at all, nothing is created (the caller answers 402/503).
        WHERE ${hasBalance} AND (r.solver_id IS NOT NULL OR NOT ${requireOnline} OR (SELECT n FROM online) > 0)
        RETURNING ${TASK_COLUMNS}
      ), ${holdSteps(sql.fragment`SELECT task_id AS hold_id FROM inserted`, task.accountId, task.maxPricePoints)}
      -- The count of solvers online is needed (and taken) only when nothing was created.
      SELECT t.*, t.task_id IS NOT NULL AS inserted, CASE WHEN t.task_id IS NULL THEN (SELECT n FROM online) ELSE 0 END AS online,
             (SELECT row_to_json(x) FROM (SELECT ${CANDIDATE_COLUMNS} FROM reserved) x) AS candidate
      FROM (SELECT 1) one LEFT JOIN inserted t ON true`)
    .catch((error) => {
      if (isOverdraft(error)) throw insufficientBalance(task.maxPricePoints, task.priceFromRequest);
      if (error instanceof UniqueIntegrityConstraintViolationError && error.constraint === 'tasks_idempotency_idx') return null;
      throw error;
    });
  if (!row) {
    // The account used this idempotency key before: that task is the answer (the statement created nothing).
    const existing = await db.one(sql.type(TaskRow)`
      SELECT ${TASK_COLUMNS} FROM tasks WHERE account_id = ${task.accountId} AND idempotency_key = ${task.idempotencyKey ?? null}`);
    return { task: existing, created: false, firstAssignment: null };
  }
  if (!row.inserted) {
    if (row.online === 0 && task.match?.unavailable) throw task.match.unavailable();
    // No balance row: the account does not exist.
    throw insufficientBalance(task.maxPricePoints, task.priceFromRequest);
  }
  return { task: TaskRow.parse(row), created: true, firstAssignment: row.candidate ? toAssignment(attemptId, row.candidate) : null };
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
  const row = await db.maybeOne(sql.type(TaskRow.extend({ attempts: z.array(AttemptRow) }))`
    SELECT ${TASK_COLUMNS},
      COALESCE((SELECT json_agg(json_build_object('attempt_id', ta.attempt_id, 'solver_id', ta.solver_id, 'started_at', ${iso('started_at')},
                                                  'ended_at', ${iso('ended_at')}, 'outcome', ta.outcome) ORDER BY ta.attempt_number)
                FROM task_attempts ta WHERE ta.task_id = tasks.task_id), '[]') AS attempts
    FROM tasks WHERE task_id = ${taskId}`);
  if (!row || (accountId !== undefined && row.account_id !== accountId)) return null;
  const { account_id: _account, attempts, ...record } = row;
  return { ...record, attempts: attempts.map(({ attempt_id: _id, ...attempt }) => attempt) };
}

export interface Assignment {
  attemptId: string;
  solverId: string;
  nodeId: string;
  pricePoints: string;
  billingType: string;
  marginalCost: string;
  modelName: string;
}

const CandidateRow = z.object({
  solver_id: z.string(),
  node_id: z.string(),
  model_name: z.string(),
  min_price_points: z.string(),
  billing_type: z.string(),
  marginal_cost: z.string(),
});

/** What creating a task returns: the task's columns when it was inserted, the first attempt's solver, if any, and (when nothing was inserted) how many eligible solvers are online. */
const CreatedRow = z
  .object({ inserted: z.boolean(), online: z.number(), candidate: CandidateRow.nullable() })
  .passthrough();

const CANDIDATE_COLUMNS = sql.fragment`
  solver_id, node_id, model_name, trim_scale(min_price_points)::text AS min_price_points, billing_type, trim_scale(marginal_cost)::text AS marginal_cost`;

/** What matching one attempt needs. */
export interface ReserveAttemptInput {
  taskId: string;
  attemptNumber: number;
  taskType: string;
  maxPricePoints: string;
  excludedSolverIds: string[];
  /** Still eligible, but offered only when no other solver fits (e.g. an attempt lost with its node). */
  lastResortSolverIds?: string[];
  strongModels?: string[];
}

interface ReservationInput extends ReserveAttemptInput {
  attemptId: string;
  /** A further condition on reserving at all. */
  onlyIf: ReturnType<typeof sql.fragment>;
}

// Free slots of one capability that a reservation looks at, lowest first: more than the reservations
// likely under way on one capability at once (one per database connection). One that finds them all
// being taken goes to the next capability, or to the workflow's next try.
const FREE_SLOTS_CONSIDERED = 32;

/**
 * The matching rule, as CTEs for one statement: `pick` takes a free slot of the best eligible capability
 * (cheapest first; ties to the better record, then the least loaded, i.e. the lowest free slot;
 * last-resort solvers last), skipping slots another reservation is taking, `reserved` marks it taken,
 * and `attempt` records the attempt. Concurrent reservations neither wait for each other nor exceed
 * a solver's limit: slots above max_concurrent are never offered, and while attempts run in such slots
 * (the limit was lowered under them) the capability is offered none.
 */
function reservationSteps(input: ReservationInput) {
  const eligible = eligibleSolvers(input.taskType, { strongModels: input.strongModels, excludedSolverIds: input.excludedSolverIds });
  return sql.fragment`
    ranked AS MATERIALIZED (
      -- The eligible capabilities with what orders them, once each (not once per slot).
      SELECT c.solver_id, c.task_type, c.model_name, sc.node_id, c.min_price_points, c.billing_type, c.marginal_cost, c.max_concurrent,
             c.solver_id = ANY(${sql.array(input.lastResortSolverIds ?? [], 'text')}) AS last_resort,
             (COALESCE(s.completed, 0) + 1)::numeric / (COALESCE(s.attempts, 0) + 2) AS record,
             COALESCE(s.total_latency_ms::numeric / NULLIF(s.completed, 0), 0) AS latency
      ${eligible}
        AND ${input.onlyIf}
        AND c.min_price_points <= ${input.maxPricePoints}::numeric
        -- Attempts still running above a lowered max_concurrent: nothing more until they have ended.
        AND NOT EXISTS (
          SELECT 1 FROM solver_slots above
          WHERE (above.solver_id, above.task_type, above.model_name) = (c.solver_id, c.task_type, c.model_name)
            AND above.slot > c.max_concurrent AND above.attempt_id IS NOT NULL)
    ), pick AS (
      SELECT e.solver_id, e.task_type, e.model_name, e.node_id, e.min_price_points, e.billing_type, e.marginal_cost, sl.slot
      FROM ranked e
      -- Its lowest free slots; the lowest is also how loaded it is.
      CROSS JOIN LATERAL (
        SELECT f.ctid FROM solver_slots f
        WHERE (f.solver_id, f.task_type, f.model_name) = (e.solver_id, e.task_type, e.model_name) AND f.attempt_id IS NULL AND f.slot <= e.max_concurrent
        ORDER BY f.slot LIMIT ${FREE_SLOTS_CONSIDERED}
      ) free
      -- Locked by its row address (the planner cannot misjudge that join); still free once locked.
      JOIN solver_slots sl ON sl.ctid = free.ctid
      WHERE sl.attempt_id IS NULL
      ORDER BY e.last_resort ASC, e.min_price_points ASC, e.record DESC, e.latency ASC, sl.slot ASC
      LIMIT 1
      FOR UPDATE OF sl SKIP LOCKED
    ), reserved AS (
      UPDATE solver_slots sl SET attempt_id = ${input.attemptId}
      FROM pick p
      WHERE (sl.solver_id, sl.task_type, sl.model_name, sl.slot) = (p.solver_id, p.task_type, p.model_name, p.slot)
      RETURNING p.*
    ), attempt AS (
      INSERT INTO task_attempts
        (attempt_id, task_id, attempt_number, solver_id, task_type, model_name, node_id, price_points, billing_type, marginal_cost, slot)
      SELECT ${input.attemptId}, ${input.taskId}, ${input.attemptNumber}, solver_id, task_type, model_name, node_id, min_price_points, billing_type, marginal_cost, slot
      FROM reserved
    )`;
}

/**
 * Picks a solver for attempt `attemptNumber` and reserves one of its concurrency slots.
 * Eligible: online on a live node, offers the task type at a price within the task's maximum, below
 * max_concurrent, not tried before. Cheapest first; ties to the better record, then the least loaded.
 * Returns the same assignment when called again for the same attempt.
 */
export async function reserveAttempt(
  db: Runner,
  input: ReserveAttemptInput,
): Promise<{ assignment: Assignment } | { assignment: null; untriedOnline: number; finishedAs: TaskState | null }> {
  const attemptId = attemptIdFor(input.taskId, input.attemptNumber);
  // One statement, so one round trip and atomic without a transaction.
  const row = await db.maybeOne(sql.type(CandidateRow)`
    WITH existing AS (
      SELECT solver_id, node_id, model_name, price_points AS min_price_points, billing_type, marginal_cost
      FROM task_attempts WHERE attempt_id = ${attemptId}
    ), ${reservationSteps({
      ...input,
      attemptId,
      onlyIf: sql.fragment`NOT EXISTS (SELECT 1 FROM existing)
        AND EXISTS (SELECT 1 FROM tasks WHERE task_id = ${input.taskId} AND status IN ('queued', 'assigned'))`,
    })}, assigned AS (
      UPDATE tasks SET status = 'assigned', solver_id = r.solver_id, updated_at = now()
      FROM reserved r WHERE task_id = ${input.taskId} AND status IN ('queued', 'assigned')
    )
    SELECT ${CANDIDATE_COLUMNS}
    FROM (SELECT * FROM existing UNION ALL SELECT solver_id, node_id, model_name, min_price_points, billing_type, marginal_cost FROM reserved) chosen`);
  if (row) return { assignment: toAssignment(attemptId, row) };
  const eligible = eligibleSolvers(input.taskType, { strongModels: input.strongModels, excludedSolverIds: input.excludedSolverIds });
  const { count, status } = await db.one(sql.type(z.object({ count: z.number(), status: z.string().nullable() }))`
    SELECT (SELECT count(DISTINCT c.solver_id)::int ${eligible}) AS count, (SELECT status FROM tasks WHERE task_id = ${input.taskId}) AS status`);
  const finishedAs = status && isTerminalState(status) ? status : null;
  return { assignment: null, untriedOnline: count, finishedAs };
}

function toAssignment(attemptId: string, row: z.infer<typeof CandidateRow>): Assignment {
  return {
    attemptId,
    solverId: row.solver_id,
    nodeId: row.node_id,
    pricePoints: row.min_price_points,
    billingType: row.billing_type,
    marginalCost: row.marginal_cost,
    modelName: row.model_name,
  };
}

export async function markAttemptAccepted(db: Runner, attemptId: string): Promise<void> {
  await db.query(sql.unsafe`UPDATE task_attempts SET accepted_at = now() WHERE attempt_id = ${attemptId} AND accepted_at IS NULL`);
}

/**
 * Ends an attempt once: frees the solver's slot, counts it in the solver's record and, unless the task
 * has finished, puts the task back to queued for reassignment.
 */
async function closeAttemptIn(tx: Runner, input: { attemptId: string; outcome: AttemptOutcome; error?: { type: string; message: string } }) {
  const succeeded = input.outcome === 'completed';
  const failed = !succeeded && input.outcome !== 'cancelled';
  // One statement: the attempt ends once (ended_at IS NULL), and only then are the slot, the stats
  // and the task's state touched.
  const closed = await tx.oneFirst(sql.type(z.object({ closed: z.number() }))`
    WITH closed AS (
      UPDATE task_attempts SET ended_at = now(), outcome = ${input.outcome}, error = ${input.error ? sql.jsonb(input.error) : null}
      WHERE attempt_id = ${input.attemptId} AND ended_at IS NULL
      RETURNING attempt_id, solver_id, task_type, model_name, slot, task_id, (extract(epoch FROM (now() - started_at)) * 1000)::int AS latency_ms
    ), freed AS (
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
    ), requeued AS (
      UPDATE tasks t SET status = 'queued', solver_id = NULL, updated_at = now()
      FROM closed WHERE ${!succeeded} AND t.task_id = closed.task_id AND t.status = 'assigned' AND t.solver_id = closed.solver_id
    )
    SELECT count(*)::int AS closed FROM closed`);
  return closed > 0;
}

export async function closeAttempt(db: Db, input: { attemptId: string; outcome: AttemptOutcome; error?: { type: string; message: string } }): Promise<boolean> {
  return closeAttemptIn(db, input);
}

export type Completion =
  /** A solver's validated result for its (still open) attempt. */
  | { kind: 'attempt'; attemptId: string; result: Record<string, unknown> }
  | { kind: 'admin'; solverId: string; result: Record<string, unknown> };

/**
 * Completes a task once: settles its hold (charge, solver pay less fee, release of the rest) and
 * records the result. A task already in a terminal state is left as it is; so is one whose attempt
 * ended meanwhile (`attemptClosed`: e.g. timed out and reassigned while its result was on the way).
 */
export async function completeTask(
  db: Db,
  input: { taskId: string; completion: Completion; feePercent: string },
): Promise<{ applied: boolean; status: TaskState; attemptClosed?: boolean }> {
  return db.transaction(async (tx) => {
    const { completion } = input;
    const usage = completion.kind === 'attempt' && isRecord(completion.result.usage) ? completion.result.usage : {};
    // The task row is locked first: completions of one task (solver, admin, timeout) take turns here.
    // per_request: the matched price; per_token: min_price_points + marginal_cost × total_tokens / 1000
    // (settle caps it at the hold). Exact NUMERIC arithmetic, from the usage the solver reported.
    const task = await tx.one(sql.type(
      z.object({ status: z.string(), max_price_points: z.string(), task_type: z.string(), prompt_safety_scan: z.boolean(), solver_id: z.string().nullable(), price: z.string().nullable() }),
    )`
      SELECT t.status, t.max_price_points::text AS max_price_points, t.task_type, a.prompt_safety_scan, ta.solver_id,
        CASE ta.billing_type
          WHEN 'per_token' THEN ta.price_points + ta.marginal_cost * COALESCE(
            (u.usage ->> 'total_tokens')::numeric,
            COALESCE((u.usage ->> 'prompt_tokens')::numeric, 0) + COALESCE((u.usage ->> 'completion_tokens')::numeric, 0)) / 1000
          ELSE ta.price_points
        END::text AS price
      FROM tasks t JOIN accounts a USING (account_id)
        CROSS JOIN (SELECT ${sql.jsonb(usage as never)} AS usage) u
        LEFT JOIN task_attempts ta ON ta.task_id = t.task_id AND ta.attempt_id = ${completion.kind === 'attempt' ? completion.attemptId : null}
      WHERE t.task_id = ${input.taskId} FOR UPDATE OF t`);
    if (isTerminalState(task.status)) return { applied: false, status: task.status };
    let solverId: string;
    let price: string;
    if (completion.kind === 'attempt') {
      if (!task.solver_id || !task.price) throw new Error(`attempt ${completion.attemptId} of task ${input.taskId} does not exist`);
      // Only an open attempt may complete the task; closing it is the guard (once, under its row lock).
      if (!(await closeAttemptIn(tx, { attemptId: completion.attemptId, outcome: 'completed' }))) {
        return { applied: false, status: task.status as TaskState, attemptClosed: true };
      }
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
        SELECT attempt_id FROM task_attempts WHERE task_id = ${input.taskId} AND ended_at IS NULL`);
      for (const attemptId of open) await closeAttemptIn(tx, { attemptId, outcome: 'cancelled' });
    }
    // Web results are scanned once, where they are stored, so polling, the convenience responses and the
    // scrape endpoint all serve the same verdict (the account's setting when the result arrived).
    let result = completion.result;
    if (task.prompt_safety_scan && (WEB_TASK_TYPES as readonly string[]).includes(task.task_type)) result = withSafetyVerdict(result);
    // The row is finished before the settlement, so that the balance rows the settlement locks (the
    // client's, which a new task of the same account waits for, and the platform's, which every settlement
    // takes) are held for its one statement and the commit only.
    await finishRow(
      tx,
      input.taskId,
      'completed',
      sql.fragment`result = ${sql.jsonb(result as never)}, price_points = (SELECT ${cappedCharge(price)} FROM holds WHERE hold_id = ${input.taskId}), solver_id = ${solverId}, error = NULL`,
    );
    await settle(tx, { holdId: input.taskId, price, solverId, feePercent: input.feePercent });
    return { applied: true, status: 'completed' as const };
  });
}

const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value);

/** Ends a task without a result (failed or timed out): releases its whole hold, once. */
export async function finishTaskWithoutResult(
  db: Db,
  input: { taskId: string; status: 'failed' | 'timed_out'; error: { type: string; message: string } },
): Promise<{ applied: boolean; status: TaskState }> {
  return db.transaction(async (tx) => {
    const status = await tx.oneFirst(sql.type(z.object({ status: z.string() }))`SELECT status FROM tasks WHERE task_id = ${input.taskId} FOR UPDATE`);
    if (isTerminalState(status)) return { applied: false, status };
    const open = await tx.anyFirst(sql.type(z.object({ attempt_id: z.string() }))`
      SELECT attempt_id FROM task_attempts WHERE task_id = ${input.taskId} AND ended_at IS NULL`);
    for (const attemptId of open) await closeAttemptIn(tx, { attemptId, outcome: 'cancelled' });
    // Finished first, so that the account's balance row is locked for the release's last statement and the commit only.
    await finishRow(tx, input.taskId, input.status, sql.fragment`error = ${sql.jsonb(input.error)}, solver_id = NULL`);
    await release(tx, { holdId: input.taskId });
    return { applied: true, status: input.status };
  });
}

/** Tasks whose workflow start was never confirmed, older than `seconds`: a node died between insert and start. */
export async function findUnstartedTasks(db: Runner, seconds: number) {
  return db.any(sql.type(TaskRow)`
    SELECT ${TASK_COLUMNS} FROM tasks
    -- 'assigned' too: the first attempt may be matched with the task itself (the restarted workflow finds it).
    WHERE workflow_started_at IS NULL AND status IN ('queued', 'assigned') AND created_at < now() - make_interval(secs => ${seconds})
    ORDER BY created_at LIMIT 100`);
}

export async function taskCounts(db: Runner): Promise<Record<string, number>> {
  const rows = await db.any(sql.type(z.object({ status: z.string(), count: z.number() }))`
    SELECT status, count(*)::int AS count FROM tasks GROUP BY status`);
  return Object.fromEntries(rows.map((row) => [row.status, row.count]));
}
