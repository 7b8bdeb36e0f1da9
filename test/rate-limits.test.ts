import { sql } from 'slonik';
import { z } from 'zod';
import { createAccount } from '../src/db/accounts';
import { createDb, type Db } from '../src/db/pool';
import { countKeyedRequest } from '../src/db/rate-limits';
import { testEndpoints } from './support/stack';

let db: Db;
beforeAll(async () => {
  // One connection: the statement after the count runs on the very connection that counted.
  db = await createDb(testEndpoints().databaseUrl, { maximumPoolSize: 1 });
});
afterAll(async () => {
  await db.end();
});

const synchronousCommit = (runner: Pick<Db, 'oneFirst'>) => runner.oneFirst(sql.type(z.object({ synchronous_commit: z.string() }))`SHOW synchronous_commit`);

describe('rate-limit counting (countKeyedRequest)', () => {
  test("a request's count commits without waiting for the WAL flush, and the connection's next transaction waits again", async () => {
    const { apiKey } = await createAccount(db);
    await db.transaction(async (tx) => {
      const admitted = await countKeyedRequest(tx, apiKey, 100);
      expect(admitted?.state.remaining).toBe(99);
      expect(await synchronousCommit(tx)).toBe('off');
    });
    expect(await countKeyedRequest(db, apiKey, 100)).toMatchObject({ state: { remaining: 98 } });
    // A hold or a settlement on this connection next must be durable when it commits.
    expect(await synchronousCommit(db)).toBe('on');
  });
});
