import pg from 'pg';
import { listMigrations, migrate } from '../src/db/migrate';
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
});
