import { randomUUID } from 'node:crypto';
import { sql, UniqueIntegrityConstraintViolationError } from 'slonik';
import { z } from 'zod';
import { createDb, type Db } from '../src/db/pool';
import { testEndpoints } from './support/stack';

let db: Db;
let observer: Db;
beforeAll(async () => {
  // One connection, so every statement below runs on the backend whose activity the observer reads.
  db = await createDb(testEndpoints().databaseUrl, { maximumPoolSize: 1 });
  observer = await createDb(testEndpoints().databaseUrl, { maximumPoolSize: 1 });
});
afterAll(async () => {
  await Promise.all([db.end(), observer.end()]);
});

const preparedRow = z.object({ name: z.string(), statement: z.string() });
/** The connection's prepared statements (this statement has no values, so it is not one of them). */
const preparedOn = (pool: Db) => pool.any(sql.type(preparedRow)`SELECT name, statement FROM pg_prepared_statements ORDER BY prepare_time`);

describe('the database pool', () => {
  test("a statement's result comes back with nothing sent after it on its connection (no reset round trip)", async () => {
    const pid = await db.oneFirst(sql.type(z.object({ pid: z.number() }))`SELECT pg_backend_pid() AS pid`);
    await db.query(sql.unsafe`SELECT 'the caller''s statement' AS marker`);
    const lastStatement = await observer.oneFirst(sql.type(z.object({ query: z.string() }))`SELECT query FROM pg_stat_activity WHERE pid = ${pid}`);
    expect(lastStatement).toContain("the caller''s statement");
  });

  test('a statement with values is prepared once on its connection and reused, each call with its own values', async () => {
    const marker = `prepared once ${randomUUID()}`;
    const statement = (n: number) => sql.type(z.object({ n: z.number(), marker: z.string() }))`SELECT ${n}::int AS n, ${marker}::text AS marker`;
    expect(await db.one(statement(1))).toEqual({ n: 1, marker });
    expect(await db.one(statement(2))).toEqual({ n: 2, marker });
    expect(await db.one(statement(3))).toEqual({ n: 3, marker });
    const prepared = (await preparedOn(db)).filter((row) => row.statement.includes('::int AS n'));
    expect(prepared).toHaveLength(1);
  });

  test('a connection keeps at most its limit of prepared statements, dropping the least recently used', async () => {
    const small = await createDb(testEndpoints().databaseUrl, { maximumPoolSize: 1, statementsPerConnection: 2 });
    try {
      const run = (column: string) => small.query(sql.unsafe`SELECT ${1}::int AS ${sql.identifier([column])}`);
      await run('a');
      await run('b');
      await run('a');
      await run('c');
      await run('d');
      await run('a');
      const statements = (await preparedOn(small)).map((row) => row.statement);
      expect(statements).toHaveLength(2);
      expect(statements.join('\n')).toContain('"d"');
      expect(statements.join('\n')).toContain('"a"');
    } finally {
      await small.end();
    }
  });

  test("a statement prepared before its table's columns changed runs again with the new columns", async () => {
    const table = sql.identifier([`prepared_probe_${randomUUID().slice(0, 8)}`]);
    await db.query(sql.unsafe`CREATE TABLE ${table} (id int PRIMARY KEY)`);
    try {
      await db.query(sql.unsafe`INSERT INTO ${table} (id) VALUES (1)`);
      const read = () => db.one(sql.unsafe`SELECT * FROM ${table} WHERE id = ${1}`);
      expect(await read()).toEqual({ id: 1 });
      await db.query(sql.unsafe`ALTER TABLE ${table} ADD COLUMN label text NOT NULL DEFAULT 'new'`);
      // Outside a transaction the call itself succeeds.
      expect(await read()).toEqual({ id: 1, label: 'new' });

      await db.query(sql.unsafe`ALTER TABLE ${table} ADD COLUMN size int NOT NULL DEFAULT 2`);
      // Inside one, the failed statement has aborted the transaction: that call fails, and the next succeeds.
      await expect(db.transaction((tx) => tx.one(sql.unsafe`SELECT * FROM ${table} WHERE id = ${1}`))).rejects.toThrow(/cached plan must not change result type/);
      expect(await db.transaction((tx) => tx.one(sql.unsafe`SELECT * FROM ${table} WHERE id = ${1}`))).toEqual({ id: 1, label: 'new', size: 2 });
    } finally {
      await db.query(sql.unsafe`DROP TABLE ${table}`);
    }
  });

  test('statements dropped on the server (DISCARD ALL) are prepared again', async () => {
    const read = () => db.oneFirst(sql.type(z.object({ n: z.number() }))`SELECT ${7}::int + 0 AS n`);
    expect(await read()).toBe(7);
    await db.query(sql.unsafe`DISCARD ALL`);
    expect(await read()).toBe(7);
  });

  test("PostgreSQL's errors keep slonik's classes, and streams deliver rows with their fields", async () => {
    const table = sql.identifier([`prepared_probe_${randomUUID().slice(0, 8)}`]);
    await db.query(sql.unsafe`CREATE TABLE ${table} (id int PRIMARY KEY)`);
    try {
      await db.query(sql.unsafe`INSERT INTO ${table} (id) VALUES (${1})`);
      await expect(db.query(sql.unsafe`INSERT INTO ${table} (id) VALUES (${1})`)).rejects.toBeInstanceOf(UniqueIntegrityConstraintViolationError);
    } finally {
      await db.query(sql.unsafe`DROP TABLE ${table}`);
    }
    const rows: unknown[] = [];
    await db.stream(sql.unsafe`SELECT n, ${'x'}::text AS tag FROM generate_series(1, 3) AS n`, (stream) => {
      stream.on('data', (event) => rows.push({ row: event.data, fields: event.fields.map((field) => field.name) }));
    });
    expect(rows).toEqual([1, 2, 3].map((n) => ({ row: { n, tag: 'x' }, fields: ['n', 'tag'] })));
  });
});
