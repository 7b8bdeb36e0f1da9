import { sql } from 'slonik';
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

describe('the database pool', () => {
  test("a statement's result comes back with nothing sent after it on its connection (no reset round trip)", async () => {
    const pid = await db.oneFirst(sql.type(z.object({ pid: z.number() }))`SELECT pg_backend_pid() AS pid`);
    await db.query(sql.unsafe`SELECT 'the caller''s statement' AS marker`);
    const lastStatement = await observer.oneFirst(sql.type(z.object({ query: z.string() }))`SELECT query FROM pg_stat_activity WHERE pid = ${pid}`);
    expect(lastStatement).toContain("the caller''s statement");
  });
});
