import { sql } from 'slonik';
import { z } from 'zod';
import { HOLD_STATES, LEDGER_ENTRY_KINDS } from '../src/db/ledger';
import { createDb, type Db } from '../src/db/pool';
import { DELIVERY_STATES } from '../src/db/webhooks';
import { BILLING_TYPES, CAPABILITY_TASK_TYPES, FULFILLMENT_PATHS, SPEND_LIMIT_PERIODS, TIERS } from '../src/schemas/domain';
import { ATTEMPT_OUTCOMES, TARGET_FAILURE_VERDICTS, TASK_STATES } from '../src/contract/lifecycle';
import { REDUNDANT_RUN_STATES } from '../src/trust/redundant';
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

describe('the SQL CHECKs allow exactly the values the TypeScript tables define', () => {
  test.each([
    ['tasks', 'status', TASK_STATES],
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
  ])('%s.%s', async (table, column, values) => {
    expect((await checkedValues(table, column)).sort()).toEqual([...values].sort());
  });
});
