import { checkFunding, checksSent, type CheckFunding } from '../db/check-funding';
import { PLATFORM_ACCOUNT_ID } from '../db/ledger';
import type { Db } from '../db/pool';
import type { TrustPolicy } from '../db/reputation';
import type { Logger } from '../logger';

/**
 * What the operator is told at start about the platform account, which pays the checks that take new
 * solvers off probation (docs/trust.md, "Who pays the checks"): `unfunded` when it cannot hold one
 * check (every new solver then stays on probation and serves nobody), `low` when it cannot hold one new
 * solver's checks at once (they run one after the other), null when it can or no checks are sent.
 */
export function checkFundingProblem(
  policy: TrustPolicy,
  funding: CheckFunding,
): { level: 'unfunded' | 'low'; message: string } | null {
  if (!checksSent(policy)) return null;
  const available = Number(funding.available_points);
  const fund =
    `fund it with POST /v1/admin/deposit for account_id "${PLATFORM_ACCOUNT_ID}" (${funding.recommended_points} ` +
    `points hold one new solver's checks of every checked type at once)`;
  if (funding.checks_unfunded) {
    // Without probation nobody waits for a check; the solvers just go unchecked.
    const effect =
      policy.probationCanaries > 0
        ? 'no solver leaves probation, and clients are refused with solver_checks_unfunded until it ' + 'can'
        : 'no solver is checked until it can';
    return {
      level: 'unfunded',
      message:
        `the platform account has ${funding.available_points} points available, less than the ${funding.check_price_points} ` +
        `a new solver's check needs (its hold and the reserve kept for the checks of solvers ` +
        `already serving): ${effect}; ${fund}`,
    };
  }
  if (available < Number(funding.recommended_points)) {
    return {
      level: 'low',
      message:
        `the platform account has ${funding.available_points} points available: a new solver's ` +
        `checks run one at a time; ${fund}`,
    };
  }
  return null;
}

/**
 * Logs a warning at start when the platform account cannot pay the checks (checkFundingProblem); returns what it
 * found.
 */
export async function warnIfChecksUnfunded(db: Db, policy: TrustPolicy, logger: Logger): Promise<CheckFunding> {
  const funding = await checkFunding(db, policy);
  const problem = checkFundingProblem(policy, funding);
  if (problem) {
    logger.warn(
      {
        platform_available_points: funding.available_points,
        check_price_points: funding.check_price_points,
        recommended_points: funding.recommended_points,
        solvers_awaiting_checks: funding.solvers_awaiting_checks,
      },
      problem.message,
    );
  }
  return funding;
}
