import type { CommonQueryMethods } from 'slonik';
import type { MeteredUsage } from '../chat/usage';
import { quarantineIn } from '../db/quarantines';
import type { TrustPolicy } from '../db/reputation';
import { recordUsageInflationIn as recordIn } from '../db/usage-inflations';

/**
 * Usage inflation (docs/trust.md): a chat whose solver reported more tokens than the bound of what the
 * service counted (src/chat/usage.ts) is billed at the bound, and the report is evidence. It counts like
 * a failed chat audit: CANARY_PASS_WEIGHT failures, and a quarantine once the solver has made
 * USAGE_INFLATION_QUARANTINE_REPORTS such reports within the trust half-life (since an admin last
 * cleared it). The bound already tolerates other tokenizers by half, so one report above it is no slip
 * of counting; two are a habit. The statements: src/db/usage-inflations.ts.
 */
export const USAGE_INFLATION_QUARANTINE_REPORTS = 2;

export const USAGE_INFLATION_REASON = 'usage_inflated';

/** Records an inflated report of a chat settled in this transaction; says whether it quarantined the solver. */
export async function recordUsageInflationIn(
  tx: CommonQueryMethods,
  policy: TrustPolicy,
  input: { taskId: string; solverId: string; taskType: string; usage: MeteredUsage },
): Promise<{ quarantined: boolean }> {
  const { taskId, solverId, taskType, usage } = input;
  const withinSeconds = policy.halfLifeSeconds;
  const reports = await recordIn(tx, policy, input, withinSeconds);
  if (reports < USAGE_INFLATION_QUARANTINE_REPORTS) return { quarantined: false };
  const evidence = {
    task_id: taskId,
    reported: usage.reported,
    counted: usage.counted,
    bound: usage.bound,
    billed: usage.billed,
  };
  const quarantined = await quarantineIn(tx, {
    solverId,
    taskType,
    reason: USAGE_INFLATION_REASON,
    evidence: { ...evidence, inflated_reports: reports, within_seconds: withinSeconds },
  });
  return { quarantined };
}
