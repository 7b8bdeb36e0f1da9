import type { Express, Request, Response } from 'express';
import type { Account } from '../db/accounts';
import type { RateLimitState } from '../db/rate-limits';
import { ApiError } from '../errors';
import { rateLimitHeaders, type AddressLimits } from './address-limits';

/**
 * The per-account rate limit of every authenticated request, and the per-address limits
 * (src/http/address-limits.ts). createApp installs the limiter on the app and requireAccount enforces it
 * right after authentication, so no route that authenticates can miss it.
 */

const LIMITER = 'rateLimiter';

interface Limiter {
  /** Authenticates the key and counts its request (src/db/rate-limits.ts); null for an unknown or revoked key. */
  count: (apiKey: string, limit: number) => Promise<{ account: Account; state: RateLimitState } | null>;
  limitPerMinute: number;
  addresses: AddressLimits;
}

export function installRateLimit(app: Express, limiter: Limiter): void {
  app.locals[LIMITER] = limiter;
}

function limiterOf(req: Request): Limiter {
  const limiter = req.app.locals[LIMITER] as Limiter | undefined;
  // An app without a limiter would silently serve unlimited traffic: refuse loudly instead.
  if (!limiter) throw new Error('rate limiter not installed on this app: build it with createApp');
  return limiter;
}

/** The per-address limits of the app serving the request. */
export const addressLimitsOf = (req: Request): AddressLimits => limiterOf(req).addresses;

/**
 * Authenticates the API key and counts the request (one statement); sets the X-RateLimit headers, or
 * throws 429 rate_limited with Retry-After. Null for an unknown or revoked key (nothing counted).
 */
export async function admitRequest(req: Request, res: Response, apiKey: string): Promise<Account | null> {
  const limiter = limiterOf(req);
  const admitted = await limiter.count(apiKey, limiter.limitPerMinute);
  if (!admitted) return null;
  const { state } = admitted;
  const headers = rateLimitHeaders(state);
  for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
  if (state.limited) {
    const message = state.simulated
      ? 'This account is rate limited (simulated by an operator) until its rate limit is reset.'
      : `This account made more than ${state.limit} requests this minute; retry after ${state.retryAfter} s.`;
    throw new ApiError(
      'rate_limited',
      message,
      { retry_after_seconds: state.retryAfter },
      { ...headers, 'Retry-After': String(state.retryAfter) },
    );
  }
  return admitted.account;
}
