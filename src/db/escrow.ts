import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { heldEarningsId, HOLD_OPEN, holdSteps, release } from './ledger';
import type { Db } from './pool';
import { quarantined } from './reputation';

/**
 * The statements of escrowed earnings (docs/trust.md, "Escrow and refunds"): a solver's pay for a task
 * held as `held:<task id>`, the holds due to vest, and what an account has not vested yet. When pay is
 * held and when it vests is the escrow policy's (src/trust/escrow.ts).
 */

type Runner = CommonQueryMethods;

/**
 * Holds a solver's pay for a task settled in this transaction: it moves from available to held on the
 * solver's account as `held:<task id>`; with `quarantinedOnly`, only while the solver is quarantined.
 */
export async function holdEarningsIn(
  tx: Runner,
  taskId: string,
  solverId: string,
  earned: string,
  { quarantinedOnly }: { quarantinedOnly: boolean },
): Promise<void> {
  if (/^0*(\.0*)?$/.test(earned)) return;
  // The quarantine is asked here, after the settlement locked the solver's balance row: a clearing that
  // committed meanwhile (it locks that row too) is seen, and nothing is held after it.
  const held = quarantinedOnly ? quarantined(sql.fragment`${solverId}::text`) : sql.fragment`true`;
  await tx.query(sql.unsafe`
    WITH ${holdSteps(sql.fragment`SELECT ${heldEarningsId(taskId)}::text AS hold_id WHERE ${held}`, solverId, earned)}
    SELECT 1`);
}

// Holds vested per sweep: a backlog drains over a few sweeps rather than in one long pass.
const VEST_BATCH = 500;

/** Checks a solver passed (canaries, redundant runs agreed, on either side) with when each was judged. */
const PASSED_CHECKS = sql.fragment`
  SELECT solver_id, judged_at FROM canaries WHERE verdict = 'passed'
  UNION ALL SELECT first_solver_id, judged_at FROM redundant_runs WHERE status = 'agreed'
  UNION ALL SELECT second_solver_id, judged_at FROM redundant_runs WHERE status = 'agreed'`;

/**
 * Checks a solver failed (canaries failed, runs that proved its result wrong and counted: not those
 * marked `correlated_with`, docs/trust.md "Verified client tasks") with when each was judged.
 */
const FAILED_CHECKS = sql.fragment`
  SELECT solver_id, judged_at FROM canaries WHERE verdict = 'failed'
  UNION ALL SELECT wrong_solver_id, concluded_at FROM redundant_runs WHERE wrong_solver_id IS NOT NULL AND NOT (COALESCE(evidence,
    '{}'::jsonb) ? 'correlated_with')`;

/** The task id of earnings hold `h`. */
const heldTaskId = (h: string) =>
  sql.fragment`substr(${sql.identifier([h, 'hold_id'])}, ${heldEarningsId('').length + 1})`;

/**
 * Whether the solver of earnings hold `h` has had a sequential test accept it for the held task's type.
 * Checks passed vouch only for such a solver: one that makes up a page in ten passes most checks on its
 * honest pages, yet rarely reaches an accept (about 0.9^49), so its pay waits for the period, and for
 * its quarantine to freeze it.
 */
const acceptedForType = (h: string) => sql.fragment`EXISTS (
  SELECT 1 FROM tasks t JOIN solver_reputation r ON r.solver_id = ${sql.identifier([h, 'account_id'])} AND r.task_type = t.task_type
  WHERE t.task_id = ${heldTaskId(h)} AND r.sprt_accepts > 0)`;

/**
 * Whether the task of earnings hold `h` is still being verified (its run has not concluded): its pay
 * waits, so that a verdict against it still finds the pay to refund.
 */
const underVerification = (h: string) => sql.fragment`EXISTS (
  SELECT 1 FROM redundant_runs r WHERE r.task_id = ${heldTaskId(h)} AND r.concluded_at IS NULL)`;

