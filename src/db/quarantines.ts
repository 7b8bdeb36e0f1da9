import { sql, type CommonQueryMethods, type DatabaseTransactionConnection } from 'slonik';
import { z } from 'zod';
import { heldEarningsId, HOLD_OPEN, PLATFORM_ACCOUNT_ID, release } from './ledger';
import { refundTask } from './verification';
import type { DueDelivery } from './webhooks';
import type { Db } from './pool';
import { announceCanaryDueIn, isCanaryTaskType, PRIOR_SCORE, scoreOf, trusted, type TrustPolicy } from './reputation';

/** Quarantines, and what solvers and admins see of reputation and quarantines (docs/trust.md). */

type Runner = CommonQueryMethods;

const ReputationRow = z.object({
  task_type: z.string(),
  score: z.number(),
  successes: z.number(),
  failures: z.number(),
  latency_ms: z.number().nullable(),
  canary_passes: z.number(),
  canary_failures: z.number(),
  redundant_runs: z.number(),
  disagreements: z.number(),
  verified_passes: z.number(),
  verified_failures: z.number(),
  client_work: z.boolean(),
});
export type Reputation = z.infer<typeof ReputationRow> & { on_probation: boolean };

const QuarantineRow = z.object({
  quarantine_id: z.string(),
  solver_id: z.string(),
  task_type: z.string(),
  reason: z.string(),
  evidence: z.record(z.unknown()),
  started_at: z.string(),
  cleared_at: z.string().nullable(),
  cleared_note: z.string().nullable(),
  confirmed_at: z.string().nullable(),
  confirmed_note: z.string().nullable(),
});
export type Quarantine = z.infer<typeof QuarantineRow>;

const QUARANTINE_COLUMNS = sql.fragment`quarantine_id::text AS quarantine_id, solver_id, task_type, reason, evidence,
  to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS started_at,
  to_char(cleared_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS cleared_at, cleared_note,
  to_char(confirmed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS confirmed_at, confirmed_note`;

/**
 * Quarantines a solver for a task type with `reason` and its `evidence`, in the caller's transaction,
 * unless it is in an open quarantine already. Returns whether this opened one.
 */
export async function quarantineIn(
  tx: Runner,
  input: { solverId: string; taskType: string; reason: string; evidence: Record<string, unknown> },
): Promise<boolean> {
  const opened = await tx.maybeOneFirst(sql.type(z.object({ quarantine_id: z.string() }))`
    INSERT INTO solver_quarantines (solver_id, task_type, reason, evidence)
    VALUES (${input.solverId}, ${input.taskType}, ${input.reason}, ${sql.jsonb(input.evidence as never)})
    ON CONFLICT DO NOTHING
    RETURNING quarantine_id::text`);
  return opened !== null;
}

/**
 * A solver's reputation for each task type it offers or has evidence for: the score now (decayed
 * counts, rounded), the evidence, and whether it may take client work of that type.
 */
