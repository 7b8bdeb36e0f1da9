import { sql } from 'slonik';
import { z } from 'zod';
import type { CapabilityTaskType } from '../schemas/domain';
import type { TaskState } from '../contract/lifecycle';
import { taskCostColumns } from './ledger';
import { verificationColumn } from './verification';
import type { Db } from './pool';
import { TASK_SUMMARY_COLUMNS, TaskCostRow, TaskRow } from './tasks/records';

/**
 * An account's tasks, newest first, a page at a time. Pages are cut by the key (created_at, task_id),
 * not by an offset, so tasks created while a client pages through never shift what it has still to
 * read: every task that existed at the first page is returned exactly once.
 */

export interface TaskListFilter {
  status?: TaskState;
  taskType?: CapabilityTaskType;
  /** Inclusive lower bound of created_at. */
  createdAfter?: string;
  /** Exclusive upper bound of created_at. */
  createdBefore?: string;
  /** Where the previous page ended (`nextCursor` of that page). */
  after?: TaskListCursor;
  limit: number;
}

/** The key of the last task of a page; created_at keeps PostgreSQL's microseconds, so the key is exact. */
export interface TaskListCursor {
  createdAt: string;
  taskId: string;
}

const ListedRow = TaskRow.omit({ result: true }).merge(TaskCostRow).extend({ cursor_at: z.string() });
export type ListedTask = Omit<z.infer<typeof ListedRow>, 'account_id' | 'cursor_at'>;

export async function listTasks(
  db: Db,
  accountId: string,
  filter: TaskListFilter,
): Promise<{ tasks: ListedTask[]; nextCursor: TaskListCursor | null }> {
  const page = await pageOfTasks(db, [sql.fragment`account_id = ${accountId}`], filter);
  return { tasks: page.tasks.map(({ account_id: _account, ...task }) => task), nextCursor: page.nextCursor };
}

/** The admin's task finder: the same pages over every account's tasks, narrowed by account or task id. */
export async function findTasks(
  db: Db,
  filter: TaskListFilter & { accountId?: string; taskId?: string },
): Promise<{ tasks: (ListedTask & { account_id: string })[]; nextCursor: TaskListCursor | null }> {
  return pageOfTasks(
    db,
    [
      ...(filter.accountId ? [sql.fragment`account_id = ${filter.accountId}`] : []),
      ...(filter.taskId ? [sql.fragment`task_id = ${filter.taskId}`] : []),
    ],
    filter,
  );
}

async function pageOfTasks(db: Db, scope: ReturnType<typeof sql.fragment>[], filter: TaskListFilter) {
  const conditions = [
    sql.fragment`true`,
    ...scope,
    ...(filter.status ? [sql.fragment`status = ${filter.status}`] : []),
    ...(filter.taskType ? [sql.fragment`task_type = ${filter.taskType}`] : []),
    ...(filter.createdAfter ? [sql.fragment`created_at >= ${filter.createdAfter}::timestamptz`] : []),
    ...(filter.createdBefore ? [sql.fragment`created_at < ${filter.createdBefore}::timestamptz`] : []),
    ...(filter.after
      ? [sql.fragment`(created_at, task_id) < (${filter.after.createdAt}::timestamptz, ${filter.after.taskId})`]
      : []),
  ];
  // One row more than the page tells whether another page follows.
  const rows = await db.any(sql.type(ListedRow)`
    SELECT ${TASK_SUMMARY_COLUMNS}, ${taskCostColumns(sql.fragment`tasks.task_id`)}, ${verificationColumn(sql.fragment`tasks.task_id`)},
           to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS cursor_at
    FROM tasks WHERE ${sql.join(conditions, sql.fragment` AND `)}
    ORDER BY created_at DESC, task_id DESC
    LIMIT ${filter.limit + 1}`);
  const page = rows.slice(0, filter.limit);
  const last = page[page.length - 1];
  return {
    tasks: page.map(({ cursor_at: _cursor, ...task }) => task),
    nextCursor: rows.length > filter.limit && last ? { createdAt: last.cursor_at, taskId: last.task_id } : null,
  };
}
