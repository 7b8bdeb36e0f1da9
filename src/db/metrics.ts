import { sql } from 'slonik';
import { z } from 'zod';
import { PLATFORM_ACCOUNT_ID } from './ledger';
import type { Db } from './pool';
import { LIVE_NODE_OF_CONNECTION, stateValue } from './matching';

const QueueRow = z.object({ task_type: z.string(), waiting: z.number(), assigned: z.number(), free_slots: z.number() });

/**
 * The figures /metrics reads at scrape time, per task type: client tasks waiting for a solver, tasks assigned,
 * and free slots of connected solvers. Cheap whatever the table sizes: unfinished tasks are found through
 * their open holds (a partial index over tasks in flight only, each task's hold keyed by its id), and
 * slots are those of solvers on live nodes.
 */
export async function queueFigures(db: Db) {
  const rows = await db.any(sql.type(QueueRow)`
    WITH unfinished AS (
      SELECT t.task_type,
             -- Clients' tasks only: the platform's canaries and redundant runs wait for their own reasons.
             count(*) FILTER (WHERE t.status = ${stateValue('queued')} AND h.account_id <> ${PLATFORM_ACCOUNT_ID})::int AS waiting,
             count(*) FILTER (WHERE t.status = ${stateValue('assigned')})::int AS assigned
      FROM holds h JOIN tasks t ON t.task_id = h.hold_id
      WHERE h.status = 'open'
      GROUP BY t.task_type
    ), free AS (
      SELECT sl.task_type, count(*)::int AS free_slots
      FROM solver_slots sl
      JOIN solver_capabilities c ON (c.solver_id, c.task_type, c.model_name) = (sl.solver_id, sl.task_type, sl.model_name)
      JOIN solver_connections sc ON sc.solver_id = sl.solver_id
      ${LIVE_NODE_OF_CONNECTION}
      WHERE sl.attempt_id IS NULL AND sl.slot <= c.max_concurrent
      GROUP BY sl.task_type
    )
    SELECT task_type, COALESCE(u.waiting, 0) AS waiting, COALESCE(u.assigned, 0) AS assigned, COALESCE(f.free_slots, 0) AS free_slots
    FROM unfinished u FULL JOIN free f USING (task_type)`);
  return [...rows];
}

// The work-share gauges look at this much recent work: the window of the alerts of docs/metrics.md.
export const WORK_SHARE_WINDOW_SECONDS = 300;

const WorkShareRow = z.object({
  task_type: z.string(),
  solvers_served: z.number(),
  top_share: z.number().nullable(),
  fairness: z.number().nullable(),
});

/**
 * How work spreads over the solvers, per task type, from the attempts started in the last
 * WORK_SHARE_WINDOW_SECONDS (docs/queue.md, "Sharing work"): how many solvers served any, the largest
 * share one of them took, and Jain's fairness index (Σx)² / (n Σx²) over the attempts of every solver
 * that served any or is online with a capability for the type (1: all took as many; 1/n: one took all).
 */
export async function workShareFigures(db: Db) {
  const rows = await db.any(sql.type(WorkShareRow)`
    WITH recent AS (
      SELECT task_type, solver_id, count(*)::float8 AS n
      FROM task_attempts WHERE started_at > now() - make_interval(secs => ${WORK_SHARE_WINDOW_SECONDS})
      GROUP BY task_type, solver_id
    ), offered AS (
      SELECT DISTINCT c.task_type, c.solver_id
      FROM solver_capabilities c
      JOIN solver_connections sc ON sc.solver_id = c.solver_id
      ${LIVE_NODE_OF_CONNECTION}
    ), per_solver AS (
      SELECT task_type, COALESCE(r.n, 0) AS n FROM recent r FULL JOIN offered o USING (task_type, solver_id)
    )
    SELECT task_type, count(*) FILTER (WHERE n > 0)::int AS solvers_served,
           max(n) / NULLIF(sum(n), 0) AS top_share,
           sum(n) ^ 2 / NULLIF(count(*) * sum(n * n), 0) AS fairness
    FROM per_solver GROUP BY task_type`);
  return [...rows];
}
