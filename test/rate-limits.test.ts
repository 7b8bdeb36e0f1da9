import crypto from 'node:crypto';
import { sql } from 'slonik';
import { z } from 'zod';
import { createAccount } from '../src/db/accounts';
import { createDb, type Db } from '../src/db/pool';
import { countKeyedRequest } from '../src/db/rate-limits';
import { countAddressRequest } from '../src/db/address-limits';
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

describe('per-address counting (countAddressRequest)', () => {
  test('an IPv6 client is counted by its /64, an IPv4 one by its address, and each scope apart', async () => {
    const prefix = `2001:db8:${crypto.randomInt(0, 0xffff).toString(16)}:${crypto.randomInt(0, 0xffff).toString(16)}`;
    expect(await countAddressRequest(db, 'register', `${prefix}::1`, 2)).toMatchObject({ remaining: 1, limited: false });
    expect(await countAddressRequest(db, 'register', `${prefix}:ffff:ffff:ffff:ffff`, 2)).toMatchObject({ remaining: 0, limited: false });
    // A third address of the same /64: the host has not moved.
    expect(await countAddressRequest(db, 'register', `${prefix}:1234::5`, 2)).toMatchObject({ remaining: 0, limited: true });
    expect(await countAddressRequest(db, 'unauthenticated', `${prefix}::1`, 2)).toMatchObject({ remaining: 1, limited: false });
    const v4 = `192.0.2.${crypto.randomInt(1, 255)}`;
    const [first, second] = [await countAddressRequest(db, 'solver_connect', v4, 1), await countAddressRequest(db, 'solver_connect', v4, 1)];
    expect([first.limited, second.limited]).toEqual([false, true]);
    expect(second.retryAfter).toBeGreaterThanOrEqual(1);
    expect(second.retryAfter).toBeLessThanOrEqual(60);
  });
});
