import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import type { MeteredUsage } from '../chat/usage';
import { CANARY_PASS_WEIGHT, failureWeightNow, trustPolicy } from '../db/reputation';

type Runner = CommonQueryMethods;

/**
 * Usage inflation (docs/trust.md): a chat whose solver reported more tokens than the bound of what the
 * service counted (src/chat/usage.ts) is billed at the bound, and the report is evidence. It counts like
 * a failed chat audit: CANARY_PASS_WEIGHT failures, and a quarantine once the solver has made
 * USAGE_INFLATION_QUARANTINE_REPORTS such reports within the trust half-life (since an admin last
 * cleared it). The bound already tolerates other tokenizers by half, so one report above it is no slip
 * of counting; two are a habit.
 */
export const USAGE_INFLATION_QUARANTINE_REPORTS = 2;

export const USAGE_INFLATION_REASON = 'usage_inflated';

/** Records an inflated report of a chat settled in this transaction; says whether it quarantined the solver. */
export async function recordUsageInflationIn(
  tx: Runner,
  input: { taskId: string; solverId: string; taskType: string; usage: MeteredUsage },
): Promise<{ quarantined: boolean }> {
  const { taskId, solverId, taskType, usage } = input;
  const evidence = { task_id: taskId, reported: usage.reported, counted: usage.counted, bound: usage.bound, billed: usage.billed };
  const reports = await tx.oneFirst(sql.type(z.object({ reports: z.number() }))`
    WITH recorded AS (
      INSERT INTO usage_inflations (task_id, solver_id, task_type, reported, counted, bound, billed)
      VALUES (${taskId}, ${solverId}, ${taskType}, ${sql.jsonb(usage.reported as never)}, ${sql.jsonb(usage.counted as never)},
              ${sql.jsonb(usage.bound as never)}, ${sql.jsonb(usage.billed as never)})
      ON CONFLICT (task_id) DO NOTHING
    ), reputed AS (
      INSERT INTO solver_reputation AS r (solver_id, task_type, failures) VALUES (${solverId}, ${taskType}, ${CANARY_PASS_WEIGHT})
      ON CONFLICT (solver_id, task_type) DO UPDATE SET
        successes = r.successes * ${failureWeightNow(sql.fragment`r.decayed_at`)},
        failures = r.failures * ${failureWeightNow(sql.fragment`r.decayed_at`)} + EXCLUDED.failures,
        decayed_at = now()
    )
    -- This report is not visible to the statement that writes it: counted as one more.
    SELECT (1 + count(*))::int AS reports FROM usage_inflations
    WHERE solver_id = ${solverId} AND task_id <> ${taskId}
      AND created_at > now() - make_interval(secs => ${trustPolicy().halfLifeSeconds})
      AND created_at > COALESCE((SELECT max(cleared_at) FROM solver_quarantines WHERE solver_id = ${solverId}), '-infinity')`);
  if (reports < USAGE_INFLATION_QUARANTINE_REPORTS) return { quarantined: false };
  const quarantined = await tx.maybeOneFirst(sql.type(z.object({ quarantine_id: z.string() }))`
    INSERT INTO solver_quarantines (solver_id, task_type, reason, evidence)
    VALUES (${solverId}, ${taskType}, ${USAGE_INFLATION_REASON}, ${sql.jsonb({ ...evidence, inflated_reports: reports, within_seconds: trustPolicy().halfLifeSeconds } as never)})
    ON CONFLICT DO NOTHING
    RETURNING quarantine_id::text`);
  return { quarantined: quarantined !== null };
}

const UsageInflationRow = z.object({
  task_id: z.string(),
  task_type: z.string(),
  reported: z.record(z.unknown()),
  counted: z.record(z.unknown()),
  bound: z.record(z.unknown()),
  billed: z.record(z.unknown()),
  created_at: z.string(),
});
export type UsageInflation = z.infer<typeof UsageInflationRow>;

/** A solver's inflated usage reports, newest first. */
export async function usageInflationsOf(db: Runner, solverId: string, limit = 50): Promise<readonly UsageInflation[]> {
  return db.any(sql.type(UsageInflationRow)`
    SELECT task_id, task_type, reported, counted, bound, billed,
           to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS created_at
    FROM usage_inflations WHERE solver_id = ${solverId} ORDER BY created_at DESC LIMIT ${limit}`);
}
