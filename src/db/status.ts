import { sql } from 'slonik';
import { z } from 'zod';
import { HOLD_OPEN } from './ledger';
import { clientWaiting, LIVE_NODE_OF_CONNECTION } from './matching';
import type { Db } from './pool';

/** A statement PostgreSQL answers at once when it serves: the readiness probe and the admin status. */
export async function pingDatabase(db: Db): Promise<void> {
  await db.oneFirst(sql.unsafe`SELECT 1`);
}

/** Counts shown by GET /v1/admin/status; each query is cheap (indexed or small tables). */
export async function statusCounts(db: Db): Promise<Record<string, unknown>> {
  const accounts = await db.oneFirst(sql.type(z.object({ count: z.number() }))`
    SELECT count(*)::int AS count FROM accounts WHERE kind = 'user'`);
  const openHolds = await db.oneFirst(sql.type(z.object({ count: z.number() }))`
    SELECT count(*)::int AS count FROM holds WHERE status = ${HOLD_OPEN}`);
  return { accounts, open_holds: openHolds };
}

const QueueRow = z.object({
  task_type: z.string(),
  queued: z.number(),
  oldest_wait_seconds: z.number().nullable(),
  free_slots: z.number(),
  slots: z.number(),
});

/**
 * Per task type: client tasks waiting for a slot (not the platform's canaries and redundant runs), how long the
 * oldest has waited, and the slots of online
 * solvers (free and in all). Capacity counts slots up to each capability's max_concurrent.
 */
export async function queueStatus(db: Db): Promise<Record<string, Omit<z.infer<typeof QueueRow>, 'task_type'>>> {
  const rows = await db.any(sql.type(QueueRow)`
    WITH waiting AS (
      SELECT task_type, count(*)::int AS queued, round(extract(epoch FROM now() - min(arrival))::numeric, 3)::float8 AS oldest_wait_seconds
      FROM task_queue q WHERE ${clientWaiting('q')} GROUP BY task_type
    ), capacity AS (
      SELECT c.task_type, count(*) FILTER (WHERE sl.attempt_id IS NULL)::int AS free_slots, count(*)::int AS slots
      FROM solver_capabilities c
      JOIN solver_connections sc ON sc.solver_id = c.solver_id
      ${LIVE_NODE_OF_CONNECTION}
      JOIN solver_slots sl ON (sl.solver_id, sl.task_type, sl.model_name) = (c.solver_id, c.task_type, c.model_name) AND sl.slot <= c.max_concurrent
      GROUP BY c.task_type
    )
    SELECT COALESCE(w.task_type, k.task_type) AS task_type, COALESCE(w.queued, 0) AS queued, w.oldest_wait_seconds,
           COALESCE(k.free_slots, 0) AS free_slots, COALESCE(k.slots, 0) AS slots
    FROM waiting w FULL JOIN capacity k ON k.task_type = w.task_type
    ORDER BY 1`);
  return Object.fromEntries(rows.map(({ task_type, ...row }) => [task_type, row]));
}
