import crypto from 'node:crypto';
import type { Request, RequestHandler } from 'express';
import type { Account } from '../db/accounts';
import { ApiError } from '../errors';
import { addressLimitsOf, admitRequest } from './rate-limit';

export function bearerToken(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const match = /^Bearer\s+(.+)$/i.exec(header.trim());
  return match ? match[1].trim() : undefined;
}

/** The API key of `Authorization: Bearer <api_key>`, or the 401 that says what is wrong with the header. */
function apiKeyOf(authorization: string | undefined): string {
  if (!authorization) {
    throw new ApiError(
      'authentication_required',
      'Send your API key as "Authorization: Bearer <api_key>"; POST /v1/register gives you one.',
    );
  }
  const token = bearerToken(authorization);
  if (!token) throw new ApiError('invalid_api_key', 'The Authorization header must be "Bearer <api_key>".');
  return token;
}

const unknownApiKey = () => new ApiError('invalid_api_key', 'This API key is unknown or revoked.');

/** Resolves `Authorization: Bearer <api_key>` to an account, or throws the 401 that says what is wrong. */
export async function authenticate(
  findAccountByApiKey: (apiKey: string) => Promise<Account | null>,
  authorization: string | undefined,
): Promise<Account> {
  const account = await findAccountByApiKey(apiKeyOf(authorization));
  if (!account) throw unknownApiKey();
  return account;
}

/**
 * A request that failed authentication has no account to count against: it counts against its address
 * (429 rate_limited above UNAUTHENTICATED_LIMIT_PER_MINUTE), so keys cannot be guessed at any speed.
 */
async function refuseUnauthenticated(req: Request, error: ApiError): Promise<never> {
  await addressLimitsOf(req).admit(req, 'unauthenticated');
  throw error;
}

const isAuthenticationFailure = (error: unknown): error is ApiError =>
  error instanceof ApiError && error.status === 401;

/** Authenticates the caller and counts the request against the account's rate limit, in one statement. */
export function requireAccount(): RequestHandler {
  return async (req, res, next) => {
    let account: Account | null;
    try {
      account = await admitRequest(req, res, apiKeyOf(req.header('authorization')));
    } catch (error) {
      if (isAuthenticationFailure(error)) await refuseUnauthenticated(req, error);
      throw error;
    }
    if (!account) await refuseUnauthenticated(req, unknownApiKey());
    res.locals.account = account;
    next();
  };
}

export const accountOf = (res: { locals: Record<string, unknown> }) => res.locals.account as Account;

/**
 * Key management (creating, listing, changing and revoking keys) needs an unrestricted key, so a key
 * handed out with a spend limit cannot lift it, mint unlimited keys or lock the owner out. A restricted
 * key may still revoke itself (`mayRevokeItself`, with the key's id in the path): that takes nothing from
 * the owner. Runs after requireAccount (and after the path parameters are validated).
 */
export function requireKeyManager(options: { mayRevokeItself?: boolean } = {}): RequestHandler {
  return (req, res, next) => {
    const account = accountOf(res);
    if (account.key_restricted && !(options.mayRevokeItself && req.params.key_id === account.key_id)) {
      throw new ApiError(
        'restricted_api_key',
        'This API key is restricted (created with a spend limit, or as restricted): it cannot ' +
          'create, list, change or revoke keys, other than revoke itself. Use an unrestricted key of ' +
          'the account.',
        { key_id: account.key_id },
      );
    }
    next();
  };
}

const digest = (value: string) => crypto.createHash('sha256').update(value).digest();

/**
 * Admin key in any of Authorization (Bearer or bare), ADMIN_API_KEY or X-Admin-API-Key; every offered
 * value is compared in constant time. Admin routes are off when no ADMIN_API_KEY is configured.
 */
export function requireAdmin(adminApiKey: string | undefined): RequestHandler {
  const expected = adminApiKey ? digest(adminApiKey) : undefined;
  return async (req: Request, _res, next) => {
    if (!expected) {
      throw new ApiError(
        'admin_disabled',
        'Admin routes are disabled on this deployment: set ADMIN_API_KEY to enable them.',
      );
    }
    const authorization = req.header('authorization');
    const offered = [
      bearerToken(authorization) ?? authorization,
      req.header('admin_api_key'),
      req.header('x-admin-api-key'),
    ].filter((value): value is string => typeof value === 'string' && value.length > 0);
    if (offered.length === 0) {
      await refuseUnauthenticated(
        req,
        new ApiError(
          'admin_authentication_required',
          'Send the admin key in X-Admin-API-Key, ADMIN_API_KEY or "Authorization: Bearer <key>".',
        ),
      );
    }
    let matched = false;
    for (const value of offered) matched = crypto.timingSafeEqual(digest(value), expected) || matched;
    if (!matched) await refuseUnauthenticated(req, new ApiError('invalid_admin_key', 'The admin key is not valid.'));
    next();
  };
}
