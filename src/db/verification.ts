import { sql, type DatabaseTransactionConnection } from 'slonik';
import { z } from 'zod';
import { heldEarningsId, refundFromEarnings, type RefundMovement } from './ledger';
import { refundedDeliveryIn, type DueDelivery } from './webhooks';

/**
 * What is known of a task's result, and the refund of one found wrong (docs/trust.md, "Escrow and
 * refunds"). `refundTask` is the one place a verdict against a client task becomes money: every check
 * that proves a result wrong calls it.
 */

/**
 * Refunds a task's client from its solver's unvested pay for it (`refundFromEarnings`) and writes its
 * `task.refunded` delivery, in the caller's transaction; the caller makes the deliveries' first attempt
 * once it commits. Nothing moves when the pay is not held (vested, refunded already, never escrowed).
 */
export async function refundTask(
  tx: DatabaseTransactionConnection,
  taskId: string,
): Promise<{ movement: RefundMovement; webhooks: DueDelivery[] }> {
  const movement = await refundFromEarnings(tx, taskId);
  return { movement, webhooks: movement.applied ? await refundedDeliveryIn(tx, taskId) : [] };
}

/** The task's `verification` (VERIFICATION_STATES) as a column of a statement over tasks (`taskId` names its id). */
export function verificationColumn(taskId: ReturnType<typeof sql.fragment>) {
  return sql.fragment`
    CASE
      WHEN EXISTS (SELECT 1 FROM ledger_entries WHERE idempotency_key = 'refund:' || ${taskId}) THEN 'refunded'
      WHEN EXISTS (SELECT 1 FROM redundant_runs r WHERE r.task_id = ${taskId} AND r.status IN ('disagreed', 'refuted'))
        OR EXISTS (SELECT 1 FROM holds h JOIN solver_quarantines q ON q.solver_id = h.account_id AND q.cleared_at IS NULL
                   WHERE h.hold_id = ${heldEarningsId('')} || ${taskId} AND h.status = 'open') THEN 'disputed'
      WHEN EXISTS (SELECT 1 FROM redundant_runs r WHERE r.task_id = ${taskId} AND r.status IN ('agreed', 'upheld')) THEN 'verified'
      ELSE 'unchecked'
    END AS verification`;
}

/**
 * The latest counted proof against `solverId` on a task of the same client account as `clientTaskId`,
 * concluded within `windowSeconds` (a run whose `wrong_solver_id` is the solver and whose evidence has
 * no `correlated_with`, the mark of a proof that did not count), or null. Takes a transaction-level
 * advisory lock per (solver, account) first, so two proofs judged at once see each other: one counts.
 */
export async function countedProofFromAccountIn(
  tx: DatabaseTransactionConnection,
  proof: { solverId: string; clientTaskId: string; windowSeconds: number },
): Promise<string | null> {
  const account = sql.fragment`(SELECT account_id FROM tasks WHERE task_id = ${proof.clientTaskId})`;
  await tx.query(
    sql.unsafe`SELECT pg_advisory_xact_lock(hashtextextended('proof:' || ${proof.solverId} || ':' || ${account}, 0))`,
  );
  return tx.maybeOneFirst(sql.type(z.object({ task_id: z.string() }))`
    SELECT r.task_id FROM redundant_runs r JOIN tasks t ON t.task_id = r.task_id
    WHERE r.wrong_solver_id = ${proof.solverId} AND r.task_id <> ${proof.clientTaskId} AND t.account_id = ${account}
      AND r.concluded_at > now() - make_interval(secs => ${proof.windowSeconds}) AND NOT (COALESCE(r.evidence, '{}'::jsonb) ? 'correlated_with')
    ORDER BY r.concluded_at DESC LIMIT 1`);
}