export async function reputationOf(db: Runner, policy: TrustPolicy, solverId: string): Promise<Reputation[]> {
  const rows = await db.any(sql.type(ReputationRow)`
    SELECT t.task_type,
           round(COALESCE(${scoreOf(policy, 'r')}, ${PRIOR_SCORE}::float8)::numeric, 4)::float8 AS score,
           round(COALESCE(r.successes * power(0.5, extract(epoch FROM now() - r.decayed_at) /
             ${policy.halfLifeSeconds}::float8), 0)::numeric, 3)::float8 AS successes,
           round(COALESCE(r.failures * power(0.5, extract(epoch FROM now() - r.decayed_at) /
             ${policy.halfLifeSeconds}::float8), 0)::numeric, 3)::float8 AS failures,
           round(r.latency_ms)::float8 AS latency_ms,
           COALESCE(r.canary_passes, 0) AS canary_passes, COALESCE(r.canary_failures, 0) AS canary_failures,
           COALESCE(r.redundant_runs, 0) AS redundant_runs, COALESCE(r.disagreements, 0) AS disagreements,
           COALESCE(r.verified_passes, 0) AS verified_passes, COALESCE(r.verified_failures, 0) AS verified_failures,
           -- Its cheapest offer of the type: client work goes to any offer a check can pay.
           ${trusted(policy, 't', sql.fragment`COALESCE((SELECT min(p.min_price_points) FROM solver_capabilities p WHERE p.solver_id = t.solver_id AND p.task_type = t.task_type), 0)`)} AS client_work
    FROM (
      SELECT ${solverId}::text AS solver_id, task_type FROM solver_capabilities WHERE solver_id = ${solverId}
      UNION SELECT solver_id, task_type FROM solver_reputation WHERE solver_id = ${solverId}
    ) t
    LEFT JOIN solver_reputation r ON r.solver_id = t.solver_id AND r.task_type = t.task_type
    ORDER BY t.task_type`);
  return rows.map((row) => ({
    ...row,
    on_probation: row.canary_passes < policy.probationCanaries && isCanaryTaskType(policy, row.task_type),
  }));
}

/** What is held of a solver's earnings: the sum of its open `held:` holds, and how many tasks. */
export async function heldEarnings(db: Runner, solverId: string): Promise<{ held_points: string; held_tasks: number }> {
  return db.one(sql.type(z.object({ held_points: z.string(), held_tasks: z.number() }))`
    SELECT trim_scale(COALESCE(sum(remaining), 0))::text AS held_points, count(*)::int AS held_tasks
    FROM holds WHERE account_id = ${solverId} AND status = ${HOLD_OPEN} AND hold_id LIKE ${heldEarningsId('%')}`);
}

/** Open quarantines, newest first, each with what is held of its solver's earnings. */
export async function listQuarantines(
  db: Runner,
): Promise<(Quarantine & { held_points: string; held_tasks: number })[]> {
  const rows = await db.any(sql.type(QuarantineRow)`
    SELECT ${QUARANTINE_COLUMNS} FROM solver_quarantines WHERE cleared_at IS NULL ORDER BY started_at DESC LIMIT 500`);
  return Promise.all(rows.map(async (row) => ({ ...row, ...(await heldEarnings(db, row.solver_id)) })));
}

/** A solver's quarantines (open and cleared, newest first). */
export async function quarantinesOf(db: Runner, solverId: string): Promise<Quarantine[]> {
  return db.any(sql.type(QuarantineRow)`
    SELECT ${QUARANTINE_COLUMNS} FROM solver_quarantines WHERE solver_id = ${solverId} ORDER BY started_at DESC LIMIT 100`) as Promise<
    Quarantine[]
  >;
}

/**
 * Clears a solver's open quarantine and gives back its held earnings (each `held:` hold released to
 * available). Its evidence stays: a solver cleared scores as its record says. Null when none is open.
 */
export async function clearQuarantine(
  db: Db,
  policy: TrustPolicy,
  solverId: string,
  note: string | null,
): Promise<{ quarantine: Quarantine; released_points: string } | null> {
  return db.transaction(async (tx: DatabaseTransactionConnection) => {
    const cleared = await tx.maybeOne(sql.type(QuarantineRow)`
      UPDATE solver_quarantines SET cleared_at = now(), cleared_note = ${note}
      WHERE solver_id = ${solverId} AND cleared_at IS NULL
      RETURNING ${QUARANTINE_COLUMNS}`);
    if (!cleared) return null;
    // The solver's balance row, which a settlement paying it holds until it commits: earnings held by
    // one that read the quarantine as open are seen below and released with the rest.
    await tx.query(sql.unsafe`SELECT 1 FROM balances WHERE account_id = ${solverId} FOR UPDATE`);
    const { held_points: releasedPoints } = await heldEarnings(tx, solverId);
    const holds = await tx.anyFirst(sql.type(z.object({ hold_id: z.string() }))`
      SELECT hold_id FROM holds WHERE account_id = ${solverId} AND status = ${HOLD_OPEN} AND hold_id LIKE ${heldEarningsId('%')} ORDER BY hold_id`);
    for (const holdId of holds) await release(tx, { holdId });
    // A solver on probation is due a canary again.
    await announceCanaryDueIn(policy, tx, solverId);
    return { quarantine: cleared, released_points: releasedPoints };
  });
}

