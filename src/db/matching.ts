import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { recordAttemptReassigned } from '../metrics/metrics';
import { ACTIVE_STATES, type Assignment, type TaskState } from '../contract/lifecycle';
import { ROUTING_SORTS, type RoutingSort } from '../schemas/domain';
import { oncePer, oncePerKey } from './fragments';
import { HOLD_OPEN, isOverdraft, raiseHoldSteps } from './ledger';
import {
  evidenceOf,
  isCanaryTaskType,
  isVerifier,
  PRIOR_SCORE,
  quarantined,
  scoreOf,
  trusted,
  type TrustPolicy,
} from './reputation';

/**
 * Matching a task to a solver's slot, and the queue of tasks waiting for one (docs/queue.md). A slot is
 * one row of `solver_slots`; a task takes a free one as it is created (or its workflow asks), or joins
 * `task_queue` in that same statement. Whoever frees a slot, or adds slots, hands free slots to the
 * oldest waiting tasks they fit, in its own transaction, and records each handoff in `slot_handoffs`
 * for the waiting workflow to be told.
 */

type Runner = CommonQueryMethods;
type Fragment = ReturnType<typeof sql.fragment>;

// A node that has not heartbeaten for this long is dead: its sockets no longer count as online.
export const NODE_LIVENESS_SECONDS = 15;

/** The api_nodes row `n` has heartbeaten within the liveness window: the one rule of which nodes are live. */
export const NODE_LISTED_LIVE = sql.fragment`n.last_seen_at > now() - make_interval(secs => ${NODE_LIVENESS_SECONDS})`;

/** The node `n` of a solver's connection `sc`, when live: a socket counts as online only through it. */
export const LIVE_NODE_OF_CONNECTION = sql.fragment`JOIN api_nodes n ON n.node_id = sc.node_id AND ${NODE_LISTED_LIVE}`;

/** A state as a statement's value (typed, so a state that does not exist does not compile). */
export const stateValue = (state: TaskState) => sql.fragment`${state}::text`;
/** The states in which a task still runs, as a statement's value. */
export const ACTIVE = sql.fragment`${sql.array(ACTIVE_STATES, 'text')}`;

export const attemptIdFor = (taskId: string, attemptNumber: number) => `${taskId}.a${attemptNumber}`;

/**
 * What a task asks of a capability beyond its type and price, as a statement's expressions: solvers
 * left out (text[]), verifiers only (boolean), the strong-tier models allowed (text[], NULL: any
 * tier), the country (NULL: any) and, for a canary, its one solver (`canaryFor`, text; null when the
 * task is known to be no canary).
 */
interface Asks {
  excluded: Fragment;
  verifiersOnly: Fragment;
  strongModels: Fragment;
  country: Fragment;
  canaryFor: Fragment | null;
  /** The trust policy the rule applies (docs/trust.md). */
  policy: TrustPolicy;
}

/**
 * The eligibility rule, for capability `c`: not left out, a verifier when only verifiers may run it,
 * strong-tier for one of the allowed models (chat), declares the country asked for, and trusted with
 * client work (src/db/reputation.ts); a canary goes to its one solver instead, on probation or not,
 * unless quarantined. Built per statement: the trust rule follows the policy asked with.
 */
function eligibleFor(asks: Asks) {
  const own = sql.fragment`c.solver_id = ${asks.canaryFor} AND NOT ${quarantined(sql.fragment`c.solver_id`)}`;
  const trust =
    asks.canaryFor === null
      ? trusted(asks.policy, 'c')
      : sql.fragment`CASE WHEN ${asks.canaryFor} IS NULL THEN ${trusted(asks.policy, 'c')} ELSE ${own} END`;
  return sql.fragment`NOT (c.solver_id = ANY(${asks.excluded}))
      AND (NOT ${asks.verifiersOnly} OR ${isVerifier(sql.fragment`c.solver_id`)})
      AND (${asks.strongModels} IS NULL OR (c.tier = 'strong' AND c.model_name = ANY(${asks.strongModels})))
      AND (${asks.country} IS NULL OR c.country = ${asks.country})
      AND ${trust}`;
}

/**
 * The solvers that may take a task of this type: a capability for it, connected (not draining) to a
 * live API node, and eligible (eligibleFor). A task that asks for a `country` gives it as a value, or
 * an expression that reads it from the task's row.
 * `FROM … WHERE …`, with the capability as `c`, its connection as `sc`, the solver's record as `s` and its
 * reputation for the task type as `rep`.
 */
export function eligibleSolvers(
  taskType: string,
  options: {
    policy: TrustPolicy;
    strongModels?: string[];
    excludedSolverIds?: string[];
    verifiersOnly?: boolean;
    canaryFor?: string;
    country?: string | null | ReturnType<typeof sql.fragment>;
  },
) {
  const country =
    typeof options.country === 'object' && options.country !== null
      ? options.country
      : sql.fragment`${options.country ?? null}::text`;
  return sql.fragment`
    FROM solver_capabilities c
    JOIN solver_connections sc ON sc.solver_id = c.solver_id AND NOT sc.draining
    ${LIVE_NODE_OF_CONNECTION}
    LEFT JOIN solver_stats s ON s.solver_id = c.solver_id
    LEFT JOIN solver_reputation rep ON rep.solver_id = c.solver_id AND rep.task_type = c.task_type
    WHERE c.task_type = ${taskType}
      AND ${eligibleFor({
        excluded: sql.fragment`${sql.array(options.excludedSolverIds ?? [], 'text')}`,
        verifiersOnly: sql.fragment`${options.verifiersOnly ?? false}::boolean`,
        strongModels:
          options.strongModels === undefined
            ? sql.fragment`NULL::text[]`
            : sql.fragment`${sql.array(options.strongModels, 'text')}`,
        country,
        canaryFor: options.canaryFor === undefined ? null : sql.fragment`${options.canaryFor}::text`,
        policy: options.policy,
      })}`;
}

