import dns from 'node:dns';
import type { CommonQueryMethods } from 'slonik';
import { isRequestFailureType, type TargetFailureType } from '../contract/lifecycle';
import { claimTaskOf, type TargetClaim } from '../db/target-claims';

/**
 * Target failures (docs/trust.md, "Target failures"): a solver's error that says the target failed
 * (TARGET_FAILURE_TYPES), or that the client's request could not be served (REQUEST_FAILURE_TYPES), is
 * a claim. It is not held against the solver when it is corroborated: the service's own check confirms
 * it, another solver claimed the same of the same target lately, or the solver is a verifier. An
 * uncorroborated claim counts as the solver's failure until another solver's claim corroborates it (the
 * failure is then taken back); one that another solver contradicts by answering the same task counts
 * whatever corroborated it. A failure that is the target's is charged to the task's account instead, on
 * its rate limit. The statements: src/db/target-claims.ts.
 */

type Runner = CommonQueryMethods;

// The service's own lookup of a host a solver could not resolve: a slow answer confirms nothing.
const DNS_CHECK_TIMEOUT_MS = 2000;

/**
 * Reads the task of a claimed attempt and checks the claim where the service can: a host that does not
 * resolve here either. Null when the task has no URL to judge (the claim then counts as any failure).
 */
export async function examineTargetClaim(
  db: Runner,
  attemptId: string,
  errorType: TargetFailureType,
): Promise<TargetClaim | null> {
  const task = await claimTaskOf(db, attemptId);
  if (!task?.url || !URL.canParse(task.url)) return null;
  const url = new URL(task.url);
  if (url.origin === 'null') return null;
  const confirmed = errorType === 'host_not_found' && (await hostDoesNotResolve(url.hostname));
  // A canary name the solver could not resolve: the check could not be made (a name under localhost,
  // which resolvers differ on, or one the service cannot resolve either). One the service resolves is a
  // false claim, the solver's like any on a platform task.
  const canaryName =
    task.purpose === 'canary' && errorType === 'host_not_found' && (isLocalhostName(url.hostname) || confirmed);
  // A request's failure is about that URL (its selector, its body, its stalling), a target's about its origin.
  url.hash = '';
  const target = isRequestFailureType(errorType) ? url.href : url.origin;
  return {
    errorType,
    target,
    accountId: task.accountId,
    platform: task.platform,
    confirmed,
    ...(canaryName ? { canaryName } : {}),
  };
}

/** Names under localhost (RFC 6761): the loopback address to resolvers that know the rule, not found to others. */
const isLocalhostName = (hostname: string) => hostname === 'localhost' || hostname.endsWith('.localhost');

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
