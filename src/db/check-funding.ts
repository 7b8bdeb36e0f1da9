import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { CHAT_TASK_TYPE } from '../schemas/domain';
import { PLATFORM_ACCOUNT_ID } from './ledger';
import { LIVE_NODE_OF_CONNECTION } from './matching';
import {
  activeCanaryTypes,
  activeCanaryTypesSql,
  checkPriceSql,
  probationCheckPrice,
  probationReservePoints,
  quarantined,
  type TrustPolicy,
} from './reputation';

/**
 * Whether the platform account can pay the checks (docs/trust.md, "Who pays the checks"): a canary
 * starts only while the account's available points cover its hold, the check price ceiling, so a
 * deployment whose account holds less keeps every new solver on probation and serves nobody with it.
 * What the operator reads (start-up warning, /v1/admin/status, the console, /metrics) and what a client
 * refused for that reason is told come from here.
 */

type Runner = CommonQueryMethods;

/** Whether checks are sent at all: probation canaries, or canaries by count (recovery ones among them). */
export const checksSent = (policy: TrustPolicy) => policy.probationCanaries > 0 || policy.canaryEveryTasks > 0;

/**
 * What the platform account should hold for the start-up warning to stay quiet: the holds of one new
 * solver's probation checks at once, one per checked type at the ceiling (a solver has at most one
 * canary open per type). Less than one ceiling, no check starts; between the two, a new solver's checks
 * run one after the other.
 */
export function recommendedPlatformPoints(policy: TrustPolicy): string {
  return String(
    activeCanaryTypes(policy).reduce(
      (sum, type) => sum + Number(probationCheckPrice(policy, type)),
      Number(probationReservePoints(policy)),
    ),
  );
}

/**
 * What the account must have available for a newcomer's check to start: the cheapest probation check's
 * hold and the reserve kept beyond it for the checks of solvers already in the market.
 */
export function probationCheckNeed(policy: TrustPolicy): string {
  const holds = activeCanaryTypes(policy).map((type) => Number(probationCheckPrice(policy, type)));
  return String(
    Number(probationReservePoints(policy)) +
      (holds.length ? Math.min(...holds) : Number(policy.checkPriceCeilingPoints)),
  );
}

/**
 * Capability `c` (with its connection to a live node) waits for a probation check: its type is checked,
 * its solver is not quarantined, is priced where a check can pay it (above the ceiling it is never
 * checked, for another reason), has passed fewer canaries of the type than probation asks, and has none
 * open. Chat is checked on strong-tier capabilities only.
 */
function awaitingCheck(policy: TrustPolicy) {
  return sql.fragment`
    FROM solver_capabilities c
    JOIN solver_connections sc ON sc.solver_id = c.solver_id AND NOT sc.draining
    ${LIVE_NODE_OF_CONNECTION}
    WHERE ${policy.probationCanaries > 0}
      AND c.task_type = ANY(${activeCanaryTypesSql(policy)})
      AND (c.task_type <> ${CHAT_TASK_TYPE} OR c.tier = 'strong')
      AND c.solver_id <> ${PLATFORM_ACCOUNT_ID}
      AND c.min_price_points <= ${checkPriceSql(policy, sql.fragment`c.solver_id`, sql.fragment`c.task_type`)}
      AND NOT ${quarantined(sql.fragment`c.solver_id`)}
      AND COALESCE((SELECT r.canary_passes <
        ${policy.probationCanaries}::int FROM solver_reputation r WHERE r.solver_id = c.solver_id AND r.task_type = c.task_type), true)
      AND NOT EXISTS (SELECT 1 FROM canaries k WHERE k.solver_id = c.solver_id AND k.task_type = c.task_type AND k.verdict IS NULL)`;
}

/** The platform account's available points, as a SQL expression (0 when it has no balance row). */
const platformAvailable = sql.fragment`COALESCE((SELECT available FROM balances WHERE account_id = ${PLATFORM_ACCOUNT_ID}), 0)`;

const FundingRow = z.object({
  available_points: z.string(),
  checks_paid: z.boolean(),
  solvers_awaiting_checks: z.number(),
  task_types_awaiting_checks: z.array(z.string()),
});

export interface CheckFunding {
  account_id: string;
  available_points: string;
  /** What a newcomer's check needs available (probationCheckNeed): its hold and the reserve beyond it. */
  check_price_points: string;
  /** recommendedPlatformPoints. */
  recommended_points: string;
  /** Checks are sent and the account cannot hold one: none starts until it is funded. */
  checks_unfunded: boolean;
  /** Solvers online on probation for some type with no check open: served once their checks pass. */
  solvers_awaiting_checks: number;
  task_types_awaiting_checks: string[];
}

/** The platform account's standing against the checks it pays, and the solvers waiting for one. */
export async function checkFunding(db: Runner, policy: TrustPolicy): Promise<CheckFunding> {
  const row = await db.one(sql.type(FundingRow)`
    WITH waiting AS (SELECT DISTINCT c.solver_id, c.task_type ${awaitingCheck(policy)})
    SELECT trim_scale(${platformAvailable})::text AS available_points,
           ${platformAvailable} >= ${probationCheckNeed(policy)}::numeric AS checks_paid,
           (SELECT count(DISTINCT solver_id)::int FROM waiting) AS solvers_awaiting_checks,
           ARRAY(SELECT DISTINCT task_type FROM waiting ORDER BY 1) AS task_types_awaiting_checks`);
  return {
    account_id: PLATFORM_ACCOUNT_ID,
    available_points: row.available_points,
    check_price_points: probationCheckNeed(policy),
    recommended_points: recommendedPlatformPoints(policy),
    checks_unfunded: checksSent(policy) && !row.checks_paid,
    solvers_awaiting_checks: row.solvers_awaiting_checks,
    task_types_awaiting_checks: row.task_types_awaiting_checks,
  };
}

/**
 * Solvers online that would serve a client's task of this type (its strong-tier models, its country)
 * but wait on probation for a check the platform account cannot pay now; 0 while it can pay one (their
 * check is then on its way) or when none waits.
 */
export async function solversAwaitingUnfundedChecks(
  db: Runner,
  policy: TrustPolicy,
  taskType: string,
  options: { strongModels?: string[]; country?: string | null } = {},
): Promise<number> {
  if (policy.probationCanaries === 0) return 0;
  const strongModels =
    options.strongModels === undefined
      ? sql.fragment`NULL::text[]`
      : sql.fragment`${sql.array(options.strongModels, 'text')}`;
  const country = options.country ?? null;
  return db.oneFirst(sql.type(z.object({ count: z.number() }))`
    SELECT count(DISTINCT c.solver_id)::int AS count ${awaitingCheck(policy)}
      AND c.task_type = ${taskType}
      AND (${strongModels} IS NULL OR (c.tier = 'strong' AND c.model_name = ANY(${strongModels})))
      AND (${country}::text IS NULL OR c.country = ${country}::text)
      AND ${platformAvailable} < ${checkPriceSql(policy, sql.fragment`c.solver_id`, sql.fragment`c.task_type`)} + ${probationReservePoints(policy)}::numeric`);
}