/**
 * The most an offer's estimate may be for a later attempt of a chat, task row `t`: a chat goes to a dearer
 * offer than its hold (max_price_points) by raising the hold, up to its maximum price and what the account
 * has available; not under a key's spend limit, which counted the first hold only.
 */
export const chatCeiling = (t: string) => {
  const col = (name: string) => sql.identifier([t, name]);
  return sql.fragment`CASE WHEN ${col('price_cap_points')} IS NULL OR ${col('key_spend_period')} IS NOT NULL THEN ${col('max_price_points')}
    ELSE
      LEAST(${col('price_cap_points')}, ${col('max_price_points')} + COALESCE((SELECT b.available FROM balances b WHERE b.account_id = ${col('account_id')}), 0)) END`;
};

/**
 * The most an offer's estimate may be for waiting task `q` (a `task_queue` row): a chat's ceiling (chatCeiling),
 * else its row's maximum.
 */
const waitingCeiling = sql.fragment`COALESCE((SELECT
  ${chatCeiling('qt')} FROM tasks qt WHERE qt.task_id = q.task_id AND qt.price_cap_points IS NOT NULL), q.max_price_points)`;

/**
 * Whether capability `c` may serve the waiting task `q` (a `task_queue` row): its type, its price limits, and
 * eligibleFor.
 */
const fitsWaitingOnce = oncePer<TrustPolicy, 'q'>(
  (policy) => sql.fragment`
  q.task_type = c.task_type AND ${withinLimits('c', figuresIn('q'), waitingCeiling)}
  AND ${eligibleFor({
    excluded: sql.fragment`q.excluded_solver_ids`,
    verifiersOnly: sql.fragment`q.verifiers_only`,
    strongModels: sql.fragment`q.strong_models`,
    country: sql.fragment`(SELECT qt.country FROM tasks qt WHERE qt.task_id = q.task_id)`,
    canaryFor: sql.fragment`q.canary_for`,
    policy,
  })}`,
);
const fitsWaiting = (policy: TrustPolicy) => fitsWaitingOnce(policy, 'q');

/** Attempts still running above a lowered max_concurrent of capability `c`: it gets nothing until they end. */
const runningAboveLimit = sql.fragment`
  EXISTS (
    SELECT 1 FROM solver_slots above
    WHERE (above.solver_id, above.task_type, above.model_name) = (c.solver_id, c.task_type, c.model_name)
      AND above.slot > c.max_concurrent AND above.attempt_id IS NOT NULL)`;

/**
 * What prices and limits the offers for one request (docs/queue.md, "What a chat pays"): the prompt's
 * counted tokens and the completion's token budget, and the client's `provider.max_price` (points per
 * million prompt / completion tokens, points per request). A web task, a canary: all null.
 */
export interface RequestFigures {
  promptTokens: number | null;
  completionTokens: number | null;
  maxPricePrompt: string | null;
  maxPriceCompletion: string | null;
  maxPriceRequest: string | null;
}

export const NO_FIGURES: RequestFigures = {
  promptTokens: null,
  completionTokens: null,
  maxPricePrompt: null,
  maxPriceCompletion: null,
  maxPriceRequest: null,
};

/** The figures as a statement's expressions. */
export interface Figures {
  promptTokens: Fragment;
  completionTokens: Fragment;
  maxPricePrompt: Fragment;
  maxPriceCompletion: Fragment;
  maxPriceRequest: Fragment;
}

const figureFragments = (figures: RequestFigures): Figures => ({
  promptTokens: sql.fragment`${figures.promptTokens}::int`,
  completionTokens: sql.fragment`${figures.completionTokens}::int`,
  maxPricePrompt: sql.fragment`${figures.maxPricePrompt}::numeric`,
  maxPriceCompletion: sql.fragment`${figures.maxPriceCompletion}::numeric`,
  maxPriceRequest: sql.fragment`${figures.maxPriceRequest}::numeric`,
});
// A web task's (none): one object, so that what is built from it is made once (estimatedPrice).
const NULL_FIGURES = figureFragments(NO_FIGURES);

export const figuresOf = (figures: RequestFigures = NO_FIGURES): Figures =>
  figures === NO_FIGURES ? NULL_FIGURES : figureFragments(figures);

