import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { listMigrations, migrate, MIGRATIONS_DIR } from '../src/db/migrate';
import { testEndpoints } from './support/stack';

describe('migrations', () => {
  const databaseName = `migrate_${Date.now()}`;
  let admin: pg.Client;
  let url: string;

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: testEndpoints().databaseUrl });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${databaseName}`);
    const parsed = new URL(testEndpoints().databaseUrl);
    parsed.pathname = `/${databaseName}`;
    url = parsed.toString();
  });
  afterAll(async () => {
    await admin.query(`DROP DATABASE IF EXISTS ${databaseName} WITH (FORCE)`);
    await admin.end();
  });

  test('an empty database migrates to the latest version, and a second run has nothing to do', async () => {
    const files = listMigrations().map((migration) => migration.name);
    expect(await migrate(url)).toEqual(files);
    expect(await migrate(url)).toEqual([]);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    const tables = (await client.query(`SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'`)).rows.map((row) => row.table_name);
    await client.end();
    expect(tables).toEqual(expect.arrayContaining(['accounts', 'api_keys', 'balances', 'holds', 'ledger_entries', 'schema_migrations']));
  });

  test('concurrent migrators apply each migration once', async () => {
    const other = `${databaseName}_b`;
    await admin.query(`CREATE DATABASE ${other}`);
    const parsed = new URL(url);
    parsed.pathname = `/${other}`;
    const results = await Promise.all([migrate(parsed.toString()), migrate(parsed.toString()), migrate(parsed.toString())]);
    expect(results.flat().sort()).toEqual(listMigrations().map((migration) => migration.name).sort());
    await admin.query(`DROP DATABASE ${other} WITH (FORCE)`);
  });
  test('the move to slots keeps running attempts in theirs, and a lowered limit above them', async () => {
    const other = `${databaseName}_c`;
    await admin.query(`CREATE DATABASE ${other}`);
    const parsed = new URL(url);
    parsed.pathname = `/${other}`;
    // The schema as it was before slots, with two solvers at work.
    const before = fs.mkdtempSync(path.join(os.tmpdir(), 'migrations-'));
    for (const migration of listMigrations().filter((m) => m.name < '0006')) fs.copyFileSync(path.join(MIGRATIONS_DIR, migration.name), path.join(before, migration.name));
    await migrate(parsed.toString(), before);
    const client = new pg.Client({ connectionString: parsed.toString() });
    await client.connect();
    await client.query(`
      INSERT INTO accounts (account_id) VALUES ('client'), ('busy'), ('over');
      INSERT INTO solver_capabilities (solver_id, task_type, tier, billing_type, fulfillment_path, provider_name, model_name, marginal_cost, min_price_points, max_concurrent, active_attempts)
      VALUES ('busy', 'proxy_fetch', 'standard', 'per_request', 'http', 'p', 'm', 0, 1, 3, 2), ('over', 'proxy_fetch', 'standard', 'per_request', 'http', 'p', 'm', 0, 1, 1, 2);
      INSERT INTO solver_stats (solver_id, attempts, completed) VALUES ('busy', 3, 1), ('over', 2, 0);
      INSERT INTO tasks (task_id, account_id, task_type, payload, max_price_points, timeout_seconds, workflow_id)
      SELECT 't' || n, 'client', 'proxy_fetch', '{}', 1, 60, 'w' || n FROM generate_series(1, 5) n;
      INSERT INTO task_attempts (attempt_id, task_id, attempt_number, solver_id, task_type, model_name, node_id, price_points, started_at, ended_at, outcome)
      VALUES ('t1.a1', 't1', 1, 'busy', 'proxy_fetch', 'm', 'n', 1, now() - interval '3 s', now(), 'completed'),
             ('t2.a1', 't2', 1, 'busy', 'proxy_fetch', 'm', 'n', 1, now() - interval '2 s', NULL, 'pending'),
             ('t3.a1', 't3', 1, 'busy', 'proxy_fetch', 'm', 'n', 1, now() - interval '1 s', NULL, 'pending'),
             ('t4.a1', 't4', 1, 'over', 'proxy_fetch', 'm', 'n', 1, now() - interval '2 s', NULL, 'pending'),
             ('t5.a1', 't5', 1, 'over', 'proxy_fetch', 'm', 'n', 1, now() - interval '1 s', NULL, 'pending');`);
    expect(await migrate(parsed.toString())).toEqual(['0006_solver_slots.sql', ...listMigrations().map((m) => m.name).filter((name) => name > '0006_solver_slots.sql')]);
    const slots = (await client.query(`SELECT solver_id, slot, attempt_id FROM solver_slots ORDER BY solver_id, slot`)).rows;
    const attempts = (await client.query(`SELECT attempt_id, slot FROM task_attempts ORDER BY attempt_id`)).rows;
    const stats = (await client.query(`SELECT solver_id, attempts FROM solver_stats ORDER BY solver_id`)).rows;
    await client.end();
    await admin.query(`DROP DATABASE ${other} WITH (FORCE)`);
    fs.rmSync(before, { recursive: true });
    expect(slots).toEqual([
      { solver_id: 'busy', slot: 1, attempt_id: 't2.a1' },
      { solver_id: 'busy', slot: 2, attempt_id: 't3.a1' },
      { solver_id: 'busy', slot: 3, attempt_id: null },
      // One slot per running attempt even above the limit of one; matching never offers the one above it.
      { solver_id: 'over', slot: 1, attempt_id: 't4.a1' },
      { solver_id: 'over', slot: 2, attempt_id: 't5.a1' },
    ]);
    expect(attempts).toEqual([
      { attempt_id: 't1.a1', slot: null },
      { attempt_id: 't2.a1', slot: 1 },
      { attempt_id: 't3.a1', slot: 2 },
      { attempt_id: 't4.a1', slot: 1 },
      { attempt_id: 't5.a1', slot: 2 },
    ]);
    // The record now counts attempts as they end: the running ones come off.
    expect(stats).toEqual([{ solver_id: 'busy', attempts: 1 }, { solver_id: 'over', attempts: 0 }]);
  });
});
