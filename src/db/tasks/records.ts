import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { TASK_STATES, VERIFICATION_STATES, type TaskState } from '../../contract/lifecycle';
import { taskCostColumns } from '../ledger';
import { clientWaiting } from '../matching';
import { verificationColumn } from '../verification';

/**
 * The task row, the record clients poll, and its readers. Workflow activities keep the row current
 * through the statements of create.ts, attempts.ts and finish.ts beside this.
 */

type Runner = CommonQueryMethods;

export const TaskStateColumn = z.enum(TASK_STATES as [TaskState, ...TaskState[]]);

export const TaskRow = z.object({
  task_id: z.string(),
  account_id: z.string(),
  task_type: z.string(),
  status: TaskStateColumn,
  payload: z.record(z.any()),
  max_price_points: z.string(),
  price_points: z.string().nullable(),
  timeout_seconds: z.number(),
  solver_id: z.string().nullable(),
  result: z.record(z.any()).nullable(),
  result_expired_at: z.string().nullable(),
  error: z.object({ type: z.string(), message: z.string() }).passthrough().nullable(),
  workflow_id: z.string(),
  created_at: z.string(),
  updated_at: z.string(),
  completed_at: z.string().nullable(),
});
export type TaskRow = z.infer<typeof TaskRow>;

const AttemptRow = z.object({
  attempt_id: z.string(),
  solver_id: z.string(),
  started_at: z.string(),
  ended_at: z.string().nullable(),
  outcome: z.string(),
});

/** Every column of the record but the result, which can be large (listings leave it out). */
export const TASK_SUMMARY_COLUMNS = sql.fragment`
  task_id, account_id, task_type, status, payload, trim_scale(max_price_points)::text AS max_price_points,
  trim_scale(price_points)::text AS price_points, timeout_seconds, solver_id, error, workflow_id,
  created_at, updated_at, completed_at, result_expired_at`;
export const TASK_COLUMNS = sql.fragment`${TASK_SUMMARY_COLUMNS}, result`;

/** What a task held and was charged (`taskCostColumns`), and what is known of its result (`verificationColumn`). */
export const TaskCostRow = z.object({
  held_points: z.string().nullable(),
  estimated_price_points: z.string().nullable(),
  hold_status: z.string().nullable(),
  charged_points: z.string(),
  verification: z.enum(VERIFICATION_STATES),
});
export type TaskCost = z.infer<typeof TaskCostRow>;

export interface TaskRecord extends Omit<TaskRow, 'account_id'>, TaskCost {
  attempts: { solver_id: string; started_at: string; ended_at: string | null; outcome: string }[];
  /** While it waits for a slot: its place in its type's line (1 is next) and how long it has waited. */
  queue?: QueuePlace;
}

const QueuePlace = z.object({ position: z.number(), waited_seconds: z.number() });
export type QueuePlace = z.infer<typeof QueuePlace>;

export async function getTaskRow(db: Runner, taskId: string): Promise<TaskRow | null> {
  return db.maybeOne(sql.type(TaskRow)`SELECT ${TASK_COLUMNS} FROM tasks WHERE task_id = ${taskId}`);
}

/** The task record of decisions.md, or null when the task does not exist or belongs to another account. */
export async function getTaskRecord(db: Runner, taskId: string, accountId?: string): Promise<TaskRecord | null> {
  // One round trip: the attempts come along as JSON, their times in the same ISO 8601 form as the task's.
  const iso = (column: string) =>
    sql.fragment`to_char(${sql.identifier(['ta', column])} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
  const row = await db.maybeOne(sql.type(
    TaskRow.merge(TaskCostRow).extend({ attempts: z.array(AttemptRow), queue: QueuePlace.nullable() }),
  )`
    SELECT ${TASK_COLUMNS}, ${taskCostColumns(sql.fragment`tasks.task_id`)}, ${verificationColumn(sql.fragment`tasks.task_id`)},
      (SELECT json_build_object(
                -- Among client tasks: canaries and runs waiting behind clients are the platform's.
                'position', (SELECT count(*)::int FROM task_queue a WHERE a.task_type = q.task_type AND (a.arrival, a.task_id) <= (q.arrival,
                  q.task_id) AND ${clientWaiting('a')}),
                'waited_seconds', round(extract(epoch FROM now() - q.arrival)::numeric, 3))
       FROM task_queue q WHERE q.task_id = tasks.task_id) AS queue,
      COALESCE((SELECT json_agg(json_build_object('attempt_id', ta.attempt_id, 'solver_id', ta.solver_id, 'started_at', ${iso('started_at')},
                                                  'ended_at', ${iso('ended_at')}, 'outcome', ta.outcome) ORDER BY ta.attempt_number)
                FROM task_attempts ta WHERE ta.task_id = tasks.task_id), '[]') AS attempts
    FROM tasks WHERE task_id = ${taskId}`);
  if (!row || (accountId !== undefined && row.account_id !== accountId)) return null;
  const { account_id: _account, attempts, queue, ...record } = row;
  return {
    ...record,
    attempts: attempts.map(({ attempt_id: _id, ...attempt }) => attempt),
    ...(queue ? { queue } : {}),
  };
}

export async function taskCounts(db: Runner): Promise<Record<string, number>> {
  const rows = await db.any(sql.type(z.object({ status: z.string(), count: z.number() }))`
    SELECT status, count(*)::int AS count FROM tasks GROUP BY status`);
  return Object.fromEntries(rows.map((row) => [row.status, row.count]));
}