/** The figures in the columns of a `tasks` or `task_queue` row, or of a CTE with the same columns. */
export const figuresIn = oncePerKey((row: string): Figures => ({
  promptTokens: sql.fragment`${sql.identifier([row, 'estimate_prompt_tokens'])}`,
  completionTokens: sql.fragment`${sql.identifier([row, 'estimate_completion_tokens'])}`,
  maxPricePrompt: sql.fragment`${sql.identifier([row, 'max_price_prompt'])}`,
  maxPriceCompletion: sql.fragment`${sql.identifier([row, 'max_price_completion'])}`,
  maxPriceRequest: sql.fragment`${sql.identifier([row, 'max_price_request'])}`,
}));

/** The figures read from one row of `source` (a statement's CTE with the columns of `tasks`). */
export const figuresFrom = (source: string): Figures => {
  const column = (name: string) => sql.fragment`(SELECT ${sql.identifier([name])} FROM ${sql.identifier([source])})`;
  return {
    promptTokens: column('estimate_prompt_tokens'),
    completionTokens: column('estimate_completion_tokens'),
    maxPricePrompt: column('max_price_prompt'),
    maxPriceCompletion: column('max_price_completion'),
    maxPriceRequest: column('max_price_request'),
  };
};

/** The figures' values for a `task_queue` row, in the order of FIGURE_COLUMNS. */
const figureValues = (f: Figures) =>
  sql.fragment`${f.promptTokens}, ${f.completionTokens}, ${f.maxPricePrompt}, ${f.maxPriceCompletion}, ${f.maxPriceRequest}`;
export const FIGURE_COLUMNS = sql.fragment`estimate_prompt_tokens, estimate_completion_tokens, max_price_prompt, max_price_completion, max_price_request`;

const estimateOnce = oncePer<Figures, string>((f, c) => {
  const col = (name: string) => sql.identifier([c, name]);
  return sql.fragment`(CASE WHEN ${col('billing_type')} = 'per_token'
    THEN
      ${col('min_price_points')} + (${col('prompt_cost')} * COALESCE(${f.promptTokens}, 0) + ${col('completion_cost')} * COALESCE(${f.completionTokens}, 0)) / 1000
    ELSE ${col('min_price_points')} END)`;
});

/**
 * What capability `c` asks for this request: a per_token offer its base + prompt rate × prompt tokens
 * + completion rate × completion tokens (rates per 1,000 tokens; unknown counts as none), a per_request
 * offer its price. Ranking, the hold and the limits all read this one figure.
 */
export const estimatedPrice = (c: string, f: Figures) => estimateOnce(f, c);

/**
 * Whether capability `c` is within the request's limits: its estimated price within `maxPrice` (NULL: any), and
 * within the client's provider.max_price (rates per million tokens, so the offer's per-1,000 rate × 1000;
 * a per_request offer asks nothing per token; its price is its per-request price).
 */
export const withinLimits = (c: string, f: Figures, maxPrice: Fragment) => {
  const col = (name: string) => sql.identifier([c, name]);
  const perToken = sql.fragment`${col('billing_type')} = 'per_token'`;
  return sql.fragment`(((${maxPrice}) IS NULL OR ${estimatedPrice(c, f)} <= ${maxPrice})
    AND (${f.maxPricePrompt} IS NULL OR NOT ${perToken} OR ${col('prompt_cost')} * 1000 <= ${f.maxPricePrompt})
    AND (${f.maxPriceCompletion} IS NULL OR NOT ${perToken} OR ${col('completion_cost')} * 1000 <= ${f.maxPriceCompletion})
    AND (${f.maxPriceRequest} IS NULL OR ${col('min_price_points')} <= ${f.maxPriceRequest}))`;
};

export const CandidateRow = z.object({
  solver_id: z.string(),
  node_id: z.string(),
  model_name: z.string(),
  min_price_points: z.string(),
  billing_type: z.string(),
  marginal_cost: z.string(),
  estimated_price_points: z.string().nullable(),
});

export const CANDIDATE_COLUMNS = sql.fragment`
  solver_id, node_id, model_name, trim_scale(min_price_points)::text AS min_price_points, billing_type, trim_scale(marginal_cost)::text AS marginal_cost,
  trim_scale(estimated_price_points)::text AS estimated_price_points`;

export function toAssignment(attemptId: string, row: z.infer<typeof CandidateRow>): Assignment {
  return {
    attemptId,
    solverId: row.solver_id,
    nodeId: row.node_id,
    pricePoints: row.min_price_points,
    billingType: row.billing_type,
    marginalCost: row.marginal_cost,
    modelName: row.model_name,
    ...(row.estimated_price_points !== null ? { estimatedPricePoints: row.estimated_price_points } : {}),
  };
}

/** What matching one attempt needs. */
export interface ReserveAttemptInput {
  taskId: string;
  attemptNumber: number;
  taskType: string;
  maxPricePoints: string;
  excludedSolverIds: string[];
  /** Only solvers marked verifiers, whenever it is matched (a run meant for verifiers, docs/trust.md). */
  verifiersOnly?: boolean;
  /** Still eligible, but offered only when no other solver fits (e.g. an attempt lost with its node). */
  lastResortSolverIds?: string[];
  strongModels?: string[];
  /** A canary's attempt: only this solver (docs/trust.md). */
  canaryFor?: string;
  /**
   * A redundant run's attempt (docs/trust.md): it waits behind every client task (its arrival is
   * BEHIND_CLIENT_TASKS), so it takes only a slot that no waiting client task fits.
   */
  behindClientTasks?: boolean;
}

