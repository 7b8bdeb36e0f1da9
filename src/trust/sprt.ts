/**
 * The arithmetic of verified client tasks (docs/trust.md, "Verified client tasks"), with no I/O: how
 * often a solver's client tasks are verified, and Wald's sequential probability ratio test that decides
 * its quarantine from its verified outcomes.
 */

/** The sequential test's hypotheses and error rates. */
export interface SprtParameters {
  /** H0: an honest solver's rate of results proven wrong (pages change, renders differ). */
  p0: number;
  /** H1: a cheat's rate, the smallest worth stopping (one wrong answer in ten). */
  p1: number;
  /** The chance that one test of an honest solver (at p0) ends in quarantine. */
  alpha: number;
  /** The chance that one test of a cheat (at p1) ends accepting it. */
  beta: number;
}

export const SPRT: SprtParameters = Object.freeze({ p0: 0.01, p1: 0.1, alpha: 0.001, beta: 0.01 });

/**
 * The second test, run beside SPRT on the same outcomes, for a cheat too rare for it: one that makes up
 * 2–3 % of its answers drifts down in SPRT (at p1 10 %) and would never be caught. H0 here is an honest
 * solver proven wrong at 0.3 % (a changed page or a verifier that cannot answer is incomparable, never
 * wrong: docs/trust.md), H1 one at 2 %. Its α is ten times smaller than SPRT's, since an honest solver
 * is tested by both; β is looser, since a cheat it lets pass is tested again at once.
 */
export const SUBTLE_SPRT: SprtParameters = Object.freeze({ p0: 0.003, p1: 0.02, alpha: 0.0001, beta: 0.05 });

/**
 * After a result proven wrong, a solver's client tasks of the type are verified at this rate at least,
 * for its next SUSPICION_OUTCOMES verified outcomes: the floor (2 %) samples a 2 % cheat's made-up
 * answers about once in 2,500 client tasks, and the subtle test needs a few hundred outcomes to decide,
 * tens of thousands of client tasks at the floor alone. An honest solver is rarely proven wrong, so it
 * rarely pays this (docs/trust.md, "Verified client tasks", has the figures).
 */
export const SUSPICION_FRACTION = 0.25;
export const SUSPICION_OUTCOMES = 100;

/** Wald's thresholds on the log-likelihood ratio: at or above `upper` quarantine, at or below `lower` accept. */
export function sprtThresholds(p: SprtParameters = SPRT): { upper: number; lower: number } {
  return { upper: Math.log((1 - p.beta) / p.alpha), lower: Math.log(p.beta / (1 - p.alpha)) };
}

export type SprtDecision = 'quarantine' | 'accept' | 'continue';

/**
 * One verified outcome added to the log-likelihood ratio `llr`. A test that accepts H0 starts again
 * from 0 (the monitoring never ends, and a long clean record must not bank credit a cheat spends later);
 * one that reaches the upper threshold quarantines.
 */
export function sprtStep(
  llr: number,
  failed: boolean,
  p: SprtParameters = SPRT,
): { llr: number; decision: SprtDecision } {
  const next = llr + (failed ? Math.log(p.p1 / p.p0) : Math.log((1 - p.p1) / (1 - p.p0)));
  const { upper, lower } = sprtThresholds(p);
  if (next >= upper) return { llr: next, decision: 'quarantine' };
  if (next <= lower) return { llr: 0, decision: 'accept' };
  return { llr: next, decision: 'continue' };
}

/**
 * A solver's verified passes of a task type that halve its verification rate: about one test accepted
 * (49 passes in a row at the default parameters). Slower would cost honest newcomers more checks;
 * faster would let a solver wrong one time in ten reach the floor before the test has decided (it needs
 * about 50 verified outcomes, often twice that), and serve thousands of client tasks meanwhile.
 */
export const VERIFICATION_RATE_HALVING = 50;

/**
 * The fraction of a solver's client tasks of one type that are verified, after `passes` verified
 * passes: `start` halving every VERIFICATION_RATE_HALVING passes, never below `floor`; at least
 * SUSPICION_FRACTION while fewer than SUSPICION_OUTCOMES verified outcomes followed its last result
 * proven wrong (`sinceFailure`: null when none was; only while verification is on at all).
 */
export function verificationRate(
  passes: number,
  start: number,
  floor: number,
  sinceFailure: number | null = null,
): number {
  const suspected = sinceFailure !== null && sinceFailure < SUSPICION_OUTCOMES && Math.max(start, floor) > 0;
  return Math.min(
    1,
    Math.max(
      floor,
      start * 0.5 ** (Math.max(passes, 0) / VERIFICATION_RATE_HALVING),
      suspected ? SUSPICION_FRACTION : 0,
    ),
  );
}

/** The highest rate verificationRate can give with these settings: draws at or above it verify nothing. */
export const highestVerificationRate = (start: number, floor: number) =>
  Math.max(start, floor) > 0 ? Math.min(1, Math.max(start, floor, SUSPICION_FRACTION)) : 0;
