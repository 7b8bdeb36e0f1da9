import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { adjustFailuresStep, CANARY_PASS_WEIGHT, isVerifier } from '../db/reputation';
import { sprtStep, sprtThresholds, type SprtDecision } from './sprt';

/**
 * Verifiers and verified outcomes (docs/trust.md, "Verified client tasks"): the solvers an operator
 * trusts to re-run sampled client tasks, and what a verdict on a client task does to the solver checked.
 */

type Runner = CommonQueryMethods;
/** Marks a solver a verifier, or unmarks it. Returns whether it is one now. */
export async function setVerifier(db: Runner, solverId: string, verifier: boolean): Promise<boolean> {
  if (verifier) await db.query(sql.unsafe`INSERT INTO solver_verifiers (solver_id) VALUES (${solverId}) ON CONFLICT DO NOTHING`);
  else await db.query(sql.unsafe`DELETE FROM solver_verifiers WHERE solver_id = ${solverId}`);
  return verifier;
}

/** When the solver was marked a verifier, or null when it is not one. */
export async function verifierSince(db: Runner, solverId: string): Promise<string | null> {
  return db.maybeOneFirst(sql.type(z.object({ marked_at: z.string() }))`
    SELECT to_char(marked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS marked_at FROM solver_verifiers WHERE solver_id = ${solverId}`);
}

/** A solver's verified passes of a task type: what its verification rate falls with. */
export async function verifiedPasses(db: Runner, solverId: string, taskType: string): Promise<number> {
  return (await db.maybeOneFirst(sql.type(z.object({ verified_passes: z.number() }))`
    SELECT verified_passes FROM solver_reputation WHERE solver_id = ${solverId} AND task_type = ${taskType}`)) ?? 0;
}

const LlrRow = z.object({ sprt_llr: z.number(), verified_passes: z.number(), verified_failures: z.number() });

/**
 * Adds one verified outcome of a client task to its solver's record, in the caller's transaction: a
 * pass, or a result proven wrong, which weighs like a failed canary (CANARY_PASS_WEIGHT failures). The
 * sequential test (src/trust/sprt.ts) takes it as one observation; when it decides, the solver is
 * quarantined (reason `verification_failed`) with `evidence` and the test's figures, or counted as
 * accepted (`sprt_accepts`, what lets its pay vest by checks, src/trust/escrow.ts). A verifier's
 * record is never tested: it is the reference.
 */
export async function recordVerifiedOutcomeIn(
  tx: Runner,
  outcome: { solverId: string; taskType: string; failed: boolean; evidence: Record<string, unknown> },
): Promise<{ decision: SprtDecision }> {
  const { solverId, taskType, failed } = outcome;
  await tx.query(sql.unsafe`
    INSERT INTO solver_reputation (solver_id, task_type) SELECT ${solverId}, ${taskType} WHERE NOT ${isVerifier(sql.fragment`${solverId}::text`)}
    ON CONFLICT DO NOTHING`);
  const before = await tx.maybeOne(sql.type(LlrRow)`
    SELECT sprt_llr, verified_passes, verified_failures FROM solver_reputation r
    WHERE r.solver_id = ${solverId} AND r.task_type = ${taskType} AND NOT ${isVerifier(sql.fragment`r.solver_id`)}
    FOR UPDATE`);
  if (!before) return { decision: 'continue' };
  const step = sprtStep(before.sprt_llr, failed);
  if (failed) {
    await tx.query(sql.unsafe`
      WITH adjusted AS (${adjustFailuresStep(sql.fragment`SELECT ${solverId}::text AS solver_id, ${taskType}::text AS task_type, ${CANARY_PASS_WEIGHT}::float8 AS failures`)})
      SELECT 1`);
  }
  await tx.query(sql.unsafe`
    UPDATE solver_reputation SET sprt_llr = ${step.llr},
      verified_passes = verified_passes + ${failed ? 0 : 1}, verified_failures = verified_failures + ${failed ? 1 : 0},
      sprt_accepts = sprt_accepts + ${step.decision === 'accept' ? 1 : 0}
    WHERE solver_id = ${solverId} AND task_type = ${taskType}`);
  if (step.decision === 'quarantine') {
    const sprt = {
      log_likelihood_ratio: Number(step.llr.toFixed(3)),
      threshold: Number(sprtThresholds().upper.toFixed(3)),
      verified_passes: before.verified_passes + (failed ? 0 : 1),
      verified_failures: before.verified_failures + (failed ? 1 : 0),
    };
    await tx.query(sql.unsafe`
      INSERT INTO solver_quarantines (solver_id, task_type, reason, evidence)
      VALUES (${solverId}, ${taskType}, 'verification_failed', ${sql.jsonb({ ...outcome.evidence, sprt })})
      ON CONFLICT DO NOTHING`);
  }
  return { decision: step.decision };
}
