import { sql, type CommonQueryMethods } from 'slonik';
import { CANARY_TASK_TYPES, type CanaryTaskType } from '../contract/canaries';
import { CHAT_TASK_TYPE } from '../schemas/domain';
import { oncePer, type Fragment } from './fragments';

/**
 * Reputation per solver and task type, and the rule that keeps untrusted solvers from client work
 * (docs/trust.md). The evidence lives in `solver_reputation`, the quarantines in `solver_quarantines`;
 * this module holds the formula, the thresholds and the SQL that applies them, in one place.
 */

export interface TrustPolicy {
  /** A solver whose score for a task type is below this gets no client task of that type. */
  minScore: number;
  /** Canaries a solver must pass for a task type before it gets client tasks of that type. */
  probationCanaries: number;
  /** Evidence loses half its weight in this many seconds. */
  halfLifeSeconds: number;
  /** Mean attempts of a canary task type between two canaries of a solver (0: only probation canaries). */
  canaryEveryTasks: number;
  /**
   * The fraction of a solver's client web tasks verified once it has a long verified record: the floor
   * its rate falls to (docs/trust.md, "Verified client tasks").
   */
  redundantRunFraction: number;
  /** The fraction of a new solver's client web tasks verified: its rate before any verified pass. */
  verificationStartFraction: number;
  /** Whether web_search canaries are sent: only with a search oracle to compare results with (CANARY_SEARCH_ORACLE). */
  searchCanaries: boolean;
  /**
   * Whether canary pages (proxy_fetch, page_snapshot, screenshot) are sent: only where solvers can reach
   * them (CANARY_HOSTS, or the local names under localhost when ALLOW_PRIVATE_NETWORKS is true).
   */
  pageCanaries: boolean;
  /**
   * Requests of its per-minute rate limit an account is charged for a task that failed on its target
   * (docs/trust.md, "Target failures").
   */
  targetFailureRequestCost: number;
  /**
   * The most the platform account pays for one check (a canary's hold): an offer priced above it
   * cannot be checked, so it gets no client work of a type checks are sent for (docs/trust.md, "Prices").
   */
  checkPriceCeilingPoints: string;
  /**
   * What a client's task of each kind holds by default (DEFAULT_WEB_TASK_PRICE_POINTS,
   * DEFAULT_CHAT_PRICE_POINTS): within the ceiling, the most a newcomer's probation check pays it
   * (probationCheckPrice).
   */
  defaultHoldPoints: { web: string; chat: string };
  /**
   * A solver's pay for a task vests this long after it settled (0: paid out available at once; docs/trust.md,
   * "Escrow and refunds").
   */
  vestingSeconds: number;
  /**
   * Or sooner, once the solver has passed this many checks (canaries, agreeing redundant runs) since (0: by time
   * only).
   */
  vestingChecks: number;
}

/**
 * The policy that tests of the database layer without a stack of their own pass. The API and worker
 * processes pass their configuration's (`config.trust`; probation is on there by default) to every
 * rule below.
 */
export const DEFAULT_TRUST_POLICY: TrustPolicy = {
  minScore: 0.3,
  probationCanaries: 0,
  halfLifeSeconds: 24 * 3600,
  canaryEveryTasks: 50,
  redundantRunFraction: 0,
  verificationStartFraction: 0,
  searchCanaries: false,
  pageCanaries: true,
  targetFailureRequestCost: 60,
  checkPriceCeilingPoints: '100',
  defaultHoldPoints: { web: '10', chat: '100' },
  vestingSeconds: 0,
  vestingChecks: 0,
};

export { CANARY_TASK_TYPES, type CanaryTaskType } from '../contract/canaries';

/**
 * The most a probation check of a task type pays a newcomer: what a client's default task of the type
 * holds, within the ceiling (docs/trust.md, "Checks that cannot be drained"). An offer priced above a
 * default client task is no market price, and paying it the ceiling let a few sybils priced there empty
 * the platform account with their probation; such an offer is not checked (it stays on probation) until
 * it is priced within this.
 */
