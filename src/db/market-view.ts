import { sql } from 'slonik';
import { z } from 'zod';
import { LIVE_NODE_OF_CONNECTION } from './matching';
import type { Db } from './pool';

/** What the admin routes behind the console read of tasks and solvers (docs/console.md); nothing here writes. */

const AttemptDetailRow = z.object({
  attempt_number: z.number(),
  solver_id: z.string(),
  node_id: z.string(),
  model_name: z.string(),
  price_points: z.string(),
  outcome: z.string(),
  error: z.record(z.unknown()).nullable(),
  started_at: z.string(),
  accepted_at: z.string().nullable(),
  ended_at: z.string().nullable(),
});
export type AttemptDetail = z.infer<typeof AttemptDetailRow>;

/** A task's attempts in order, each with its node, price, outcome and error: the task page's timeline. */
export async function taskAttempts(db: Db, taskId: string): Promise<readonly AttemptDetail[]> {
  return db.any(sql.type(AttemptDetailRow)`
    SELECT attempt_number, solver_id, node_id, model_name, trim_scale(price_points)::text AS price_points, outcome, error,
           started_at, accepted_at, ended_at
    FROM task_attempts WHERE task_id = ${taskId} ORDER BY attempt_number`);
}

const OnlineCapabilityRow = z.object({
  solver_id: z.string(),
  node_id: z.string(),
  draining: z.boolean(),
  connected_at: z.string(),
  task_type: z.string(),
  model_name: z.string(),
  tier: z.string(),
  min_price_points: z.string(),
  max_concurrent: z.number(),
  active_attempts: z.number(),
});

export interface OnlineSolver {
  solver_id: string;
  node_id: string;
  draining: boolean;
  connected_at: string;
  capabilities: {
    task_type: string;
    model_name: string;
    tier: string;
    min_price_points: string;
    max_concurrent: number;
    active_attempts: number;
  }[];
}

/** Most solvers one answer lists: the console's table, not an export. */
const ONLINE_SOLVERS_MAX = 500;

/** Solvers connected to a live node, with what each offers, at what price, and how many of its slots are taken. */
export async function onlineSolvers(db: Db): Promise<OnlineSolver[]> {
  const rows = await db.any(sql.type(OnlineCapabilityRow)`
    WITH online AS (
      SELECT sc.solver_id, sc.node_id, COALESCE(sc.draining, false) AS draining, sc.connected_at
      FROM solver_connections sc
      ${LIVE_NODE_OF_CONNECTION}
      ORDER BY sc.solver_id LIMIT ${ONLINE_SOLVERS_MAX}
    )
    SELECT o.solver_id, o.node_id, o.draining, o.connected_at, c.task_type, c.model_name, c.tier,
           trim_scale(c.min_price_points)::text AS min_price_points, c.max_concurrent,
           (SELECT count(*)::int FROM solver_slots sl
            WHERE (sl.solver_id, sl.task_type, sl.model_name) = (c.solver_id, c.task_type, c.model_name) AND sl.attempt_id IS NOT NULL) AS active_attempts
    FROM online o JOIN solver_capabilities c ON c.solver_id = o.solver_id
    ORDER BY o.solver_id, c.task_type, c.model_name`);
  const solvers = new Map<string, OnlineSolver>();
  for (const { solver_id, node_id, draining, connected_at, ...capability } of rows) {
    const solver = solvers.get(solver_id) ?? { solver_id, node_id, draining, connected_at, capabilities: [] };
    solver.capabilities.push(capability);
    solvers.set(solver_id, solver);
  }
  return [...solvers.values()];
}

const RecentAttemptRow = AttemptDetailRow.omit({ node_id: true }).extend({
  task_id: z.string(),
  task_type: z.string(),
});
export type RecentAttempt = z.infer<typeof RecentAttemptRow>;

/** Most attempts a solver's list holds. */
const RECENT_ATTEMPTS = 50;
/** How far back it looks: the attempts' BRIN index on started_at keeps the scan to these days. */
const RECENT_ATTEMPT_DAYS = 7;

/** A solver's latest attempts (of the last week), newest first, each with the error that ended it, if any. */
export async function recentAttemptsOf(db: Db, solverId: string): Promise<readonly RecentAttempt[]> {
  return db.any(sql.type(RecentAttemptRow)`
    SELECT task_id, task_type, attempt_number, solver_id, model_name, trim_scale(price_points)::text AS price_points, outcome, error,
           started_at, accepted_at, ended_at
    FROM task_attempts
    WHERE solver_id = ${solverId} AND started_at > now() - make_interval(days => ${RECENT_ATTEMPT_DAYS})
    ORDER BY started_at DESC LIMIT ${RECENT_ATTEMPTS}`);
}