/** What confirming a quarantine did: the tasks refunded, what was forfeited and refunded in all. */
export interface Confirmed {
  quarantine: Quarantine;
  forfeited_points: string;
  refunded_points: string;
  refunded_tasks: number;
  /** The `task.refunded` deliveries written, whose first attempt is the caller's to make once this returns. */
  webhooks: DueDelivery[];
}

/**
 * Confirms a solver's open quarantine: the solver stays quarantined, and its pay not vested (every open
 * `held:` hold: the tasks it served since its oldest unvested pay, and those settled while quarantined)
 * is forfeited to refund each task's client (`refundTask`). Null when none is open. A later
 * confirmation forfeits what has been held since.
 */
export async function confirmQuarantine(db: Db, solverId: string, note: string | null): Promise<Confirmed | null> {
  return db.transaction(async (tx: DatabaseTransactionConnection) => {
    const confirmed = await tx.maybeOne(sql.type(QuarantineRow)`
      UPDATE solver_quarantines SET confirmed_at = COALESCE(confirmed_at, now()), confirmed_note = COALESCE(${note}, confirmed_note)
      WHERE solver_id = ${solverId} AND cleared_at IS NULL
      RETURNING ${QUARANTINE_COLUMNS}`);
    if (!confirmed) return null;
    // Every balance row the refunds move, locked at once in the global order (a settlement takes them
    // in that order too); a hold written after this look is taken by the next confirmation.
    await tx.query(sql.unsafe`
      SELECT 1 FROM balances WHERE account_id = ANY(
        SELECT ${solverId}::text UNION SELECT ${PLATFORM_ACCOUNT_ID}::text
        UNION SELECT t.account_id FROM holds h JOIN tasks t ON ${heldEarningsId('')} || t.task_id = h.hold_id
        WHERE h.account_id = ${solverId} AND h.status = ${HOLD_OPEN} AND h.hold_id LIKE ${heldEarningsId('%')})
      ORDER BY account_id FOR UPDATE`);
    const taskIds = await tx.anyFirst(sql.type(z.object({ task_id: z.string() }))`
      SELECT substr(hold_id, ${heldEarningsId('').length + 1}) AS task_id FROM holds
      WHERE account_id = ${solverId} AND status = ${HOLD_OPEN} AND hold_id LIKE ${heldEarningsId('%')} ORDER BY hold_id`);
    const refundedIds: string[] = [];
    const webhooks: DueDelivery[] = [];
    for (const taskId of taskIds) {
      const { movement, webhooks: due } = await refundTask(tx, taskId);
      if (movement.applied) refundedIds.push(taskId);
      webhooks.push(...due);
    }
    const totals = await tx.one(sql.type(z.object({ forfeited: z.string(), refunded: z.string() }))`
      SELECT trim_scale(COALESCE(sum(amount) FILTER (WHERE kind = 'forfeit'), 0))::text AS forfeited,
             trim_scale(COALESCE(sum(amount) FILTER (WHERE kind = 'refund'), 0))::text AS refunded
      FROM ledger_entries WHERE idempotency_key = ANY(
        SELECT k || id FROM unnest(${sql.array(refundedIds, 'text')}) id, unnest(ARRAY['forfeit:' || ${heldEarningsId('')}, 'refund:']) k)`);
    return {
      quarantine: confirmed,
      forfeited_points: totals.forfeited,
      refunded_points: totals.refunded,
      refunded_tasks: refundedIds.length,
      webhooks,
    };
  });
}