export function probationCheckPrice(policy: TrustPolicy, taskType: string): string {
  const hold = taskType === CHAT_TASK_TYPE ? policy.defaultHoldPoints.chat : policy.defaultHoldPoints.web;
  return Number(hold) < Number(policy.checkPriceCeilingPoints) ? hold : policy.checkPriceCeilingPoints;
}

/**
 * Probation checks start only while the platform account keeps, beyond their hold, this many ceilings
 * for the checks of solvers already in the market (canaries by count, recovery canaries, verification
 * runs): newcomers, sybils among them, cannot spend what checking everyone else needs.
 */
export const PROBATION_RESERVE_CHECKS = 2;
export const probationReservePoints = (policy: TrustPolicy) =>
  String(Number(policy.checkPriceCeilingPoints) * PROBATION_RESERVE_CHECKS);

/** Whether solver `s` is on probation for task type `t` (fewer passed canaries than probation asks), as SQL. */
export function onProbationSql(
  policy: TrustPolicy,
  s: ReturnType<typeof sql.fragment>,
  t: ReturnType<typeof sql.fragment>,
) {
  return sql.fragment`COALESCE((SELECT r.canary_passes <
    ${policy.probationCanaries}::int FROM solver_reputation r WHERE r.solver_id = ${s} AND r.task_type = ${t}), ${policy.probationCanaries}::int > 0)`;
}

/**
 * The most a check of task type `t` for solver `s` pays, as SQL: probationCheckPrice while it is on probation,
 * else the ceiling.
 */
export function checkPriceSql(
  policy: TrustPolicy,
  s: ReturnType<typeof sql.fragment>,
  t: ReturnType<typeof sql.fragment>,
) {
  return sql.fragment`(CASE WHEN ${onProbationSql(policy, s, t)}
    THEN (CASE WHEN
      ${t} = ${CHAT_TASK_TYPE} THEN ${probationCheckPrice(policy, CHAT_TASK_TYPE)} ELSE ${probationCheckPrice(policy, 'proxy_fetch')} END)::numeric
    ELSE ${policy.checkPriceCeilingPoints}::numeric END)`;
}

/**
 * After how many attempts the next canary is due, drawn uniformly from 1 to 2N - 1 (mean N), so a
 * solver cannot count its way around them; NULL (never by count) when N is 0.
 */
export function canaryDueAfter(policy: TrustPolicy) {
  const n = policy.canaryEveryTasks;
  return n === 0 ? sql.fragment`NULL::int` : sql.fragment`(1 + floor(random() * ${2 * n - 1}::int))::int`;
}

/**
 * NOTIFY channel on which a solver that may now be due a canary is announced, when the transaction
 * that made it due commits: every worker listens, and starts the canary (src/tasks/canary-starter.ts).
 */
export const CANARY_DUE_CHANNEL = 'canary_due';
/** The pg_notify call that announces solver `solverId` (a SQL expression) on CANARY_DUE_CHANNEL. */
export const announceCanaryDue = (solverId: ReturnType<typeof sql.fragment>) =>
  sql.fragment`pg_notify(${CANARY_DUE_CHANNEL}, json_build_object('solver_id', ${solverId})::text)`;

/** The canary types that are pages the service serves. */
export const PAGE_CANARY_TYPES: readonly CanaryTaskType[] = ['proxy_fetch', 'page_snapshot', 'screenshot'];
/**
 * The task types canaries are sent for under `policy`: web_search only with a search
 * oracle, the page types only where solvers can reach canary pages. A type left out has no probation.
 */
export const activeCanaryTypes = (policy: TrustPolicy): readonly CanaryTaskType[] =>
  CANARY_TASK_TYPES.filter((type) =>
    type === 'web_search' ? policy.searchCanaries : PAGE_CANARY_TYPES.includes(type) ? policy.pageCanaries : true,
  );
export const isCanaryTaskType = (policy: TrustPolicy, taskType: string): taskType is CanaryTaskType =>
  (activeCanaryTypes(policy) as readonly string[]).includes(taskType);
