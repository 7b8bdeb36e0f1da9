import { isStorableText } from '../schemas/text';
import type { TaskListFilter } from '../db/task-listing';
import { PAGE_LIMIT_DEFAULT, type ListTasksRequest } from '../schemas/queries';
import { RequestValidationError } from './validation';

/**
 * Cursors are opaque to clients: the key where a page ended, as base64url JSON. A cursor that does not
 * decode to the expected shape is a 422 at `["query","cursor"]`.
 */

export const encodeCursor = (key: readonly string[]): string => Buffer.from(JSON.stringify(key)).toString('base64url');

/** The time part of a cursor as lists write it (`to_char` in UTC, microseconds), a real instant PostgreSQL can hold. */
export function isCursorTime(value: string): boolean {
  const match = /^(\d{4})-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.(\d{3})\d{3}Z$/.exec(value);
  if (!match || match[1] === '0000') return false;
  const millis = `${value.slice(0, 23)}Z`;
  return !Number.isNaN(Date.parse(millis)) && new Date(millis).toISOString() === millis;
}

/**
 * The key of a cursor: one string per part, each accepted by its check. Every part is text PostgreSQL
 * can store (no NUL), whatever its check, since a cursor's parts go into the page's query.
 */
export function decodeCursor(
  cursor: string | undefined,
  parts: ReadonlyArray<(value: string) => boolean>,
): string[] | undefined {
  if (cursor === undefined) return undefined;
  let key: unknown;
  try {
    key = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    key = undefined;
  }
  const valid =
    Array.isArray(key) &&
    key.length === parts.length &&
    key.every((value, index) => typeof value === 'string' && isStorableText(value) && parts[index]!(value));
  if (!valid) {
    throw new RequestValidationError([
      {
        type: 'value_error',
        loc: ['query', 'cursor'],
        msg: 'Value error, not a cursor this list returned',
        input: cursor,
      },
    ]);
  }
  return key as string[];
}

/** Where a task list's page starts: the `(created_at, task_id)` key its cursor holds. */
function taskListAfter(cursor: string | undefined): { createdAt: string; taskId: string } | undefined {
  const after = decodeCursor(cursor, [isCursorTime, (taskId) => taskId.length > 0]);
  return after && { createdAt: after[0]!, taskId: after[1]! };
}

/** A task list's query (the client's list, the admin's finder) as the filter the database reads. */
export function taskListFilter(query: ListTasksRequest): TaskListFilter {
  return {
    status: query.status,
    taskType: query.task_type,
    createdAfter: query.created_after,
    createdBefore: query.created_before,
    after: taskListAfter(query.cursor),
    limit: query.limit ?? PAGE_LIMIT_DEFAULT,
  };
}

/** A page of tasks as every task list answers it. */
export function taskListPage<T>(page: { tasks: T[]; nextCursor: { createdAt: string; taskId: string } | null }) {
  const next = page.nextCursor && encodeCursor([page.nextCursor.createdAt, page.nextCursor.taskId]);
  return { data: page.tasks, has_more: next !== null, next_cursor: next };
}
