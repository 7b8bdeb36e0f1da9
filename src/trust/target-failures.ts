import dns from 'node:dns';
import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { PLATFORM_ACCOUNT_ID } from '../db/ledger';
import type { TargetFailureType } from '../contract/lifecycle';
import { adjustFailuresStep } from '../db/reputation';
import type { TargetClaim } from '../db/target-claims';

/**
 * Target failures (docs/trust.md, "Target failures"): a solver's error that says the target failed
 * (TARGET_FAILURE_TYPES) is a claim. It is not held against the solver when it is corroborated: the
 * service's own check confirms it, or another solver claimed the same of the same origin lately. An
 * uncorroborated claim counts as the solver's failure until another solver's claim corroborates it (the
 * failure is then taken back); one that another solver contradicts by answering the same task counts
 * whatever corroborated it. A failure that is the target's is charged to the task's account instead, on
 * its rate limit.
 */

type Runner = CommonQueryMethods;

// The service's own lookup of a host a solver could not resolve: a slow answer confirms nothing.
const DNS_CHECK_TIMEOUT_MS = 2000;

const ClaimTaskRow = z.object({ url: z.string().nullable(), account_id: z.string() });

/**
 * Reads the task of a claimed attempt and checks the claim where the service can: a host that does not
 * resolve here either. Null when the task has no URL to judge (the claim then counts as any failure).
 */
export async function examineTargetClaim(db: Runner, attemptId: string, errorType: TargetFailureType): Promise<TargetClaim | null> {
  const task = await db.maybeOne(sql.type(ClaimTaskRow)`
    SELECT t.payload ->> 'url' AS url, t.account_id FROM task_attempts a JOIN tasks t ON t.task_id = a.task_id WHERE a.attempt_id = ${attemptId}`);
  if (!task?.url || !URL.canParse(task.url)) return null;
  const url = new URL(task.url);
  if (url.origin === 'null') return null;
  const confirmed = errorType === 'host_not_found' && (await hostDoesNotResolve(url.hostname));
  return { errorType, target: url.origin, accountId: task.account_id, platform: task.account_id === PLATFORM_ACCOUNT_ID, confirmed };
}

/** Whether the host surely does not exist: the resolver says so (a timeout or a resolver failure says nothing). */
async function hostDoesNotResolve(hostname: string): Promise<boolean> {
  const host = hostname.replace(/^\[|\]$/g, '');
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), DNS_CHECK_TIMEOUT_MS);
  });
  const lookup = dns.promises.lookup(host, { all: true }).then(
    () => false,
    (error: NodeJS.ErrnoException) => error.code === 'ENOTFOUND' || error.code === 'ENODATA',
  );
  try {
    return await Promise.race([lookup, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * In the transaction that completes task `taskId` with `solverId`'s answer: the other solvers' claims
 * that this task's target failed are contradicted, and those not held against them so far now are.
 * Only a task answered after a failed attempt can have any.
 */
export async function contradictTargetClaimsIn(tx: Runner, taskId: string, solverId: string): Promise<void> {
  await tx.query(sql.unsafe`
    WITH before AS (
      SELECT attempt_id, solver_id, task_type, verdict FROM target_failures
      WHERE task_id = ${taskId} AND solver_id <> ${solverId} AND verdict <> 'contradicted'
      FOR UPDATE
    ), contradicted AS (
      UPDATE target_failures f SET verdict = 'contradicted', reason = 'answered_by_another', judged_at = now()
      FROM before WHERE f.attempt_id = before.attempt_id
    ), counted AS (
      ${adjustFailuresStep(sql.fragment`SELECT solver_id, task_type, 1 AS failures FROM before WHERE verdict = 'target'`)}
    )
    SELECT 1`);
}