export interface ReservationInput extends ReserveAttemptInput {
  /** The trust policy that decides who may take client work (docs/trust.md). */
  policy: TrustPolicy;
  attemptId: string;
  /** The country the task must be fetched from: a value, or an expression reading the task's row. */
  country: string | null | ReturnType<typeof sql.fragment>;
  /** The strict order the client asked for (a text value or NULL: work shared among equal offers). */
  sort: ReturnType<typeof sql.fragment>;
  /** A further condition on reserving at all. */
  onlyIf: ReturnType<typeof sql.fragment>;
  /** When the task arrived: a free slot that fits a task waiting since before goes to that task instead. */
  arrival: ReturnType<typeof sql.fragment>;
  /** What prices the offers for this request and limits them (none: each offer at its min_price_points). */
  figures?: Figures;
  /** The most an offer's estimate may be (default: maxPricePoints). */
  ceiling?: Fragment;
}

// Free slots of one capability that a reservation looks at, lowest first: more than the reservations
// likely under way on one capability at once (one per database connection). One that finds them all
// being taken goes to the next capability, or joins the queue.
const FREE_SLOTS_CONSIDERED = 32;

// A capability with no completed attempt yet is assumed to take this long per task.
export const UNMEASURED_LATENCY_MS = 1000;
/**
 * A solver with less evidence than this for a task type (its decayed successes and failures) is a
 * newcomer: ten tasks are what the score needs to tell a reliable solver (11/12 after ten successes)
 * from a lucky one.
 */
export const NEWCOMER_EVIDENCE = 10;
/**
 * The newcomers among the cheapest offers with a free slot together get at least this share of the
 * tasks (their weights are raised to it when lower): one honest newcomer at the market price earns its
 * record (NEWCOMER_EVIDENCE tasks) within about 50 such tasks, and any number of new accounts together
 * take no more than a fifth of the work beyond their own weight.
 */
export const EXPLORATION_SHARE = 0.2;
/**
 * A capability's free slots count up to this many in its weight (and its rate): a solver's capacity is
 * its own claim, and one that claims thousands of slots must not take the market by it.
 */
export const FREE_SLOTS_WEIGHED = 8;

const sortIs = (sort: RoutingSort) => sql.fragment`e.sort = ${sort}::text`;

/**
 * The matching rule, as CTEs for one statement: `pick` takes a free slot of the best eligible capability
 * (last-resort solvers last; the lowest estimated price for the request first; among equal prices a weighted
 * random draw, or the strict
 * order the client asked for: docs/queue.md, "Sharing work"), skipping slots another reservation is
 * taking, `reserved` marks it taken,
 * and `attempt` records the attempt. Concurrent reservations neither wait for each other nor exceed
 * a solver's limit: slots above max_concurrent are never offered, and while attempts run in such slots
 * (the limit was lowered under them) the capability is offered none. A capability that a task waiting
 * since before this one fits is not offered either: that task is served first (no overtaking). A
 * canary overtakes: its solver's free slot is its own first (docs/trust.md).
 */