/**
 * When pay vests: `vestingSeconds` after it was held, or once its solver passed `vestingChecks` checks since (0:
 * by time only).
 */
export interface Vesting {
  vestingSeconds: number;
  vestingChecks: number;
}

/**
 * Open earnings holds due to vest now, oldest first: past the period, or vouched for by checks; never a
 * quarantined solver's, nor one whose task is being verified.
 */
export async function dueToVest(
  db: Runner,
  { vestingSeconds, vestingChecks }: Vesting,
): Promise<readonly { hold_id: string }[]> {
  // Vouched for: the solver passed `vestingChecks` checks judged after the pay was held, failed none
  // since, and was accepted by a sequential test for the task's type.
  const vouched =
    vestingChecks > 0
      ? sql.fragment`h.created_at < (
          SELECT judged_at FROM (${PASSED_CHECKS}) p WHERE p.solver_id = h.account_id AND p.judged_at > h.created_at
          ORDER BY judged_at LIMIT 1 OFFSET ${vestingChecks - 1})
        AND NOT EXISTS (SELECT 1 FROM (${FAILED_CHECKS}) f WHERE f.solver_id = h.account_id AND f.judged_at > h.created_at)
        AND ${acceptedForType('h')}`
      : sql.fragment`false`;
  return db.any(sql.type(z.object({ hold_id: z.string() }))`
    SELECT h.hold_id FROM holds h
    WHERE h.status = ${HOLD_OPEN} AND h.hold_id LIKE ${heldEarningsId('%')}
      AND (h.created_at <= now() - make_interval(secs => ${vestingSeconds}) OR ${vouched})
      AND NOT ${quarantined(sql.fragment`h.account_id`)} AND NOT ${underVerification('h')}
    ORDER BY h.created_at LIMIT ${VEST_BATCH}`);
}

/**
 * Vests one earnings hold in its own transaction, which locks the hold first (as a refund does) and asks
 * again whether its solver is quarantined or its task being verified. Returns whether it vested.
 */
export async function vestHold(db: Db, holdId: string): Promise<boolean> {
  return db.transaction(async (tx) => {
    const open = await tx.maybeOneFirst(sql.type(z.object({ free: z.boolean() }))`
      SELECT NOT ${quarantined(sql.fragment`h.account_id`)} AND NOT ${underVerification('h')} AS free
      FROM holds h WHERE h.hold_id = ${holdId} AND h.status = ${HOLD_OPEN} FOR UPDATE`);
    return open ? (await release(tx, { holdId })).applied : false;
  });
}

const EarningsRow = z.object({
  unvested_points: z.string(),
  unvested_tasks: z.number(),
  frozen: z.boolean(),
  next_vesting_at: z.string().nullable(),
});
export type Earnings = z.infer<typeof EarningsRow>;

/**
 * An account's pay not vested yet (its open `held:` holds; part of its `held_points`), whether it is
 * frozen by a quarantine, and when the oldest of it vests by time, `vestingSeconds` after it was held
 * (null when none, or while frozen).
 */
export async function earningsOf(db: Runner, accountId: string, vestingSeconds: number): Promise<Earnings> {
  return db.one(sql.type(EarningsRow)`
    SELECT trim_scale(COALESCE(sum(remaining), 0))::text AS unvested_points, count(*)::int AS unvested_tasks,
           ${quarantined(sql.fragment`${accountId}::text`)} AS frozen,
           CASE WHEN count(*) > 0 AND ${vestingSeconds} > 0 AND NOT ${quarantined(sql.fragment`${accountId}::text`)}
             THEN to_char((min(created_at) + make_interval(secs =>
               ${vestingSeconds})) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END AS next_vesting_at
    FROM holds WHERE account_id = ${accountId} AND status = ${HOLD_OPEN} AND hold_id LIKE ${heldEarningsId('%')}`);
}
