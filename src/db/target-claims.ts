import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { isRequestFailureType, type TargetFailureType } from '../contract/lifecycle';
import { PLATFORM_ACCOUNT_ID } from './ledger';
import { chargeRequestsStep } from './rate-limits';
import { adjustFailuresStep, failureWeightNow, isVerifier, type TrustPolicy } from './reputation';

/**
 * The statements of a solver's claim that the target failed: the task it is about, its judging in the
 * statement that ends its attempt (closeAttemptIn, src/db/tasks/attempts.ts), and its contradiction by
 * another solver's answer. What a claim is and how the service checks it: src/trust/target-failures.ts
 * and docs/trust.md, "Target failures".
 */

/**
 * Another solver's claim on the same origin within this long corroborates a claim: the target failed for two
 * solvers.
 */
export const TARGET_CORROBORATION_SECONDS = 3600;

/** A claim's task, as the statement that ends the attempt judges it. */
export interface TargetClaim {
  errorType: TargetFailureType;
  /** The origin of the task's URL; for a request's failure (REQUEST_FAILURE_TYPES), the URL itself. */
  target: string;
  accountId: string;
  /**
   * A platform task: a canary's page is the service's own, and a redundant run's URL was answered by
   * the client's solver, so a claim on one is always held against the solver.
   */
  platform: boolean;
  /** The service's own check found the same failure. */
  confirmed: boolean;
  /**
   * A canary's host name the solver could not resolve, and the service cannot tell it could (a name
   * under localhost, or one it cannot resolve either): the canary could not be made, so nobody's failure.
   */
  canaryName?: boolean;
}

/**
 * CTEs that judge the claim of the attempt in `closed` (its one row) and apply the verdict: `claim`
 * records it (returning its verdict), `corroborated` takes back the failures of other solvers' claims
 * on the same target that it corroborates, and the task's account is charged on its rate limit when the
 * failure is the target's (or its request's). The claim's own failure is counted by the reputation step,
 * weighted by `claimFailures` (0 when the claim is the target's, else 1). A target's failure is
 * corroborated by any such claim on its origin; a request's by a claim of the same type on the same URL.
 * A verifier's claim needs no other: a verifier is the operator's own, the reference checks trust.
 */
export function judgeTargetClaimSteps(policy: TrustPolicy, claim: TargetClaim) {
  const recent = (f: string) =>
    sql.fragment`${sql.identifier([f, 'created_at'])} > now() - make_interval(secs => ${TARGET_CORROBORATION_SECONDS})`;
  const sameKind = (f: string) =>
    isRequestFailureType(claim.errorType)
      ? sql.fragment`${sql.identifier([f, 'error_type'])} = ${claim.errorType}`
      : sql.fragment`TRUE`;
  const canaryName = claim.canaryName === true;
  return sql.fragment`
    corroborating AS (
      SELECT EXISTS (
        SELECT 1 FROM target_failures f, closed
        WHERE f.target = ${claim.target} AND ${sameKind('f')} AND f.solver_id <> closed.solver_id AND f.verdict <> 'contradicted'
          AND f.reason NOT IN ('platform_task', 'canary_name') AND ${recent('f')}
      ) AS found,
      ${isVerifier(sql.fragment`(SELECT solver_id FROM closed)`)} AS verifier
    ), claim AS (
      INSERT INTO target_failures (attempt_id, task_id, solver_id, task_type, account_id, target, error_type, verdict, reason)
      SELECT closed.attempt_id, closed.task_id, closed.solver_id, closed.task_type, ${claim.accountId}, ${claim.target}, ${claim.errorType},
        CASE WHEN
          ${canaryName} THEN 'target' WHEN ${claim.platform} THEN 'solver' WHEN ${claim.confirmed} OR corroborating.found OR corroborating.verifier THEN 'target' ELSE 'solver' END,
        CASE WHEN ${canaryName} THEN 'canary_name' WHEN ${claim.platform} THEN 'platform_task' WHEN ${claim.confirmed} THEN 'service_check'
             WHEN corroborating.found THEN 'corroborated' WHEN corroborating.verifier THEN 'verifier' ELSE 'uncorroborated' END
      FROM closed, corroborating
      ON CONFLICT (attempt_id) DO NOTHING
      RETURNING solver_id, verdict, reason
    ), corroborated AS (
      -- Other solvers' claims on this target, held against them so far, are the target's too.
      UPDATE target_failures f SET verdict = 'target', reason = 'corroborated', judged_at = now()
      FROM claim
      WHERE claim.verdict = 'target' AND claim.reason <> 'canary_name' AND f.target =
        ${claim.target} AND ${sameKind('f')} AND f.verdict = 'solver' AND f.reason = 'uncorroborated'
        AND f.solver_id <> claim.solver_id AND ${recent('f')}
      RETURNING f.solver_id, f.task_type, f.created_at
    ), taken_back AS (
      ${adjustFailuresStep(policy, sql.fragment`SELECT solver_id, task_type, -${failureWeightNow(policy, sql.fragment`created_at`)} AS failures FROM corroborated`)}
    ), ${chargeRequestsStep(
      'limited',
      sql.fragment`SELECT
        ${claim.accountId}::text AS account_id, ${policy.targetFailureRequestCost}::int AS requests FROM claim WHERE claim.verdict = 'target' AND claim.reason <> 'canary_name'`,
    )}`;
}

/** The failures the claim's own attempt counts: none when it is the target's. */
export const claimFailures = sql.fragment`COALESCE((SELECT CASE WHEN verdict = 'target' THEN 0 ELSE 1 END FROM claim), 1)`;

const ClaimTaskRow = z.object({ url: z.string().nullable(), account_id: z.string(), purpose: z.string() });

/** The task of an attempt, as a claim on it is judged: its URL (null when it has none), its account and its purpose. */
export async function claimTaskOf(
  db: CommonQueryMethods,
  attemptId: string,
): Promise<{ url: string | null; accountId: string; platform: boolean; purpose: string } | null> {
  const task = await db.maybeOne(sql.type(ClaimTaskRow)`
    SELECT t.payload ->> 'url' AS url, t.account_id, t.purpose FROM task_attempts a JOIN tasks t ON t.task_id = a.task_id WHERE a.attempt_id = ${attemptId}`);
  return (
    task && {
      url: task.url,
      accountId: task.account_id,
      platform: task.account_id === PLATFORM_ACCOUNT_ID,
      purpose: task.purpose,
    }
  );
}

/**
 * In the transaction that completes task `taskId` with `solverId`'s answer: the other solvers' claims
 * that this task's target failed are contradicted, and those not held against them so far now are.
 * Only a task answered after a failed attempt can have any.
 */
export async function contradictTargetClaimsIn(
  tx: CommonQueryMethods,
  policy: TrustPolicy,
  taskId: string,
  solverId: string,
): Promise<void> {
  await tx.query(sql.unsafe`
    WITH before AS (
      SELECT attempt_id, solver_id, task_type, verdict FROM target_failures
      WHERE task_id = ${taskId} AND solver_id <> ${solverId} AND verdict <> 'contradicted'
      FOR UPDATE
    ), contradicted AS (
      UPDATE target_failures f SET verdict = 'contradicted', reason = 'answered_by_another', judged_at = now()
      FROM before WHERE f.attempt_id = before.attempt_id
    ), counted AS (
      ${adjustFailuresStep(policy, sql.fragment`SELECT solver_id, task_type, 1 AS failures FROM before WHERE verdict = 'target'`)}
    )
    SELECT 1`);
}
