import crypto from 'node:crypto';
import { sql } from 'slonik';
import { z } from 'zod';
import type { Db } from './pool';

/** Accounts and their API keys. Keys are random, shown once, and stored only as SHA-256 hashes. */

const KEY_PREFIX = 'tmk_';

export const AccountRow = z.object({
  account_id: z.string(),
  kind: z.enum(['user', 'platform']),
  prompt_safety_scan: z.boolean(),
  created_at: z.string(),
});
export type Account = z.infer<typeof AccountRow>;

export const hashApiKey = (apiKey: string) => crypto.createHash('sha256').update(apiKey).digest();

const randomId = (prefix: string, bytes = 12) => `${prefix}${crypto.randomBytes(bytes).toString('hex')}`;

export async function createAccount(db: Db): Promise<{ account: Account; apiKey: string }> {
  const accountId = randomId('acct_');
  const apiKey = `${KEY_PREFIX}${crypto.randomBytes(32).toString('base64url')}`;
  const account = await db.transaction(async (tx) => {
    const row = await tx.one(sql.type(AccountRow)`
      INSERT INTO accounts (account_id) VALUES (${accountId})
      RETURNING account_id, kind, prompt_safety_scan, created_at`);
    await tx.query(sql.unsafe`INSERT INTO balances (account_id) VALUES (${accountId})`);
    await tx.query(sql.unsafe`
      INSERT INTO api_keys (key_id, account_id, key_hash, key_prefix)
      VALUES (${randomId('key_')}, ${accountId}, ${sql.binary(hashApiKey(apiKey))}, ${apiKey.slice(0, 8)})`);
    return row;
  });
  return { account, apiKey };
}

/** The account of a live (unrevoked) API key, as a row source: authentication reads it, alone or with the request count. */
export const accountOfKey = (apiKey: string) => sql.fragment`
  SELECT a.account_id, a.kind, a.prompt_safety_scan, a.created_at
  FROM api_keys k JOIN accounts a USING (account_id)
  WHERE k.key_hash = ${sql.binary(hashApiKey(apiKey))} AND k.revoked_at IS NULL`;

export async function findAccountByApiKey(db: Db, apiKey: string): Promise<Account | null> {
  return db.maybeOne(sql.type(AccountRow)`${accountOfKey(apiKey)}`);
}

export async function findAccount(db: Db, accountId: string): Promise<Account | null> {
  return db.maybeOne(sql.type(AccountRow)`
    SELECT account_id, kind, prompt_safety_scan, created_at FROM accounts WHERE account_id = ${accountId}`);
}

export async function updateSettings(db: Db, accountId: string, settings: { prompt_safety_scan: boolean }): Promise<Account> {
  return db.one(sql.type(AccountRow)`
    UPDATE accounts SET prompt_safety_scan = ${settings.prompt_safety_scan} WHERE account_id = ${accountId}
    RETURNING account_id, kind, prompt_safety_scan, created_at`);
}

export async function countAccounts(db: Db): Promise<number> {
  return db.oneFirst(sql.type(z.object({ count: z.number() }))`SELECT count(*)::int AS count FROM accounts WHERE kind = 'user'`);
}
