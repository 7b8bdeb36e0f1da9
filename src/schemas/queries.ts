import { z } from './zod';
import { Int } from './common';
import { CAPABILITY_TASK_TYPES } from './domain';
import { TASK_STATES, type TaskState } from '../contract/lifecycle';
import { LEDGER_ENTRY_KINDS, type LedgerEntryKind } from '../contract/ledger';

/** One schema per query string; list routes page with `limit` and the `cursor` of the previous page. */

/** Query values arrive as text; digits become the integer the schema checks (anything else is int_parsing). */
const QueryInt = (schema: z.ZodNumber) =>
  z.preprocess((value) => (typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value), schema);

export const PAGE_LIMIT_DEFAULT = 20;
export const PAGE_LIMIT_MAX = 100;

const Page = {
  limit: QueryInt(Int().min(1).max(PAGE_LIMIT_MAX))
    .optional()
    .openapi({ description: `Items per page, 1-${PAGE_LIMIT_MAX} (default ${PAGE_LIMIT_DEFAULT})` }),
  cursor: z.string().min(1).optional().openapi({ description: 'next_cursor of the previous page' }),
};

/**
 * An ISO 8601 time with its offset, passed on as UTC; a year PostgreSQL cannot store (before 1, after
 * 9999 once in UTC) is refused like any other malformed time.
 */
const Timestamp = z
  .string()
  .datetime({ offset: true })
  .transform((value) => new Date(value).toISOString())
  .refine((iso) => /^\d{4}-/.test(iso) && !iso.startsWith('0000-'), { message: 'Invalid datetime' });

/** What every task list filters on. */
const TaskFilter = {
  status: z.enum(TASK_STATES as [TaskState, ...TaskState[]]).optional(),
  task_type: z.enum(CAPABILITY_TASK_TYPES).optional(),
  created_after: Timestamp.optional().openapi({ description: 'Tasks created at or after this ISO 8601 time' }),
  created_before: Timestamp.optional().openapi({ description: 'Tasks created before this ISO 8601 time' }),
  ...Page,
};

export const ListTasksQuery = z.object(TaskFilter).strict().openapi('ListTasksQuery');

export type ListTasksRequest = z.infer<typeof ListTasksQuery>;

/** The admin's task finder: any account's tasks, by id, account, type, status and time. */
export const AdminTasksQuery = z
  .object({
    task_id: z.string().min(1).optional().openapi({ description: 'One task, by its id' }),
    account_id: z.string().min(1).optional().openapi({ description: 'Tasks of this client account' }),
    ...TaskFilter,
  })
  .strict()
  .openapi('AdminTasksQuery');

const ENTRY_KINDS = Object.keys(LEDGER_ENTRY_KINDS) as [LedgerEntryKind, ...LedgerEntryKind[]];

const CreatedRange = {
  created_after: Timestamp.optional().openapi({ description: 'Entries written at or after this ISO 8601 time' }),
  created_before: Timestamp.optional().openapi({ description: 'Entries written before this ISO 8601 time' }),
};

export const LedgerHistoryQuery = z
  .object({
    kind: z.enum(ENTRY_KINDS).optional(),
    task_id: z.string().min(1).optional(),
    ...CreatedRange,
    ...Page,
  })
  .strict()
  .openapi('LedgerHistoryQuery');

export const LedgerSummaryQuery = z.object(CreatedRange).strict().openapi('LedgerSummaryQuery');

export type LedgerHistoryRequest = z.infer<typeof LedgerHistoryQuery>;

export const RevokeApiKeyQuery = z
  .object({
    allow_last: z
      .enum(['true', 'false'])
      .optional()
      .openapi({
        description:
          "true: revoke even the account's only live key (the account then has no way in), or its " +
          'only live unrestricted key (no key could then manage keys)',
      }),
  })
  .strict()
  .openapi('RevokeApiKeyQuery');

/** Documents per page of a crawl's or batch scrape's status (Firecrawl pages by `skip`, following `next`). */
export const CRAWL_PAGE_DEFAULT = 100;
export const CRAWL_PAGE_MAX = 1000;

export const CrawlStatusQuery = z
  .object({
    skip: QueryInt(Int().min(0).max(2_147_483_647))
      .optional()
      .openapi({ description: 'Documents to skip (the `next` URL carries it)' }),
    limit: QueryInt(Int().min(1).max(CRAWL_PAGE_MAX))
      .optional()
      .openapi({ description: `Documents per answer, 1-${CRAWL_PAGE_MAX} (default ${CRAWL_PAGE_DEFAULT})` }),
  })
  .strict()
  .openapi('CrawlStatusQuery');
