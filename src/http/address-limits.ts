import type { IncomingMessage } from 'node:http';
import net from 'node:net';
import type { AddressLimitScope } from '../db/address-limits';
import type { RateLimitState } from '../db/rate-limits';
import { ApiError } from '../errors';
import type { Config } from '../config';

/** The X-RateLimit headers of a counted request, per account or per address. */
export function rateLimitHeaders(state: RateLimitState): Record<string, string> {
  return {
    'X-RateLimit-Limit': String(state.limit),
    'X-RateLimit-Remaining': String(state.remaining),
    'X-RateLimit-Reset': String(state.resetAt),
  };
}

/** Whether an address is one of the proxies (TRUST_PROXY) whose X-Forwarded-For is believed. */
export type TrustProxy = (address: string) => boolean;

/**
 * An address as PostgreSQL's inet reads it: an IPv4 address written as IPv6 (`::ffff:1.2.3.4`, how a
 * dual-stack socket reports it) as plain IPv4, and a link-local IPv6 address without its zone (`%eth0`).
 */
const plain = (address: string) => {
  const unzoned = address.replace(/%.*$/, '');
  return /^::ffff:\d+\.\d+\.\d+\.\d+$/i.test(unzoned) ? unzoned.slice(7) : unzoned;
};

export function trustProxy(ranges: readonly string[]): TrustProxy {
  if (ranges.length === 0) return () => false;
  const trusted = new net.BlockList();
  for (const range of ranges) {
    const [address, bits] = range.split('/');
    const type = net.isIP(address!) === 6 ? 'ipv6' : 'ipv4';
    trusted.addSubnet(address!, Number(bits), type);
  }
  return (address) => {
    const candidate = plain(address);
    const family = net.isIP(candidate);
    return family !== 0 && trusted.check(candidate, family === 6 ? 'ipv6' : 'ipv4');
  };
}

/**
 * The client's address: the socket's peer, or, while that peer is a trusted proxy, the entry it added
 * to X-Forwarded-For (read from the right, one hop per trusted proxy). With no trusted proxy the header
 * is ignored, so a client cannot choose the address it is counted under. An entry that is not an
 * address ends the walk at the proxy that passed it on.
 */
export function clientAddress(request: IncomingMessage, trusted: TrustProxy): string {
  let address = plain(request.socket.remoteAddress ?? '');
  const header = request.headers['x-forwarded-for'];
  const hops = (Array.isArray(header) ? header.join(',') : (header ?? ''))
    .split(',')
    .map((hop) => hop.trim())
    .filter(Boolean);
  for (let i = hops.length - 1; i >= 0 && trusted(address); i--) {
    const hop = plain(hops[i]!);
    if (net.isIP(hop) === 0) break;
    address = hop;
  }
  return address;
}

const LIMIT_OF: Record<AddressLimitScope, (limits: Config['addressLimits']) => number> = {
  register: (limits) => limits.register,
  unauthenticated: (limits) => limits.unauthenticated,
  solver_connect: (limits) => limits.solverConnect,
};

const WHAT: Record<AddressLimitScope, string> = {
  register: 'registrations per hour',
  unauthenticated: 'requests without a valid key per minute',
  solver_connect: 'solver connection attempts per minute',
};

/**
 * Limits per client address on what costs the service without an account to count it against:
 * registrations, requests with a missing or unknown key, and solver socket upgrades. Counted in
 * PostgreSQL, so the limit holds across API nodes.
 */
export class AddressLimits {
  readonly trusted: TrustProxy;

  constructor(
    private readonly deps: {
      /** Counts a request of the address in its scope's window (src/db/address-limits.ts). */
      count: (scope: AddressLimitScope, address: string, limit: number) => Promise<RateLimitState>;
      config: Pick<Config, 'addressLimits' | 'trustProxy'>;
    },
  ) {
    this.trusted = trustProxy(deps.config.trustProxy);
  }

  /** Counts the request; throws 429 rate_limited (with Retry-After) when the address is over its limit. */
  async admit(request: IncomingMessage, scope: AddressLimitScope): Promise<void> {
    const address = clientAddress(request, this.trusted);
    // A socket already gone has no address; nothing is answered to it anyway.
    if (net.isIP(address) === 0) return;
    const limit = LIMIT_OF[scope](this.deps.config.addressLimits);
    const state = await this.deps.count(scope, address, limit);
    if (!state.limited) return;
    throw new ApiError(
      'rate_limited',
      `This address made more than ${limit} ${WHAT[scope]}; retry after ${state.retryAfter} s.`,
      { retry_after_seconds: state.retryAfter },
      { ...rateLimitHeaders(state), 'Retry-After': String(state.retryAfter) },
    );
  }
}
