import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { CANARY_PASS_WEIGHT, failureWeightNow, type TrustPolicy } from './reputation';

/**
 * The statements of usage inflation (docs/trust.md): a chat's usage report above the bound of what the
 * service counted is kept as evidence and counts like a failed chat audit. When reports quarantine a
 * solver is the policy's (src/trust/usage-inflation.ts).
 */

type Runner = CommonQueryMethods;

/** A chat's usage as metered (src/chat/usage.ts, MeteredUsage): each part kept as JSON. */
type Usage = Record<'reported' | 'counted' | 'bound' | 'billed', object>;

/**
 * Records an inflated report of a chat settled in this transaction and counts CANARY_PASS_WEIGHT
 * failures against its solver; returns how many such reports the solver has made within
 * `withinSeconds` (this one included) since an admin last cleared it.
 */
export async function recordUsageInflationIn(
  tx: Runner,
  policy: TrustPolicy,
  input: { taskId: string; solverId: string; taskType: string; usage: Usage },
  withinSeconds: number,
): Promise<number> {
  const { taskId, solverId, taskType, usage } = input;
  return tx.oneFirst(sql.type(z.object({ reports: z.number() }))`
    WITH recorded AS (
      INSERT INTO usage_inflations (task_id, solver_id, task_type, reported, counted, bound, billed)
      VALUES (${taskId}, ${solverId}, ${taskType}, ${sql.jsonb(usage.reported as never)}, ${sql.jsonb(usage.counted as never)},
              ${sql.jsonb(usage.bound as never)}, ${sql.jsonb(usage.billed as never)})
      ON CONFLICT (task_id) DO NOTHING
    ), reputed AS (
      INSERT INTO solver_reputation AS r (solver_id, task_type, failures) VALUES (${solverId}, ${taskType}, ${CANARY_PASS_WEIGHT})
      ON CONFLICT (solver_id, task_type) DO UPDATE SET
        successes = r.successes * ${failureWeightNow(policy, sql.fragment`r.decayed_at`)},
        failures = r.failures * ${failureWeightNow(policy, sql.fragment`r.decayed_at`)} + EXCLUDED.failures,
        decayed_at = now()
    )
    -- This report is not visible to the statement that writes it: counted as one more.
    SELECT (1 + count(*))::int AS reports FROM usage_inflations
    WHERE solver_id = ${solverId} AND task_id <> ${taskId}
      AND created_at > now() - make_interval(secs => ${withinSeconds})
      AND created_at > COALESCE((SELECT max(cleared_at) FROM solver_quarantines WHERE solver_id = ${solverId}), '-infinity')`);
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
