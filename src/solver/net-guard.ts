import dns from 'node:dns';
import net from 'node:net';
import { refusalReason } from '../policy/special-addresses';
import { SolverError } from './errors';

/**
 * Keeps the solver from being used to reach the network it runs in (SSRF): a target whose host
 * resolves to any address of the special-purpose registries (loopback, private, link-local,
 * documentation, multicast, ...) or of this host itself is refused, unless the operator allows private
 * networks (local fixtures, tests). The classifier is the one the API's domain policy uses
 * (src/policy/special-addresses.ts). Only http(s) is fetched.
 */

export type NetPolicy = { allowPrivateNetworks: boolean };

/** Names the host and why, never the address a name resolved to. */
function blocked(host: string, reason: string): SolverError {
  return new SolverError('target_blocked', `refused to connect to ${host}: ${reason} addresses are not allowed`);
}

/** Parses a target URL and refuses anything but http(s). */
export function parseTargetUrl(raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new SolverError('invalid_payload', `not a valid URL: ${raw.slice(0, 200)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new SolverError(
      'target_blocked',
      `only http and https URLs are fetched, not ${url.protocol.replace(/:$/, '')}`,
    );
  }
  return url;
}

export function hostOf(url: URL): string {
  return url.hostname.replace(/^\[|\]$/g, '');
}

/**
 * Resolves every address of the URL's host and refuses the URL when any of them is refused
 * (a name with one public and one private address could be steered to the private one).
 */
export async function assertTargetAllowed(raw: string | URL, policy: NetPolicy): Promise<URL> {
  const url = parseTargetUrl(typeof raw === 'string' ? raw : raw.href);
  if (!policy.allowPrivateNetworks) await resolveAllowedAddresses(hostOf(url), policy);
  return url;
}

/** The host's addresses, all of them allowed by the policy; throws `target_blocked` otherwise. */
export async function resolveAllowedAddresses(host: string, policy: NetPolicy): Promise<dns.LookupAddress[]> {
  const addresses = net.isIP(host) ? [{ address: host, family: net.isIP(host) }] : await resolveAll(host);
  if (!policy.allowPrivateNetworks) {
    for (const { address } of addresses) {
      const reason = refusalReason(address);
      if (reason) throw blocked(host, reason);
    }
  }
  return addresses;
}

/**
 * Names under `localhost` are the loopback address (RFC 6761, as browsers resolve them): the system
 * resolver may not know them, and they must be refused as loopback wherever private networks are.
 */
const LOOPBACK_NAME = /\.localhost\.?$/i;
const LOOPBACK: dns.LookupAddress[] = [{ address: '127.0.0.1', family: 4 }];

async function resolveAll(host: string): Promise<dns.LookupAddress[]> {
  if (LOOPBACK_NAME.test(host)) return LOOPBACK;
  try {
    return await dns.promises.lookup(host, { all: true, verbatim: true });
  } catch (error) {
    throw dnsError(host, error);
  }
}

function dnsError(host: string, error: unknown): SolverError {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ENOTFOUND' || code === 'ENODATA')
    return new SolverError('host_not_found', `the host ${host} does not resolve`);
  return new SolverError('fetch_failed', `could not resolve ${host}: ${code ?? String(error)}`);
}

type LookupCallback = (
  error: NodeJS.ErrnoException | null,
  address: string | dns.LookupAddress[],
  family?: number,
) => void;

/**
 * A `lookup` for net/http that applies the policy to the addresses actually connected to, so a host
 * that changes its DNS answer between the check and the connection (DNS rebinding) is still refused.
 */
export function guardedLookup(policy: NetPolicy) {
  return (hostname: string, options: dns.LookupOptions, callback: LookupCallback): void => {
    const lookup = LOOPBACK_NAME.test(hostname)
      ? (
          _host: string,
          _options: dns.LookupAllOptions,
          done: (error: NodeJS.ErrnoException | null, addresses: dns.LookupAddress[]) => void,
        ) => done(null, LOOPBACK)
      : dns.lookup;
    lookup(hostname, { all: true, verbatim: true, family: options.family }, (error, addresses) => {
      if (error) return callback(dnsError(hostname, error) as unknown as NodeJS.ErrnoException, '', 0);
      if (!policy.allowPrivateNetworks) {
        for (const { address } of addresses) {
          const reason = refusalReason(address);
          if (reason) return callback(blocked(hostname, reason) as unknown as NodeJS.ErrnoException, '', 0);
        }
      }
      if (options.all) return callback(null, addresses);
      const first = addresses[0]!;
      callback(null, first.address, first.family);
    });
  };
}

/**
 * A `lookup` for net/http that answers with addresses resolved and checked before (resolveAllowedAddresses),
 * without asking DNS again: the connection goes to an address that was checked, whatever the name
 * answers by then (DNS rebinding), while the request keeps the name for its Host header and TLS (SNI,
 * the certificate's name).
 */
export function pinnedLookup(addresses: readonly dns.LookupAddress[]) {
  return (hostname: string, options: dns.LookupOptions, callback: LookupCallback): void => {
    const family = options.family === 'IPv4' ? 4 : options.family === 'IPv6' ? 6 : options.family;
    const usable = family ? addresses.filter((entry) => entry.family === family) : [...addresses];
    if (usable.length === 0)
      return callback(
        Object.assign(new Error(`${hostname} has no checked IPv${family} address`), { code: 'ENOTFOUND' }),
        '',
        0,
      );
    if (options.all) return callback(null, usable);
    callback(null, usable[0]!.address, usable[0]!.family);
  };
}