/** The active canary types as a SQL text array. */
export const activeCanaryTypesSql = (policy: TrustPolicy) => sql.array([...activeCanaryTypes(policy)], 'text');

/** A passed canary counts as this many successes: it is checked evidence, a client task is not. */
export const CANARY_PASS_WEIGHT = 3;
/** Weight of the newest completed attempt in the latency moving average. */
const LATENCY_WEIGHT = 0.2;

/**
 * Announces, when `tx` commits, that a solver may now be due a canary (it connected, offers a canary type, left
 * quarantine).
 */
export async function announceCanaryDueIn(
  policy: TrustPolicy,
  tx: CommonQueryMethods,
  solverId: string,
): Promise<void> {
  if (policy.probationCanaries === 0 && policy.canaryEveryTasks === 0) return;
  await tx.query(sql.unsafe`SELECT ${announceCanaryDue(sql.fragment`${solverId}::text`)}`);
}

/** The decay factor of reputation row `r` from its `decayed_at` to now. */
const decay = (policy: TrustPolicy, r: string) =>
  sql.fragment`power(0.5, GREATEST(extract(epoch FROM now() - ${sql.identifier([r, 'decayed_at'])}), 0) / ${policy.halfLifeSeconds}::float8)`;

/**
 * The score of reputation row `r` now: (S + 1) / (S + F + 2) over the decayed successes S (passed
 * canaries weighted CANARY_PASS_WEIGHT) and failures F. A solver with no evidence scores 0.5.
 */
export const scoreOf = oncePer<TrustPolicy, string>((policy, r: string) => {
  const s = sql.fragment`(${sql.identifier([r, 'successes'])} * ${decay(policy, r)})`;
  const f = sql.fragment`(${sql.identifier([r, 'failures'])} * ${decay(policy, r)})`;
  return sql.fragment`((${s} + 1) / (${s} + ${f} + 2))`;
});

/** The evidence of reputation row `r` now: its decayed successes and failures together. */
export const evidenceOf = oncePer<TrustPolicy, string>(
  (policy, r: string) =>
    sql.fragment`((${sql.identifier([r, 'successes'])} + ${sql.identifier([r, 'failures'])}) * ${decay(policy, r)})`,
);

/** The score of a solver with no evidence yet. */
export const PRIOR_SCORE = 0.5;

/** The weight now of one failure counted at `at` (a SQL timestamp): what decay has left of it. */
export const failureWeightNow = (policy: TrustPolicy, at: ReturnType<typeof sql.fragment>) =>
  sql.fragment`power(0.5, GREATEST(extract(epoch FROM now() - ${at}), 0) / ${policy.halfLifeSeconds}::float8)`;

/**
 * A statement (for a CTE) that adds `failures` to existing reputation rows (rows of `source`: solver_id,
 * task_type, failures), decaying them to now first: a failure counted later, or (negative) one taken
 * back at its weight now. Never below 0.
 */
export function adjustFailuresStep(policy: TrustPolicy, source: ReturnType<typeof sql.fragment>) {
  return sql.fragment`
    UPDATE solver_reputation r SET successes = r.successes *
      ${decay(policy, 'r')}, failures = GREATEST(r.failures * ${decay(policy, 'r')} + x.failures, 0), decayed_at = now()
    FROM (SELECT solver_id, task_type, sum(failures)::float8 AS failures FROM (${source}) s GROUP BY solver_id, task_type) x
    WHERE r.solver_id = x.solver_id AND r.task_type = x.task_type
    RETURNING r.solver_id`;
}

/**
 * A solver whose score for a canary type is below TRUST_MIN_SCORE gets no client work of that type,
 * but is due a canary (a recovery canary) when it was sent none of that type for this long: a passed
 * one counts CANARY_PASS_WEIGHT successes, its way back; one every 10 minutes is a trickle.
 */
export const RECOVERY_CANARY_SECONDS = 600;

