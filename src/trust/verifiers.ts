import type { CommonQueryMethods } from 'slonik';
import { quarantineIn } from '../db/quarantines';
import { addVerifiedOutcomeIn, lockVerifiedRecordIn } from '../db/verifiers';
import type { TrustPolicy } from '../db/reputation';
import { SPRT, sprtStep, sprtThresholds, SUBTLE_SPRT, type SprtDecision } from './sprt';

/**
 * What a verdict on a client task does to the solver checked (docs/trust.md, "Verified client tasks").
 * The verifiers themselves and the statements: src/db/verifiers.ts.
 */

/**
 * Adds one verified outcome of a client task to its solver's record, in the caller's transaction: a
 * pass, or a result proven wrong, which weighs like a failed canary (CANARY_PASS_WEIGHT failures). The
 * sequential test (src/trust/sprt.ts) takes it as one observation; when it decides, the solver is
 * quarantined (reason `verification_failed`) with `evidence` and the test's figures, or counted as
 * accepted (`sprt_accepts`, what lets its pay vest by checks, src/trust/escrow.ts). A verifier's
 * record is never tested: it is the reference.
 */
export async function recordVerifiedOutcomeIn(
  tx: CommonQueryMethods,
  policy: TrustPolicy,
  outcome: { solverId: string; taskType: string; failed: boolean; evidence: Record<string, unknown> },
): Promise<{ decision: SprtDecision }> {
  const { solverId, taskType, failed } = outcome;
  const before = await lockVerifiedRecordIn(tx, solverId, taskType);
  if (!before) return { decision: 'continue' };
  const step = sprtStep(before.sprt_llr, failed, SPRT);
  const subtle = sprtStep(before.sprt_subtle_llr, failed, SUBTLE_SPRT);
  await addVerifiedOutcomeIn(tx, policy, {
    solverId,
    taskType,
    failed,
    llr: step.llr,
    subtleLlr: subtle.llr,
    accepted: step.decision === 'accept',
  });
  // Either test quarantines; only the first's accepts count toward vesting by checks.
  const decided =
    step.decision === 'quarantine'
      ? { test: 'sprt', step, parameters: SPRT }
      : subtle.decision === 'quarantine'
        ? { test: 'subtle', step: subtle, parameters: SUBTLE_SPRT }
        : null;
  if (decided) {
    const sprt = {
      test: decided.test,
      p0: decided.parameters.p0,
      p1: decided.parameters.p1,
      log_likelihood_ratio: Number(decided.step.llr.toFixed(3)),
      threshold: Number(sprtThresholds(decided.parameters).upper.toFixed(3)),
      verified_passes: before.verified_passes + (failed ? 0 : 1),
      verified_failures: before.verified_failures + (failed ? 1 : 0),
    };
    await quarantineIn(tx, {
      solverId,
      taskType,
      reason: 'verification_failed',
      evidence: { ...outcome.evidence, sprt },
    });
  }
  return { decision: decided ? 'quarantine' : step.decision };
}
