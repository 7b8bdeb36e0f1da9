import crypto from 'node:crypto';
import { sql } from 'slonik';
import { z } from 'zod';
import { SPEND_LIMIT_PERIODS, type SpendLimitPeriod } from '../schemas/domain';
import type { Db } from './pool';

/** Accounts and their API keys. Keys are random, shown once, and stored only as SHA-256 hashes. */

const KEY_PREFIX = 'tmk_';

/** A client's account, or the platform's own (fees, canaries and redundant runs). */
export const ACCOUNT_KINDS = ['user', 'platform'] as const;

export const AccountRow = z.object({
  account_id: z.string(),
  kind: z.enum(ACCOUNT_KINDS),
  prompt_safety_scan: z.boolean(),
  created_at: z.string(),
  /** The key the request authenticated with (its tasks count against that key's spend limit). */
  key_id: z.string().optional(),
  /** That key is restricted: it may not manage keys (src/http/auth.ts, requireKeyManager). */
  key_restricted: z.boolean().optional(),
});
export type Account = z.infer<typeof AccountRow>;

export const hashApiKey = (apiKey: string) => crypto.createHash('sha256').update(apiKey).digest();

const randomId = (prefix: string, bytes = 12) => `${prefix}${crypto.randomBytes(bytes).toString('hex')}`;