/** Whether recovery canaries are sent: a threshold excludes solvers, and canaries are sent by count. */
export const recoveryCanaries = (policy: TrustPolicy) => policy.minScore > 0 && policy.canaryEveryTasks > 0;

/** Whether reputation row `r` (as of now) excludes its solver from client work by score. */
export const belowThreshold = (policy: TrustPolicy, r: string) =>
  sql.fragment`${scoreOf(policy, r)} < ${policy.minScore}::float8`;

/** Whether solver `solverId` (an SQL expression) is in an open quarantine. */
export const quarantined = (solverId: ReturnType<typeof sql.fragment>) =>
  sql.fragment`EXISTS (SELECT 1 FROM solver_quarantines x WHERE x.solver_id = ${solverId} AND x.cleared_at IS NULL)`;

/**
 * Whether solver `solverId` (an SQL expression) is marked a verifier (src/trust/verifiers.ts). Beside
 * the other rules matching reads: a run meant for verifiers is matched to verifiers only.
 */
export const isVerifier = (solverId: ReturnType<typeof sql.fragment>) =>
  sql.fragment`EXISTS (SELECT 1 FROM solver_verifiers v WHERE v.solver_id = ${solverId})`;

/** Whether canaries are sent at all under `policy` (for probation, or by count). */
export const checksSent = (policy: TrustPolicy) => policy.probationCanaries > 0 || policy.canaryEveryTasks > 0;

/**
 * Whether an offer of task type `taskType` at `price` (SQL expressions) is one a check can pay: at or
 * below CHECK_PRICE_CEILING_POINTS, or of a type no canary is sent for.
 */
export function checkable(
  policy: TrustPolicy,
  taskType: ReturnType<typeof sql.fragment>,
  price: ReturnType<typeof sql.fragment>,
) {
  if (!checksSent(policy)) return sql.fragment`true`;
  return sql.fragment`(${price} <= ${policy.checkPriceCeilingPoints}::numeric OR NOT (${taskType} = ANY(${activeCanaryTypesSql(policy)})))`;
}

/**
 * Whether capability `c` may take client work: its solver is not quarantined, its price (`price`, by
 * default the capability's own) is one a check can pay (checkable), it has passed its probation
 * canaries for the task type (when canaries of that type are sent at all), and it scores at least the
 * threshold.
 */
export function trusted(policy: TrustPolicy, c = 'c', price?: Fragment) {
  return price === undefined ? trustedAtOwnPrice(policy, c) : trustedAt(policy, c, price);
}

const trustedAtOwnPrice = oncePer<TrustPolicy, string>((policy, c: string) =>
  trustedAt(policy, c, sql.fragment`${sql.identifier([c, 'min_price_points'])}`),
);

function trustedAt(policy: TrustPolicy, c: string, price: Fragment) {
  const solverId = sql.fragment`${sql.identifier([c, 'solver_id'])}`;
  const taskType = sql.fragment`${sql.identifier([c, 'task_type'])}`;
  const { minScore, probationCanaries } = policy;
  // An offer no check can pay is never checked: it gets no client work until it is priced within reach.
  const payable = checkable(policy, taskType, price);
  // With no probation and no threshold the reputation row is not read at all (the hot path).
  if (probationCanaries === 0 && minScore <= 0) return sql.fragment`NOT ${quarantined(solverId)} AND ${payable}`;
  // A type no canary is sent for (web_search without a search oracle) has no probation to pass.
  const probation =
    probationCanaries === 0 ? sql.fragment`false` : sql.fragment`${taskType} = ANY(${activeCanaryTypesSql(policy)})`;
  return sql.fragment`NOT ${quarantined(solverId)} AND ${payable} AND COALESCE(
    (SELECT (r.canary_passes >= ${probationCanaries}::int OR NOT ${probation}) AND ${scoreOf(policy, 'r')} >= ${minScore}::float8
     FROM solver_reputation r WHERE r.solver_id = ${solverId} AND r.task_type = ${taskType}),
    NOT ${probation} AND ${PRIOR_SCORE >= minScore})`;
}

