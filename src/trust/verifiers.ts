import type { CommonQueryMethods } from 'slonik';
import { quarantineIn } from '../db/quarantines';
import { addVerifiedOutcomeIn, lockVerifiedRecordIn } from '../db/verifiers';
import type { TrustPolicy } from '../db/reputation';
import { CHAT_TASK_TYPE } from '../schemas/domain';
import { CHAT_VERIFICATION_SPRT } from './chat-agreement';
import { SPRT, sprtStep, sprtThresholds, SUBTLE_SPRT, type SprtDecision, type SprtParameters } from './sprt';

/**
 * The tests a task type's verified outcomes feed, and what a failure weighs. A web result proven wrong
 * is proof: it weighs like a failed canary and raises the solver's verification rate for a while. A
 * chat's failure is the client's answer being the odd one out of three draws (src/trust/chat-agreement.ts),
 * which an honest solver that samples is a third of the time: evidence only in number, so it feeds its
 * own test alone, and neither weighs on the score nor raises the rate.
 */
const testsOf = (taskType: string): { tests: { name: string; parameters: SprtParameters }[]; proof: boolean } =>
  taskType === CHAT_TASK_TYPE
    ? { tests: [{ name: 'chat', parameters: CHAT_VERIFICATION_SPRT }], proof: false }
    : {
        tests: [
          { name: 'sprt', parameters: SPRT },
          { name: 'subtle', parameters: SUBTLE_SPRT },
        ],
        proof: true,
      };

/**
 * What a verdict on a client task does to the solver checked (docs/trust.md, "Verified client tasks").
 * The verifiers themselves and the statements: src/db/verifiers.ts.
 */

/**
 * Adds one verified outcome of a client task to its solver's record, in the caller's transaction: a
 * pass, or a result proven wrong, which weighs like a failed canary (CANARY_PASS_WEIGHT failures; a
 * chat's, testsOf). The sequential test (src/trust/sprt.ts) takes it as one observation, unless it is
 * not `tested` (a chat's triad with no odd one out: a pass for the rate only); when it decides, the solver is
 * quarantined (reason `verification_failed`) with `evidence` and the test's figures, or counted as
 * accepted (`sprt_accepts`, what lets its pay vest by checks, src/trust/escrow.ts). A verifier's
 * record is never tested: it is the reference.
 */
export async function recordVerifiedOutcomeIn(
  tx: CommonQueryMethods,
  policy: TrustPolicy,
  outcome: { solverId: string; taskType: string; failed: boolean; evidence: Record<string, unknown>; tested?: boolean },
): Promise<{ decision: SprtDecision }> {
  const { solverId, taskType, failed } = outcome;
  const before = await lockVerifiedRecordIn(tx, solverId, taskType);
  if (!before) return { decision: 'continue' };
  const { tests, proof } = testsOf(taskType);
  const untested = { llr: 0, decision: 'continue' as SprtDecision };
  const [step, subtle] = [before.sprt_llr, before.sprt_subtle_llr].map((llr, i) =>
    outcome.tested === false || !tests[i] ? { ...untested, llr } : sprtStep(llr, failed, tests[i].parameters),
  );
  await addVerifiedOutcomeIn(tx, policy, {
    solverId,
    taskType,
    failed,
    proof,
    llr: step.llr,
    subtleLlr: subtle.llr,
    accepted: step.decision === 'accept',
  });
  // Either test quarantines; only the first's accepts count toward vesting by checks.
  const decidedAt = [step, subtle].findIndex((taken, i) => tests[i] && taken.decision === 'quarantine');
  const decided =
    decidedAt < 0
      ? null
      : { test: tests[decidedAt].name, step: [step, subtle][decidedAt], parameters: tests[decidedAt].parameters };
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