export function reservationSteps(input: ReservationInput) {
  const eligible = eligibleSolvers(input.taskType, {
    policy: input.policy,
    strongModels: input.strongModels,
    excludedSolverIds: input.excludedSolverIds,
    verifiersOnly: input.verifiersOnly,
    canaryFor: input.canaryFor,
    country: input.country,
  });
  const figures = input.figures ?? figuresOf();
  return sql.fragment`
    offers AS MATERIALIZED (
      -- The eligible capabilities with what orders them, once each (not once per slot).
      SELECT c.solver_id, c.task_type, c.model_name, sc.node_id, c.min_price_points, c.billing_type, c.marginal_cost, c.prompt_cost, c.completion_cost,
             ${estimatedPrice('c', figures)} AS estimated_price_points, c.max_concurrent,
             c.solver_id = ANY(${sql.array(input.lastResortSolverIds ?? [], 'text')}) AS last_resort,
             COALESCE(${scoreOf(input.policy, 'rep')}, ${PRIOR_SCORE}::float8) AS record,
             COALESCE(rep.latency_ms, 0) AS latency, rep.latency_ms::float8 AS measured_latency,
             COALESCE(${evidenceOf(input.policy, 'rep')}, 0) < ${NEWCOMER_EVIDENCE}::float8 AS newcomer,
             (SELECT count(*) FROM solver_slots f
              WHERE (f.solver_id, f.task_type, f.model_name) = (c.solver_id, c.task_type, c.model_name) AND f.attempt_id IS NULL AND f.slot
                <= c.max_concurrent)::float8 AS free
      ${eligible}
        AND ${input.onlyIf}
        AND ${withinLimits('c', figures, input.ceiling ?? sql.fragment`${input.maxPricePoints}::numeric`)}
        AND NOT ${runningAboveLimit}
        AND (${input.canaryFor !== undefined} OR NOT EXISTS (
          SELECT 1 FROM task_queue q
          WHERE q.task_type = c.task_type AND (q.arrival, q.task_id) < (${input.arrival}, ${input.taskId}::text) AND ${fitsWaiting(input.policy)}))
    ), ranked AS MATERIALIZED (
      -- Among offers at one price, each draws an exponential key at the rate of its weight (score × free
      -- slots up to FREE_SLOTS_WEIGHED; newcomers' weights raised to EXPLORATION_SHARE of their tier's
      -- together): the smallest key wins, so each wins with the probability weight / the tier's weights
      -- (Efraimidis–Spirakis).
      SELECT w.*, ${input.sort} AS sort,
             w.room * 1000 / GREATEST(COALESCE(w.measured_latency, ${UNMEASURED_LATENCY_MS}::float8), 1) AS rate,
             -ln(1 - random()) / (w.weight * CASE WHEN w.newcomer AND w.new_weight < ${EXPLORATION_SHARE}::float8 * w.tier_weight
               THEN ${EXPLORATION_SHARE}::float8 * (w.tier_weight - w.new_weight) / (${1 - EXPLORATION_SHARE}::float8 * w.new_weight) ELSE 1 END) AS share_key
      FROM (
        SELECT o.*, o.record * o.room AS weight,
               sum(o.record * o.room) OVER tier AS tier_weight,
               COALESCE(sum(o.record * o.room) FILTER (WHERE o.newcomer) OVER tier, 0) AS new_weight
        FROM (SELECT offers.*, LEAST(offers.free, ${FREE_SLOTS_WEIGHED}::float8) AS room FROM offers WHERE offers.free > 0) o
        WINDOW tier AS (PARTITION BY o.last_resort, o.estimated_price_points)
      ) w
    ), pick AS (
      SELECT e.solver_id, e.task_type, e.model_name, e.node_id, e.min_price_points, e.billing_type, e.marginal_cost, e.prompt_cost, e.completion_cost,
             e.estimated_price_points, sl.slot
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
      ORDER BY e.last_resort ASC,
               CASE WHEN ${sortIs('latency')} THEN e.measured_latency END ASC NULLS LAST,
               CASE WHEN ${sortIs('throughput')} THEN e.rate END DESC NULLS LAST,
               e.estimated_price_points ASC,
               CASE WHEN e.sort IS NULL THEN e.share_key END ASC,
               e.record DESC, e.latency ASC, sl.slot ASC
      LIMIT 1
      FOR UPDATE OF sl SKIP LOCKED
    ), reserved AS (
      UPDATE solver_slots sl SET attempt_id = ${input.attemptId}
      FROM pick p
      WHERE (sl.solver_id, sl.task_type, sl.model_name, sl.slot) = (p.solver_id, p.task_type, p.model_name, p.slot)
      RETURNING p.*
    ), attempt AS (
      INSERT INTO task_attempts
        (attempt_id, task_id, attempt_number, solver_id, task_type, model_name, node_id, price_points, billing_type, marginal_cost,
          prompt_cost, completion_cost,
         estimated_price_points, slot)
      SELECT
        ${input.attemptId}, ${input.taskId}, ${input.attemptNumber}, solver_id, task_type, model_name, node_id, min_price_points, billing_type, marginal_cost,
             prompt_cost, completion_cost, estimated_price_points, slot
      FROM reserved
    ), previous_attempt AS (
      SELECT solver_id FROM task_attempts WHERE task_id = ${input.taskId} AND attempt_number = ${input.attemptNumber - 1}
    )`;
}

/**
 * Whether the slot reserved by `reservationSteps` went to another solver than the task's previous attempt
 * (a reassignment, counted in metrics); a task put back in line, or given to the same solver again, is not one.
 */
export const REASSIGNED = sql.fragment`EXISTS (SELECT 1 FROM reserved r JOIN previous_attempt p ON p.solver_id <> r.solver_id)`;

/** Counts the reassignments among handoffs, once the transaction that handed them has committed. */
export function recordHandoffsCommitted(handoffs: Handoff[]): Handoff[] {
  for (const handoff of handoffs)
    if (handoff.reassigned && handoff.task) recordAttemptReassigned(handoff.task.taskType);
  return handoffs;
}

/**
 * The arrival of a task that waits behind every client task, whenever they arrive (a redundant run):
 * the queue is served in arrival order, so it is handed only a slot that no waiting client task fits,
 * and a new client task is never held up by it (no overtaking looks at tasks arrived before).
 */
export const BEHIND_CLIENT_TASKS = sql.fragment`'infinity'::timestamptz`;

/**
 * Whether queue row `q` is a client's task: not a canary waiting for its solver, nor a run waiting behind
 * client tasks. The figures clients and operators read count these only.
 */
export const clientWaiting = (q: string) =>
  sql.fragment`${sql.identifier([q, 'canary_for'])} IS NULL AND ${sql.identifier([q, 'arrival'])} < ${BEHIND_CLIENT_TASKS}`;

/** What a task waits with in the queue (written by the statement that failed to match it). */
export interface QueueEntry {
  taskId: string;
  taskType: string;
  attemptNumber: number;
  maxPricePoints: string;
  strongModels?: string[];
  excludedSolverIds: string[];
  verifiersOnly?: boolean;
  lastResortSolverIds?: string[];
  /** A canary: it waits for this one solver's slot. */
  canaryFor?: string;
  /** The strict order its client asked for. */
  routingSort?: RoutingSort | null;
}

/**
 * The values of a `task_queue` row (after `arrival, workflow_id, timeout_seconds` from `source`);
 * `routingSort` as an expression when the statement reads it from the task row.
 */