/**
 * A CTE that adds an ended attempt (rows of `closed`: solver_id, task_type, latency_ms) to its
 * solver's evidence: decays the counts to now, then adds a success or a failure; a completed attempt
 * moves the latency average. An attempt the service ended (`counts` null) is not evidence. A canary's
 * attempt does not count towards the next canary, and its success is counted by its verdict instead
 * (judgeCanaryIn); its failure to answer counts like any failure. A failure weighs `failureWeight` (an
 * SQL expression; 1 by default, 0 for a claim that the target failed judged the target's). `reputed`
 * returns the rows it wrote, and `canary_due` the solver it made due a canary by count (its count since
 * the last canary reached the drawn one) or, by a failure that leaves it below the threshold, a recovery
 * canary; announced on CANARY_DUE_CHANNEL when the transaction commits.
 */
export function recordOutcomeStep(
  policy: TrustPolicy,
  counts: 'completed' | 'failed' | null,
  failureWeight?: ReturnType<typeof sql.fragment>,
) {
  const succeeded = counts === 'completed';
  const failed = counts === 'failed';
  const failures = failed ? (failureWeight ?? sql.fragment`1`) : sql.fragment`0`;
  // A failure that takes the solver below the threshold may make it due a recovery canary.
  const recovery =
    failed && recoveryCanaries(policy)
      ? sql.fragment`OR (task_type = ANY(${activeCanaryTypesSql(policy)}) AND ${belowThreshold(policy, 'reputed')})`
      : sql.fragment``;
  return sql.fragment`
    reputed AS (
      INSERT INTO solver_reputation AS r (solver_id, task_type, successes, failures, latency_ms, since_canary, canary_due_after)
      SELECT solver_id, task_type, CASE WHEN canary THEN 0 ELSE ${succeeded ? 1 : 0} END, ${failures},
             ${succeeded ? sql.fragment`latency_ms` : sql.fragment`NULL`}, CASE WHEN canary THEN 0 ELSE 1 END,
             CASE WHEN task_type = ANY(${activeCanaryTypesSql(policy)}) THEN ${canaryDueAfter(policy)} END
      FROM (SELECT closed.*, EXISTS (SELECT 1 FROM canaries k WHERE k.task_id = closed.task_id) AS canary FROM closed) c
      WHERE ${counts !== null}
      ON CONFLICT (solver_id, task_type) DO UPDATE SET
        successes = r.successes * ${decay(policy, 'r')} + EXCLUDED.successes,
        failures = r.failures * ${decay(policy, 'r')} + EXCLUDED.failures,
        latency_ms = COALESCE(r.latency_ms *
          ${1 - LATENCY_WEIGHT}::float8 + EXCLUDED.latency_ms * ${LATENCY_WEIGHT}::float8, EXCLUDED.latency_ms, r.latency_ms),
        since_canary = r.since_canary + EXCLUDED.since_canary,
        decayed_at = now()
      RETURNING solver_id, task_type, since_canary, canary_due_after, successes, failures, decayed_at
    ), canary_due AS (
      SELECT ${announceCanaryDue(sql.fragment`solver_id`)} FROM reputed WHERE since_canary = canary_due_after ${recovery}
    )`;
}

/**
 * A CTE that counts a redundant run for both its solvers (rows of `pair`: solver_id, task_type): one
 * more run each, and when they disagreed one more disagreement each. A disagreement alone cannot say
 * which of them is wrong, so it weighs no failure: the verdict that can (a verifier's, a third run's)
 * counts against the one proven wrong (src/trust/verifiers.ts).
 */
export function recordRedundantRunStep(disagreed: boolean) {
  return sql.fragment`
    reputed AS (
      INSERT INTO solver_reputation AS r (solver_id, task_type, redundant_runs, disagreements)
      SELECT solver_id, task_type, 1, ${disagreed ? 1 : 0} FROM pair
      ON CONFLICT (solver_id, task_type) DO UPDATE SET
        redundant_runs = r.redundant_runs + 1,
        disagreements = r.disagreements + EXCLUDED.disagreements
    )`;
}
