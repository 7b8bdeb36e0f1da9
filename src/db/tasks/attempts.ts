import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { recordAttemptReassigned } from '../../metrics/metrics';
import {
  ATTEMPT_OUTCOME_TABLE,
  isSolverAttempt,
  isTerminalState,
  TARGET_FAILURE_VERDICTS,
  type Assignment,
  type EndedAttemptOutcome,
  type ErrorBody,
  type TargetFailureVerdict,
  type TerminalState,
} from '../../contract/lifecycle';
import type { BilledUsage } from '../../schemas/domain';
import { HOLD_OPEN, raiseHoldSteps } from '../ledger';
import {
  ACTIVE,
  attemptIdFor,
  BEHIND_CLIENT_TASKS,
  CANDIDATE_COLUMNS,
  CandidateRow,
  chatCeiling,
  eligibleSolvers,
  figuresFrom,
  figuresIn,
  FIGURE_COLUMNS,
  handOnSlots,
  handOnSlotsIn,
  QUEUE_COLUMNS,
  queueValues,
  REASSIGNED,
  recordHandoffsCommitted,
  reservationSteps,
  stateValue,
  toAssignment,
  toldOnly,
  withinLimits,
  type Handoff,
  type ReserveAttemptInput,
} from '../matching';
import type { Db } from '../pool';
import { recordOutcomeStep, type TrustPolicy } from '../reputation';
import { claimFailures, judgeTargetClaimSteps, type TargetClaim } from '../target-claims';

/**
 * A task's attempts: a solver's slot reserved (or a place in the queue), accepted, and ended once, its
 * slot handed to the oldest waiting task it fits. Every function here is idempotent, because activities
 * may run more than once.
 */

type Runner = CommonQueryMethods;

