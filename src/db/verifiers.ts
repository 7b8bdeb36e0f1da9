import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { adjustFailuresStep, CANARY_PASS_WEIGHT, isVerifier, type TrustPolicy } from './reputation';

/**
 * The statements of verifiers and verified outcomes (docs/trust.md, "Verified client tasks"): the
 * solvers an operator trusts to re-run sampled client tasks, and a solver's verified record with the
 * state of its sequential test. What a verdict does: src/trust/verifiers.ts.
 */

type Runner = CommonQueryMethods;

/** Marks a solver a verifier, or unmarks it. Returns whether it is one now. */
export async function setVerifier(db: Runner, solverId: string, verifier: boolean): Promise<boolean> {
  if (verifier)
    await db.query(sql.unsafe`INSERT INTO solver_verifiers (solver_id) VALUES (${solverId}) ON CONFLICT DO NOTHING`);
  else await db.query(sql.unsafe`DELETE FROM solver_verifiers WHERE solver_id = ${solverId}`);
  return verifier;
}

/** When the solver was marked a verifier, or null when it is not one. */
export async function verifierSince(db: Runner, solverId: string): Promise<string | null> {
  return db.maybeOneFirst(sql.type(z.object({ marked_at: z.string() }))`
    SELECT to_char(marked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS marked_at FROM solver_verifiers WHERE solver_id = ${solverId}`);
}

const VerificationRateRow = z.object({
  verified_passes: z.number(),
  verified_since_failure: z.number().nullable(),
  sprt_llr: z.number(),
});

/**
 * What a solver's verification rate of a task type follows: its verified passes, how many verified
 * outcomes followed its last result proven wrong (null: none was), and where its sequential test stands.
 */
export async function verificationRecordOf(
  db: Runner,
  solverId: string,
  taskType: string,
): Promise<z.infer<typeof VerificationRateRow>> {
  return (
    (await db.maybeOne(sql.type(VerificationRateRow)`
      SELECT verified_passes, verified_since_failure, sprt_llr FROM solver_reputation WHERE solver_id = ${solverId} AND task_type = ${taskType}`)) ?? {
      verified_passes: 0,
      verified_since_failure: null,
      sprt_llr: 0,
    }
  );
}

const VerifiedRecordRow = z.object({
  sprt_llr: z.number(),
  sprt_subtle_llr: z.number(),
  verified_passes: z.number(),
  verified_failures: z.number(),
});
export type VerifiedRecord = z.infer<typeof VerifiedRecordRow>;

/**
 * In the caller's transaction: a solver's verified record of a task type (created when it has none),
 * locked until the transaction ends. Null for a verifier, whose record is never tested.
 */
export async function lockVerifiedRecordIn(
  tx: Runner,
  solverId: string,
  taskType: string,
): Promise<VerifiedRecord | null> {
  await tx.query(sql.unsafe`
    INSERT INTO solver_reputation (solver_id, task_type) SELECT ${solverId}, ${taskType} WHERE NOT ${isVerifier(sql.fragment`${solverId}::text`)}
    ON CONFLICT DO NOTHING`);
  return tx.maybeOne(sql.type(VerifiedRecordRow)`
    SELECT sprt_llr, sprt_subtle_llr, verified_passes, verified_failures FROM solver_reputation r
    WHERE r.solver_id = ${solverId} AND r.task_type = ${taskType} AND NOT ${isVerifier(sql.fragment`r.solver_id`)}
    FOR UPDATE`);
}

/**
 * Adds one verified outcome to the record locked by lockVerifiedRecordIn: a pass, or a result proven
 * wrong, which weighs like a failed canary (CANARY_PASS_WEIGHT failures); the tests' log-likelihood
 * ratios become `llr` and `subtleLlr`, and `accepted` counts one more accept (`sprt_accepts`).
 */
export async function addVerifiedOutcomeIn(
  tx: Runner,
  policy: TrustPolicy,
  outcome: {
    solverId: string;
    taskType: string;
    failed: boolean;
    /** A failure that is proof (a web result proven wrong): it weighs on the score and restarts the suspicion count. */
    proof: boolean;
    llr: number;
    subtleLlr: number;
    accepted: boolean;
  },
): Promise<void> {
  const { solverId, taskType, failed } = outcome;
  const proven = failed && outcome.proof;
  if (proven) {
    await tx.query(sql.unsafe`
      WITH adjusted AS
        (${adjustFailuresStep(policy, sql.fragment`SELECT ${solverId}::text AS solver_id, ${taskType}::text AS task_type, ${CANARY_PASS_WEIGHT}::float8 AS failures`)})
      SELECT 1`);
  }
  await tx.query(sql.unsafe`
    UPDATE solver_reputation SET sprt_llr = ${outcome.llr}, sprt_subtle_llr = ${outcome.subtleLlr},
      verified_since_failure = ${proven ? sql.fragment`0` : sql.fragment`verified_since_failure + 1`},
      verified_passes = verified_passes + ${failed ? 0 : 1}, verified_failures = verified_failures + ${failed ? 1 : 0},
      sprt_accepts = sprt_accepts + ${outcome.accepted ? 1 : 0}
    WHERE solver_id = ${solverId} AND task_type = ${taskType}`);
}