export async function createAccount(db: Db): Promise<{ account: Account; apiKey: string }> {
  const accountId = randomId('acct_');
  const apiKey = newApiKey();
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

const newApiKey = () => `${KEY_PREFIX}${crypto.randomBytes(32).toString('base64url')}`;

/** How stale a key's last_used_at may get before a request writes it again: one write per key a minute at most. */
export const KEY_LAST_USED_PRECISION_SECONDS = 60;

/**
 * Marks a live key used now when its mark is older than KEY_LAST_USED_PRECISION_SECONDS, as a CTE body
 * for the statement that authenticates the request; most requests therefore write nothing.
 */
export const touchKey = (apiKey: string) => sql.fragment`
  UPDATE api_keys SET last_used_at = now()
  WHERE key_hash = ${sql.binary(hashApiKey(apiKey))} AND revoked_at IS NULL
    AND (last_used_at IS NULL OR last_used_at < now() - make_interval(secs => ${KEY_LAST_USED_PRECISION_SECONDS}))`;

/**
 * The account of a live (unrevoked) API key, as a row source: authentication reads it, alone or with the request
 * count.
 */
export const accountOfKey = (apiKey: string) => sql.fragment`
  SELECT a.account_id, a.kind, a.prompt_safety_scan, a.created_at, k.key_id, k.restricted AS key_restricted
  FROM api_keys k JOIN accounts a USING (account_id)
  WHERE k.key_hash = ${sql.binary(hashApiKey(apiKey))} AND k.revoked_at IS NULL`;

export async function findAccountByApiKey(db: Db, apiKey: string): Promise<Account | null> {
  return db.maybeOne(sql.type(AccountRow)`${accountOfKey(apiKey)}`);
}

export async function findAccount(db: Db, accountId: string): Promise<Account | null> {
  return db.maybeOne(sql.type(AccountRow)`
    SELECT account_id, kind, prompt_safety_scan, created_at FROM accounts WHERE account_id = ${accountId}`);
}

export async function updateSettings(
  db: Db,
  accountId: string,
  settings: { prompt_safety_scan: boolean },
): Promise<Account> {
  return db.one(sql.type(AccountRow)`
    UPDATE accounts SET prompt_safety_scan = ${settings.prompt_safety_scan} WHERE account_id = ${accountId}
    RETURNING account_id, kind, prompt_safety_scan, created_at`);
}

export async function countAccounts(db: Db): Promise<number> {
  return db.oneFirst(
    sql.type(z.object({ count: z.number() }))`SELECT count(*)::int AS count FROM accounts WHERE kind = 'user'`,
  );
}

export const ApiKeyRow = z.object({
  key_id: z.string(),
  name: z.string(),
  prefix: z.string(),
  created_at: z.string(),
  last_used_at: z.string().nullable(),
  revoked_at: z.string().nullable(),
  restricted: z.boolean(),
  spend_limit: z
    .object({ points: z.string(), period: z.enum(SPEND_LIMIT_PERIODS), spent_points: z.string() })
    .nullable(),
});
export type ApiKeyInfo = z.infer<typeof ApiKeyRow>;

export interface SpendLimit {
  points: string;
  period: SpendLimitPeriod;
}

/**
 * The period a key's spend counts in now (`period` a spend_limit_period column): the UTC day, or -infinity for a
 * limit in total.
 */
export const spendPeriodNow = (period: ReturnType<typeof sql.fragment>) =>
  sql.fragment`(CASE ${period} WHEN ${'day' satisfies SpendLimitPeriod}::text THEN (now() AT TIME ZONE 'UTC')::date ELSE '-infinity'::date END)`;

// Columns of api_keys, unqualified, so that they serve a SELECT and a RETURNING alike.
const KEY_COLUMNS = sql.fragment`key_id, name, key_prefix AS prefix, created_at, last_used_at, revoked_at, restricted,
  CASE WHEN spend_limit_points IS NOT NULL THEN json_build_object(
    'points', trim_scale(spend_limit_points)::text, 'period', spend_limit_period,
    'spent_points', COALESCE((SELECT trim_scale(s.spent_points)::text FROM key_spend s
                              WHERE s.key_id = api_keys.key_id AND s.period_start = ${spendPeriodNow(sql.fragment`spend_limit_period`)}), '0'))
  END AS spend_limit`;

/** A new key for the account; the key itself is returned here only, and stored as its hash. */
export async function createApiKey(
  db: Db,
  accountId: string,
  key: { name: string; spendLimit?: SpendLimit | null; restricted: boolean },
): Promise<{ key: ApiKeyInfo; apiKey: string }> {
  const apiKey = newApiKey();
  const { name, spendLimit, restricted } = key;
  const created = await db.one(sql.type(ApiKeyRow)`
    INSERT INTO api_keys (key_id, account_id, key_hash, key_prefix, name, spend_limit_points, spend_limit_period, restricted)
    VALUES (${randomId('key_')}, ${accountId}, ${sql.binary(hashApiKey(apiKey))}, ${apiKey.slice(0, 8)}, ${name},
            ${spendLimit?.points ?? null}::numeric, ${spendLimit?.period ?? null}, ${restricted})
    RETURNING ${KEY_COLUMNS}`);
  return { key: created, apiKey };
}

/**
 * Renames a key or sets its spend limit (null removes it); null when the account has no such key. A
 * lower limit applies to the next task; what the key's tasks already hold stays held.
 */
export async function updateApiKey(
  db: Db,
  accountId: string,
  keyId: string,
  update: { name?: string; spendLimit?: SpendLimit | null },
): Promise<ApiKeyInfo | null> {
  const setLimit = update.spendLimit !== undefined;
  return db.maybeOne(sql.type(ApiKeyRow)`
    UPDATE api_keys SET name = COALESCE(${update.name ?? null}, name),
      spend_limit_points = CASE WHEN ${setLimit} THEN ${update.spendLimit?.points ?? null}::numeric ELSE spend_limit_points END,
      spend_limit_period = CASE WHEN ${setLimit} THEN ${update.spendLimit?.period ?? null}::text ELSE spend_limit_period END
    WHERE account_id = ${accountId} AND key_id = ${keyId}
    RETURNING ${KEY_COLUMNS}`);
}

/** The account's keys, live ones first, newest first. */
export async function listApiKeys(db: Db, accountId: string): Promise<readonly ApiKeyInfo[]> {
  return db.any(sql.type(ApiKeyRow)`
    SELECT ${KEY_COLUMNS} FROM api_keys WHERE account_id = ${accountId}
    ORDER BY revoked_at IS NOT NULL, created_at DESC, key_id DESC`);
}

/**
 * NOTIFY channel on which a revocation is announced as its transaction commits: every API node closes the
 * solver sockets opened with the key (src/dispatch/key-revocations.ts).
 */
export const API_KEY_REVOKED_CHANNEL = 'api_key_revoked';

/** Those of the given keys that are revoked (or gone). */
export async function revokedKeys(db: Db, keyIds: readonly string[]): Promise<string[]> {
  if (keyIds.length === 0) return [];
  const live = await db.anyFirst(sql.type(z.object({ key_id: z.string() }))`
    SELECT key_id FROM api_keys WHERE key_id = ANY(${sql.array(keyIds, 'text')}) AND revoked_at IS NULL`);
  return keyIds.filter((keyId) => !live.includes(keyId));
}

export type RevokeOutcome =
  /** Revoked now, or already (revoking is idempotent). */
  | { kind: 'revoked'; key: ApiKeyInfo }
  | { kind: 'not_found' }
  /**
   * The account's only live key, or its only live unrestricted one (the others could not manage keys),
   * and the caller did not confirm that it wants to lock itself out.
   */
  | { kind: 'last_key'; key: ApiKeyInfo; lastUnrestricted: boolean };

/**
 * Revokes one of the account's keys. The account row is locked first, so two revocations of an
 * account's last two keys take turns and the second sees that only one is left.
 */
export async function revokeApiKey(
  db: Db,
  accountId: string,
  keyId: string,
  options: { allowLast: boolean },
): Promise<RevokeOutcome> {
  return db.transaction(async (tx) => {
    await tx.query(sql.unsafe`SELECT 1 FROM accounts WHERE account_id = ${accountId} FOR UPDATE`);
    const key = await tx.maybeOne(
      sql.type(ApiKeyRow)`SELECT ${KEY_COLUMNS} FROM api_keys WHERE account_id = ${accountId} AND key_id = ${keyId}`,
    );
    if (!key) return { kind: 'not_found' };
    if (key.revoked_at) return { kind: 'revoked', key };
    const live = await tx.one(sql.type(z.object({ keys: z.number(), unrestricted: z.number() }))`
      SELECT count(*)::int AS keys, (count(*) FILTER (WHERE NOT restricted))::int AS unrestricted
      FROM api_keys WHERE account_id = ${accountId} AND revoked_at IS NULL`);
    const lastUnrestricted = !key.restricted && live.unrestricted <= 1;
    if ((live.keys <= 1 || lastUnrestricted) && !options.allowLast)
      return { kind: 'last_key', key, lastUnrestricted: live.keys > 1 };
    const revoked = await tx.one(sql.type(ApiKeyRow)`
      UPDATE api_keys SET revoked_at = now() WHERE key_id = ${keyId} RETURNING ${KEY_COLUMNS}`);
    // Delivered when the revocation commits, and only if it does.
    await tx.query(sql.unsafe`SELECT pg_notify(${API_KEY_REVOKED_CHANNEL}, ${JSON.stringify({ key_id: keyId })})`);
    return { kind: 'revoked', key: revoked };
  });
}