/** What asking for an attempt's slot gave: a slot, or a place in the queue (or a task that has finished). */
export type Reservation =
  | { assignment: Assignment; handoffs?: Handoff[] }
  | {
      assignment: null;
      untriedOnline: number;
      finishedAs: TerminalState | null;
      queued?: boolean;
      handoffs?: Handoff[];
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
export async function reserveAttempt(
  db: Runner,
  policy: TrustPolicy,
  input: ReserveAttemptInput,
): Promise<Reservation> {
  const attemptId = attemptIdFor(input.taskId, input.attemptNumber);
  const entry = { ...input, lastResortSolverIds: input.lastResortSolverIds ?? [] };
  const neither = sql.fragment`NOT EXISTS (SELECT 1 FROM existing) AND NOT EXISTS (SELECT 1 FROM waiting)`;
  const ceiling = sql.fragment`COALESCE((SELECT ${chatCeiling('t')} FROM task t WHERE t.price_cap_points IS NOT NULL), ${input.maxPricePoints}::numeric)`;
  // One statement, so one round trip and atomic without a transaction.
  const row = await db.one(sql.type(
    z.object({
      candidate: CandidateRow.nullable(),
      queued: z.boolean(),
      waiting: z.boolean(),
      reassigned: z.boolean(),
    }),
  )`
    WITH existing AS (
      SELECT solver_id, node_id, model_name, price_points AS min_price_points, billing_type, marginal_cost, estimated_price_points
      FROM task_attempts WHERE attempt_id = ${attemptId}
    ), waiting AS (
      SELECT 1 FROM task_queue WHERE task_id = ${input.taskId} AND attempt_number = ${input.attemptNumber}
    ), task AS (
      SELECT created_at, workflow_id, timeout_seconds, routing_sort, country,
        ${FIGURE_COLUMNS}, account_id, max_price_points, price_cap_points, key_spend_period
      FROM tasks WHERE task_id = ${input.taskId} AND status = ANY(${ACTIVE})
    ), ${reservationSteps({
      ...input,
      policy,
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
      SELECT
        ${input.behindClientTasks ? BEHIND_CLIENT_TASKS : sql.fragment`t.created_at`}, t.workflow_id, t.timeout_seconds, ${queueValues(entry, sql.fragment`t.routing_sort`, figuresIn('t'))}
      FROM task t WHERE ${neither} AND NOT EXISTS (SELECT 1 FROM reserved)
      ON CONFLICT (task_id) DO UPDATE SET attempt_number = EXCLUDED.attempt_number, max_price_points = EXCLUDED.max_price_points,
        strong_models = EXCLUDED.strong_models, excluded_solver_ids = EXCLUDED.excluded_solver_ids, last_resort_solver_ids = EXCLUDED.last_resort_solver_ids,
        verifiers_only = EXCLUDED.verifiers_only
      RETURNING task_id
    )
    SELECT (SELECT row_to_json(x) FROM (
              SELECT ${CANDIDATE_COLUMNS}
              FROM (SELECT * FROM existing UNION ALL SELECT solver_id, node_id, model_name, min_price_points, billing_type, marginal_cost,
                estimated_price_points FROM reserved) chosen
            ) x) AS candidate,
           EXISTS (SELECT 1 FROM queued) AS queued, EXISTS (SELECT 1 FROM waiting) AS waiting, ${REASSIGNED} AS reassigned`);
  // Reserved by this call (not found again on a retry); a queued attempt counts when its slot is handed.
  if (row.reassigned) recordAttemptReassigned(input.taskType);
  if (row.candidate) return { assignment: toAssignment(attemptId, row.candidate) };
  const handoffs = row.queued ? await handOnSlots(db, policy, [input.taskType], { knownWaiting: true }) : [];
  const own = handoffs.find(
    (handoff) => handoff.taskId === input.taskId && handoff.attemptNumber === input.attemptNumber,
  );
  if (own)
    return {
      assignment: own.assignment,
      handoffs: handoffs.map((handoff) => (handoff === own ? toldOnly(handoff) : handoff)),
    };
  const eligible = eligibleSolvers(input.taskType, {
    policy,
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
          AND NOT ${withinLimits('c', figuresIn('t'), chatCeiling('t'))})`;
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

/**
 * Keeps what a chat attempt stopped while it ran had delivered (its billed usage), once it has stopped and
 * before its task ends: an ending by the task's client bills it (src/db/tasks/finish.ts, failTaskIn).
 */
export async function recordDeliveredUsage(db: Runner, attemptId: string, usage: BilledUsage): Promise<void> {
  await db.query(
    sql.unsafe`UPDATE task_attempts SET delivered_usage = ${sql.jsonb({ ...usage })} WHERE attempt_id = ${attemptId}`,
  );
}

export async function markAttemptAccepted(db: Runner, attemptId: string): Promise<void> {
  await db.query(
    sql.unsafe`UPDATE task_attempts SET accepted_at = now() WHERE attempt_id = ${attemptId} AND accepted_at IS NULL`,
  );
}

/**
 * Ends an attempt once: frees the solver's slot, counts it in the solver's record and reputation (an
 * attempt the platform lost counts in neither) and, unless the task has finished, puts the task back
 * to queued for reassignment. Returns whether it closed the attempt,
 * its task type and whether tasks of that type were waiting (the slot is then handed on before commit).
 * An attempt that makes its solver due a canary announces it (docs/trust.md).
 */
export async function closeAttemptIn(tx: Runner, policy: TrustPolicy, input: AttemptEnd): Promise<Closing> {
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
    ), ${claim ? sql.fragment`${judgeTargetClaimSteps(policy, claim)},` : sql.fragment``} freed AS (
      UPDATE solver_slots sl SET attempt_id = NULL
      FROM closed
      WHERE (sl.solver_id, sl.task_type, sl.model_name, sl.slot) = (closed.solver_id, closed.task_type, closed.model_name, closed.slot)
        AND sl.attempt_id = closed.attempt_id
    ), counted AS (
      UPDATE solver_stats s SET
        attempts = s.attempts + ${isSolverAttempt(input.outcome) ? 1 : 0},
        completed = s.completed + ${succeeded ? 1 : 0},
        failed = s.failed + ${failed ? 1 : 0},
        total_latency_ms = s.total_latency_ms + ${succeeded ? sql.fragment`closed.latency_ms` : sql.fragment`0`}
      FROM closed WHERE s.solver_id = closed.solver_id
    ), ${recordOutcomeStep(policy, counts, claim ? claimFailures : undefined)}, requeued AS (
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
export async function handOnFreed(
  tx: Runner,
  policy: TrustPolicy,
  closings: { closed: boolean; taskType: string | null; waiting: boolean }[],
): Promise<FreedSlots> {
  const freed = closings.flatMap((c) => (c.closed && c.taskType ? [c.taskType] : []));
  const waiting = closings.flatMap((c) => (c.closed && c.waiting && c.taskType ? [c.taskType] : []));
  const handed =
    waiting.length > 0
      ? await handOnSlotsIn(tx, policy, waiting, { knownWaiting: true })
      : { handoffs: [], deferred: false };
  return { freed, ...handed };
}

export interface FreedSlots {
  /** Task types of the slots freed. */
  freed: string[];
  handoffs: Handoff[];
  /** Stopped at a waiting chat whose hold is to be raised for its slot (matching.ts, HandedOn). */
  deferred?: boolean;
}

/**
 * After the commit that freed slots without handing any: a task queued meanwhile could not see them
 * while they were being freed (matching.ts, handOnSlots); and after one that stopped at a waiting chat
 * whose hold is to be raised, which is handed its slot now.
 */
export async function afterCommit(
  db: Runner,
  policy: TrustPolicy,
  { freed, handoffs, deferred }: FreedSlots,
): Promise<Handoff[]> {
  if (freed.length === 0 || (handoffs.length > 0 && !deferred)) return recordHandoffsCommitted(handoffs);
  return [...recordHandoffsCommitted(handoffs), ...(await handOnSlots(db, policy, freed))];
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
export async function closeAttempt(
  db: Db,
  policy: TrustPolicy,
  input: AttemptEnd,
): Promise<{ closed: boolean; handoffs: Handoff[]; targetVerdict: TargetFailureVerdict | null }> {
  const { closed, targetVerdict, ...freed } = await db.transaction(async (tx) => {
    const closing = await closeAttemptIn(tx, policy, input);
    return {
      closed: closing.closed,
      targetVerdict: closing.targetVerdict,
      ...(await handOnFreed(tx, policy, [closing])),
    };
  });
  return { closed, targetVerdict, handoffs: await afterCommit(db, policy, freed) };
}
