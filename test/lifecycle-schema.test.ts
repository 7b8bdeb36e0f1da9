import { sql } from 'slonik';
import { z } from 'zod';
import { HOLD_STATES, LEDGER_ENTRY_KINDS } from '../src/contract/ledger';
import { ATTEMPT_OUTCOMES, CANARY_VERDICTS, DELIVERY_STATES, REDUNDANT_RUN_STATES, TARGET_FAILURE_VERDICTS, TASK_PURPOSES, TASK_STATES } from '../src/contract/lifecycle';
import { ACCOUNT_KINDS } from '../src/db/accounts';
import { CRAWL_KINDS, CRAWL_STATES, PAGE_STATES } from '../src/db/crawls';
import { createDb, type Db } from '../src/db/pool';
import { BILLING_TYPES, CAPABILITY_TASK_TYPES, FULFILLMENT_PATHS, ROUTING_SORTS, SPEND_LIMIT_PERIODS, TIERS } from '../src/schemas/domain';
import { testEndpoints } from './support/stack';

let db: Db;
beforeAll(async () => {
  db = await createDb(testEndpoints().databaseUrl);
});
afterAll(async () => {
  await db.end();
});

/** The values a CHECK constraint of the migrated schema allows in `table.column` (from its `IN (…)` list). */
async function checkedValues(table: string, column: string): Promise<string[]> {
  const definitions = await db.anyFirst(sql.type(z.object({ definition: z.string() }))`
    SELECT pg_get_constraintdef(c.oid) AS definition
    FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid
    WHERE t.relname = ${table} AND c.contype = 'c'`);
  const mine = definitions.filter((definition) => new RegExp(`\\(${column} = ANY`).test(definition));
  expect(mine).toHaveLength(1);
  return [...mine[0].matchAll(/'([^']*)'::text/g)].map((match) => match[1]);
}

const TABLES: [string, string, readonly string[]][] = [
  ['tasks', 'status', TASK_STATES],
  ['tasks', 'purpose', TASK_PURPOSES],
  ['task_attempts', 'outcome', ATTEMPT_OUTCOMES],
  ['target_failures', 'verdict', TARGET_FAILURE_VERDICTS],
  ['ledger_entries', 'kind', Object.keys(LEDGER_ENTRY_KINDS)],
  ['holds', 'status', HOLD_STATES],
  ['webhook_deliveries', 'status', DELIVERY_STATES],
  ['solver_capabilities', 'task_type', CAPABILITY_TASK_TYPES],
  ['solver_capabilities', 'tier', TIERS],
  ['solver_capabilities', 'billing_type', BILLING_TYPES],
  ['solver_capabilities', 'fulfillment_path', FULFILLMENT_PATHS],
  ['redundant_runs', 'status', REDUNDANT_RUN_STATES],
  ['api_keys', 'spend_limit_period', SPEND_LIMIT_PERIODS],
  ['accounts', 'kind', ACCOUNT_KINDS],
  ['canaries', 'verdict', CANARY_VERDICTS],
  ['task_attempts', 'billing_type', BILLING_TYPES],
  ['tasks', 'routing_sort', ROUTING_SORTS],
  ['task_queue', 'routing_sort', ROUTING_SORTS],
  ['crawls', 'kind', CRAWL_KINDS],
  ['crawls', 'status', CRAWL_STATES],
  ['crawl_pages', 'status', PAGE_STATES],
];

describe('the SQL CHECKs allow exactly the values the TypeScript tables define', () => {
  test.each(TABLES)('%s.%s', async (table, column, values) => {
    expect((await checkedValues(table, column)).sort()).toEqual([...values].sort());
  });
});

test('every CHECK with a list of values in the schema has its table here', async () => {
  const lists = await db.any(sql.type(z.object({ table: z.string(), definition: z.string() }))`
    SELECT t.relname AS table, pg_get_constraintdef(c.oid) AS definition
    FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid JOIN pg_namespace n ON n.oid = t.relnamespace
    WHERE c.contype = 'c' AND n.nspname = current_schema() AND pg_get_constraintdef(c.oid) LIKE '%= ANY%'`);
  const checked = lists.map(({ table, definition }) => `${table}.${/\((\w+) = ANY/.exec(definition)?.[1]}`).sort();
  expect(checked).toEqual(TABLES.map(([table, column]) => `${table}.${column}`).sort());
});