export function queueValues(
  entry: QueueEntry,
  routingSort = sql.fragment`${entry.routingSort ?? null}::text`,
  figures: Figures = figuresOf(),
) {
  return sql.fragment`${entry.taskId}, ${entry.taskType}, ${entry.attemptNumber}, ${entry.maxPricePoints}::numeric,
    ${entry.strongModels ? sql.array(entry.strongModels, 'text') : null}::text[], ${sql.array(entry.excludedSolverIds, 'text')},
    ${sql.array(entry.lastResortSolverIds ?? [], 'text')}, ${entry.canaryFor ?? null}::text, ${routingSort}, ${figureValues(figures)}, ${entry.verifiersOnly ?? false}`;
}
export const QUEUE_COLUMNS = sql.fragment`
  arrival, workflow_id, timeout_seconds, task_id, task_type, attempt_number, max_price_points, strong_models, excluded_solver_ids, last_resort_solver_ids,
  canary_for, routing_sort, ${FIGURE_COLUMNS}, verifiers_only`;

/** A slot handed to a waiting task: its workflow is to be told (the row in `slot_handoffs` until it is). */
export interface Handoff {
  taskId: string;
  workflowId: string;
  attemptNumber: number;
  assignment: Assignment;
  /**
   * The slot went to another solver than the task's previous attempt (set where the slot was handed, never read
   * back).
   */
  reassigned?: boolean;
  /**
   * What sending the task to its solver takes, for the process that handed the slot: if it holds the
   * solver's socket, it sends the task as it tells the workflow (src/dispatch/early-attempts.ts). Absent
   * when the handoff is read back from the outbox, and when the caller's own workflow runs the attempt.
   */
  task?: HandedTask;
}

export interface HandedTask {
  taskType: string;
  payload: Record<string, unknown>;
  /** The task's own deadline (its arrival and timeout), in ms since the epoch. */
  deadlineMs: number;
  /** A canary's solver (a chat audit: no client stream, its deltas assembled into the result). */
  canaryFor?: string;
}

/** A handoff its caller's own workflow takes up (it asked for the slot): told, never sent early. */
export const toldOnly = ({ task: _task, ...handoff }: Handoff): Handoff => handoff;

const WaitingRow = z.object({
  task_id: z.string(),
  task_type: z.string(),
  attempt_number: z.number(),
  max_price_points: z.string(),
  strong_models: z.array(z.string()).nullable(),
  excluded_solver_ids: z.array(z.string()),
  verifiers_only: z.boolean(),
  last_resort_solver_ids: z.array(z.string()),
  workflow_id: z.string(),
  arrival: z.string(),
  canary_for: z.string().nullable(),
  routing_sort: z.enum(ROUTING_SORTS).nullable(),
  estimate_prompt_tokens: z.number().nullable(),
  estimate_completion_tokens: z.number().nullable(),
  max_price_prompt: z.string().nullable(),
  max_price_completion: z.string().nullable(),
  max_price_request: z.string().nullable(),
  country: z.string().nullable(),
  payload: z.record(z.any()),
  deadline_ms: z.number(),
  /** A chat: its hold is raised when the slot handed to it is dearer (chatCeiling). */
  chat: z.boolean(),
});

/**
 * What handing slots on in a caller's transaction did: the handoffs, and whether it stopped at a waiting
 * chat that only a dearer slot than its hold fits (`deferred`): its hold is raised by handOnSlots once the
 * caller has committed, since a raise locks the chat's account's balance row, which a transaction that
 * settles or holds other accounts' points must not take out of their order.
 */
export interface HandedOn {
  handoffs: Handoff[];
  deferred: boolean;
}

/**
 * Hands free slots to the waiting tasks of these types, waiting canaries first (each its solver's
 * slot), then oldest first, each the best slot it fits, until no waiting task fits a free slot. Run
 * after a commit that freed a slot or queued a task without a handoff: a task queued concurrently with
 * that freeing could not see the slot, nor the freeing see the task, until both had committed. Each
 * handoff is its own transaction, so none holds two accounts' balance rows (a waiting chat's hold is
 * raised as its dearer slot is handed); one whose raise finds the points gone meanwhile stops the pass.
 * `knownWaiting` skips the first look at the queue (the caller just queued a task).
 */
export async function handOnSlots(
  db: Runner,
  policy: TrustPolicy,
  taskTypes: string[],
  options: { knownWaiting?: boolean } = {},
): Promise<Handoff[]> {
  const pass = await startPass(db, policy, taskTypes, options);
  if (!pass) return [];
  const handed: Handoff[] = [];
  for (;;) {
    const next = await db
      .transaction((tx) => nextHandoff(tx, pass, true))
      .catch((error) => {
        if (isOverdraft(error)) return null;
        throw error;
      });
    if (!next || next === 'deferred') return recordHandoffsCommitted(handed);
    handed.push(next);
  }
}

/**
 * The same in the caller's transaction, which frees or adds slots; a waiting chat that needs its hold
 * raised for the slot it fits stops it (`deferred`: the caller runs handOnSlots after its commit).
 */
