import { probationCheckNeed, recommendedPlatformPoints, type CheckFunding } from '../../src/db/check-funding';
import { DEFAULT_TRUST_POLICY, type TrustPolicy } from '../../src/db/reputation';
import { checkFundingProblem } from '../../src/trust/check-funding';

/** What the operator is told at start about the platform account (docs/trust.md, "Who pays the checks"). */

const policy: TrustPolicy = { ...DEFAULT_TRUST_POLICY, probationCanaries: 1, pageCanaries: true, searchCanaries: false };
const funding = (available: string, over: Partial<CheckFunding> = {}): CheckFunding => ({
  account_id: 'platform',
  available_points: available,
  check_price_points: probationCheckNeed(policy),
  recommended_points: recommendedPlatformPoints(policy),
  checks_unfunded: Number(available) < Number(probationCheckNeed(policy)),
  solvers_awaiting_checks: 0,
  task_types_awaiting_checks: [],
  ...over,
});

test('the recommended amount holds one new solver\'s checks of every checked type at once, beyond the reserve', () => {
  // The reserve (two ceilings, 200), then proxy_fetch, page_snapshot and screenshot at a default web
  // task's hold (10) and strong-tier chat at a default chat's (100).
  expect(recommendedPlatformPoints(policy)).toBe('330');
  expect(recommendedPlatformPoints({ ...policy, searchCanaries: true })).toBe('340');
  expect(recommendedPlatformPoints({ ...policy, pageCanaries: false })).toBe('300');
  // Each probation check within the ceiling, and the reserve two of them.
  expect(recommendedPlatformPoints({ ...policy, checkPriceCeilingPoints: '5' })).toBe('30');
  // A newcomer's check starts with its hold and the reserve available: the cheapest, a web one.
  expect(probationCheckNeed(policy)).toBe('210');
  expect(probationCheckNeed({ ...policy, pageCanaries: false })).toBe('300');
});

test('below one check\'s hold the account is unfunded, below the recommended amount low, and otherwise nothing is said', () => {
  const unfunded = checkFundingProblem(policy, funding('0'));
  expect(unfunded?.level).toBe('unfunded');
  expect(unfunded?.message).toMatch(/0 points available, less than the 210 a new solver's check needs .*: no solver leaves probation.*solver_checks_unfunded.*POST \/v1\/admin\/deposit for account_id "platform" \(330 points/);
  expect(checkFundingProblem(policy, funding('209.5'))?.level).toBe('unfunded');
  expect(checkFundingProblem(policy, funding('210'))?.level).toBe('low');
  expect(checkFundingProblem(policy, funding('330'))).toBeNull();
});

test('without probation an unfunded account leaves solvers unchecked, and no client is refused for it', () => {
  const message = checkFundingProblem({ ...policy, probationCanaries: 0 }, funding('0'))?.message;
  expect(message).toMatch(/no solver is checked until it can/);
  expect(message).not.toMatch(/probation|solver_checks_unfunded/);
});

test('with no checks sent at all, an empty platform account is nothing to warn about', () => {
  const none = { ...policy, probationCanaries: 0, canaryEveryTasks: 0 };
  expect(checkFundingProblem(none, funding('0', { checks_unfunded: false }))).toBeNull();
});