export async function handOnSlotsIn(
  tx: Runner,
  policy: TrustPolicy,
  taskTypes: string[],
  options: { knownWaiting?: boolean } = {},
): Promise<HandedOn> {
  const pass = await startPass(tx, policy, taskTypes, options);
  const handoffs: Handoff[] = [];
  if (!pass) return { handoffs, deferred: false };
  for (;;) {
    const next = await nextHandoff(tx, pass, false);
    if (!next || next === 'deferred') return { handoffs, deferred: next === 'deferred' };
    handoffs.push(next);
  }
}

interface Pass {
  policy: TrustPolicy;
  types: ReturnType<typeof sql.array>;
  /** Canaries are served first: handing a slot takes no slot a canary waits for, so one pass over them suffices. */
  canaries: boolean;
}

async function startPass(
  db: Runner,
  policy: TrustPolicy,
  taskTypes: string[],
  options: { knownWaiting?: boolean },
): Promise<Pass | null> {
  if (taskTypes.length === 0) return null;
  const types = sql.array([...new Set(taskTypes)], 'text');
  if (!options.knownWaiting) {
    const waiting = await db.oneFirst(sql.type(z.object({ waiting: z.boolean() }))`
      SELECT EXISTS (SELECT 1 FROM task_queue WHERE task_type = ANY(${types})) AS waiting`);
    if (!waiting) return null;
  }
  return { policy, types, canaries: taskTypes.some((type) => isCanaryTaskType(policy, type)) };
}

/** The next handoff of a pass; null when no waiting task fits a free slot; `deferred` (no `raise`) as HandedOn says. */
async function nextHandoff(tx: Runner, pass: Pass, raise: boolean): Promise<Handoff | 'deferred' | null> {
  const { policy, types } = pass;
  for (;;) {
    // The oldest waiting task that some free slot fits; its task row is locked with it, so that a
    // concurrent ending of that task (which locks the task row, then removes it from the queue) waits
    // for this handoff, or is skipped here, and neither waits for the other.
    const head = await tx.maybeOne(sql.type(WaitingRow)`
        SELECT q.task_id, q.task_type, q.attempt_number, trim_scale(q.max_price_points)::text AS max_price_points, q.strong_models,
               q.excluded_solver_ids, q.verifiers_only, q.last_resort_solver_ids, q.workflow_id, q.arrival::text AS arrival, q.canary_for,
                 q.routing_sort, t.country, t.payload,
               q.estimate_prompt_tokens, q.estimate_completion_tokens, q.max_price_prompt::text, q.max_price_completion::text, q.max_price_request::text,
               (extract(epoch FROM q.arrival) * 1000 + q.timeout_seconds * 1000)::float8 AS deadline_ms, t.price_cap_points IS NOT NULL AS chat
        FROM task_queue q JOIN tasks t ON t.task_id = q.task_id
        WHERE q.task_type = ANY(${types}) ${pass.canaries ? sql.fragment`AND q.canary_for IS NOT NULL` : sql.fragment``}
          AND EXISTS (
            SELECT 1 FROM solver_capabilities c
            JOIN solver_connections sc ON sc.solver_id = c.solver_id AND NOT sc.draining
            ${LIVE_NODE_OF_CONNECTION}
            JOIN solver_slots f ON (f.solver_id, f.task_type, f.model_name) = (c.solver_id, c.task_type, c.model_name)
              AND f.attempt_id IS NULL AND f.slot <= c.max_concurrent
            WHERE ${fitsWaiting(policy)} AND NOT ${runningAboveLimit})
        ORDER BY q.arrival, q.task_id
        LIMIT 1
        FOR UPDATE OF q, t SKIP LOCKED`);
    const handoff = head ? await handSlotTo(tx, policy, head, raise) : null;
    if (handoff) return handoff;
    // Only a dearer slot than its hold fits it: handed once its hold can be raised.
    if (head?.chat && !raise) return 'deferred';
    // No canary (left) that a free slot fits: the others in their order.
    if (pass.canaries) {
      pass.canaries = false;
      continue;
    }
    // No waiting task fits a free slot (or its fitting slots were all being taken meanwhile).
    return null;
  }
}

/**
 * Reserves the best free slot for a waiting task, takes it off the queue and records the handoff. A chat
 * takes an offer within its ceiling (chatCeiling), its hold raised to that offer's estimate in the same
 * statement (`raise`), or, without `raise`, an offer within its hold.
 */
async function handSlotTo(
  tx: Runner,
  policy: TrustPolicy,
  head: z.infer<typeof WaitingRow>,
  raise: boolean,
): Promise<Handoff | null> {
  const attemptId = attemptIdFor(head.task_id, head.attempt_number);
  const task = sql.fragment`(SELECT * FROM tasks WHERE task_id = ${head.task_id})`;
  const ceiling = head.chat
    ? raise
      ? sql.fragment`(SELECT ${chatCeiling('qt')} FROM ${task} qt)`
      : sql.fragment`(SELECT max_price_points FROM ${task} qt)`
    : undefined;
  const raising = head.chat && raise;
  const row = await tx.maybeOne(sql.type(CandidateRow.extend({ reassigned: z.boolean() }))`
    WITH ${reservationSteps({
      policy,
      taskId: head.task_id,
      attemptId,
      attemptNumber: head.attempt_number,
      taskType: head.task_type,
      maxPricePoints: head.max_price_points,
      strongModels: head.strong_models ?? undefined,
      excludedSolverIds: head.excluded_solver_ids,
      verifiersOnly: head.verifiers_only,
      lastResortSolverIds: head.last_resort_solver_ids,
      canaryFor: head.canary_for ?? undefined,
      onlyIf: sql.fragment`true`,
      arrival: sql.fragment`${head.arrival}::timestamptz`,
      sort: sql.fragment`${head.routing_sort}::text`,
      figures: figuresOf({
        promptTokens: head.estimate_prompt_tokens,
        completionTokens: head.estimate_completion_tokens,
        maxPricePrompt: head.max_price_prompt,
        maxPriceCompletion: head.max_price_completion,
        maxPriceRequest: head.max_price_request,
      }),
      country: head.country,
      ...(ceiling ? { ceiling } : {}),
    })}, ${
      raising
        ? raiseHoldSteps(sql.fragment`
          SELECT h.hold_id, h.account_id, r.estimated_price_points - h.amount AS extra, ${attemptId}::text AS raise_id
          FROM reserved r JOIN holds h ON h.hold_id = ${head.task_id} AND h.status = ${HOLD_OPEN}
          WHERE r.estimated_price_points > h.amount`)
        : sql.fragment`raise AS (SELECT NULL::numeric AS extra WHERE false)`
    }, assigned AS (
      UPDATE tasks SET status = ${stateValue('assigned')}, solver_id = r.solver_id, updated_at = now(),
        max_price_points = max_price_points + COALESCE((SELECT extra FROM raise), 0)
      FROM reserved r WHERE task_id = ${head.task_id} AND status = ANY(${ACTIVE})
    ), dequeued AS (
      DELETE FROM task_queue WHERE task_id = ${head.task_id} AND EXISTS (SELECT 1 FROM reserved)
    ), told AS (
      INSERT INTO slot_handoffs (attempt_id, task_id, workflow_id, attempt_number)
      SELECT ${attemptId}, ${head.task_id}, ${head.workflow_id}, ${head.attempt_number} FROM reserved
      ON CONFLICT DO NOTHING
    )
    SELECT ${CANDIDATE_COLUMNS}, ${REASSIGNED} AS reassigned FROM reserved`);
  if (!row) return null;
  return {
    taskId: head.task_id,
    workflowId: head.workflow_id,
    attemptNumber: head.attempt_number,
    assignment: toAssignment(attemptId, row),
    ...(row.reassigned ? { reassigned: true } : {}),
    task: {
      taskType: head.task_type,
      payload: head.payload,
      deadlineMs: head.deadline_ms,
      ...(head.canary_for ? { canaryFor: head.canary_for } : {}),
    },
  };
}

const HandoffRow = CandidateRow.extend({
  attempt_id: z.string(),
  task_id: z.string(),
  workflow_id: z.string(),
  attempt_number: z.number(),
});

/** Handoffs recorded at least `seconds` ago and not yet told to their workflows (their sender died). */
export async function unsentHandoffs(db: Runner, seconds: number): Promise<Handoff[]> {
  const rows = await db.any(sql.type(HandoffRow)`
    SELECT h.attempt_id, h.task_id, h.workflow_id, h.attempt_number, a.solver_id, a.node_id, a.model_name,
           trim_scale(a.price_points)::text AS min_price_points, a.billing_type, trim_scale(a.marginal_cost)::text AS marginal_cost,
           trim_scale(a.estimated_price_points)::text AS estimated_price_points
    FROM slot_handoffs h JOIN task_attempts a ON a.attempt_id = h.attempt_id
    WHERE h.created_at < now() - make_interval(secs => ${seconds})
    ORDER BY h.created_at LIMIT 500`);
  return rows.map((row) => ({
    taskId: row.task_id,
    workflowId: row.workflow_id,
    attemptNumber: row.attempt_number,
    assignment: toAssignment(row.attempt_id, row),
  }));
}

/** The handoff's workflow has been told (or need not be): its outbox row goes. */
export async function forgetHandoff(db: Runner, attemptId: string): Promise<void> {
  await db.query(sql.unsafe`DELETE FROM slot_handoffs WHERE attempt_id = ${attemptId}`);
}

/** Outbox rows of attempts that no longer exist (their task was deleted) have nothing to tell. */
export async function forgetOrphanHandoffs(db: Runner): Promise<void> {
  await db.query(
    sql.unsafe`DELETE FROM slot_handoffs h WHERE NOT EXISTS (SELECT 1 FROM task_attempts a WHERE a.attempt_id = h.attempt_id)`,
  );
}

/** Whether a handed attempt still waits for a workflow that started: one that is gone leaves it unused. */
export async function handedAttemptOrphaned(db: Runner, attemptId: string): Promise<boolean> {
  return db.oneFirst(sql.type(z.object({ orphaned: z.boolean() }))`
    SELECT EXISTS (
      SELECT 1 FROM task_attempts a JOIN tasks t ON t.task_id = a.task_id
      WHERE a.attempt_id = ${attemptId} AND a.ended_at IS NULL AND t.workflow_started_at IS NOT NULL AND t.status = ANY(${ACTIVE})
    ) AS orphaned`);
}
