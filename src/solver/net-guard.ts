import dns from 'node:dns';
import net from 'node:net';
import { SolverError } from './errors';

/**
 * Keeps the solver from being used to reach the network it runs in (SSRF): a target whose host
 * resolves to any loopback, private, link-local, unspecified or multicast address is refused,
 * unless the operator allows private networks (local fixtures, tests). Only http(s) is fetched.
 */

export type NetPolicy = { allowPrivateNetworks: boolean };

type LabelledRange = { label: string; block: net.BlockList };

function range(label: string, subnets: Array<[string, number, 'ipv4' | 'ipv6']>): LabelledRange {
  const block = new net.BlockList();
  for (const [network, prefix, family] of subnets) block.addSubnet(network, prefix, family);
  return { label, block };
}

const REFUSED_RANGES: LabelledRange[] = [
  range('unspecified', [['0.0.0.0', 8, 'ipv4'], ['::', 128, 'ipv6']]),
  range('loopback', [['127.0.0.0', 8, 'ipv4'], ['::1', 128, 'ipv6']]),
  range('private', [
    ['10.0.0.0', 8, 'ipv4'],
    ['172.16.0.0', 12, 'ipv4'],
    ['192.168.0.0', 16, 'ipv4'],
    ['100.64.0.0', 10, 'ipv4'],
    ['fc00::', 7, 'ipv6'],
    ['fec0::', 10, 'ipv6'],
  ]),
  range('link-local', [['169.254.0.0', 16, 'ipv4'], ['fe80::', 10, 'ipv6']]),
  range('multicast', [['224.0.0.0', 4, 'ipv4'], ['ff00::', 8, 'ipv6']]),
  range('reserved', [['240.0.0.0', 4, 'ipv4']]),
];

/** IPv6 forms that carry an IPv4 address: mapped (::ffff:a.b.c.d), NAT64 (64:ff9b::/96), 6to4 (2002::/16). */
function embeddedIpv4(address: string): string | null {
  const lower = address.toLowerCase();
  const dotted = lower.match(/^(?:::ffff:|64:ff9b::)(\d+\.\d+\.\d+\.\d+)$/);
  if (dotted) return dotted[1]!;
  const groups = expandIpv6(lower);
  if (!groups) return null;
  const toV4 = (high: number, low: number) => `${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`;
  const isMapped = groups.slice(0, 5).every((group) => group === 0) && groups[5] === 0xffff;
  const isNat64 = groups[0] === 0x64 && groups[1] === 0xff9b && groups.slice(2, 6).every((group) => group === 0);
  if (isMapped || isNat64) return toV4(groups[6]!, groups[7]!);
  if (groups[0] === 0x2002) return toV4(groups[1]!, groups[2]!);
  return null;
}

function expandIpv6(address: string): number[] | null {
  if (!net.isIPv6(address) || address.includes('.')) return null;
  const [head, tail] = address.split('::') as [string, string | undefined];
  const parse = (part: string) => (part === '' ? [] : part.split(':').map((group) => parseInt(group, 16)));
  const left = parse(head);
  const right = tail === undefined ? [] : parse(tail);
  const zeros = tail === undefined ? 0 : 8 - left.length - right.length;
  return [...left, ...new Array(zeros).fill(0), ...right];
}

/** Why an address is refused ('loopback', 'private', ...), or null when it is a public address. */
export function refusalReason(address: string): string | null {
  const family = net.isIP(address);
  if (family === 0) return 'not an IP address';
  const type = family === 4 ? 'ipv4' : 'ipv6';
  for (const { label, block } of REFUSED_RANGES) if (block.check(address, type)) return label;
  const inner = family === 6 ? embeddedIpv4(address) : null;
  return inner ? refusalReason(inner) : null;
}

function blocked(host: string, address: string, reason: string): SolverError {
  const shown = host === address ? host : `${host} (${address})`;
  return new SolverError('target_blocked', `refused to connect to ${shown}: ${reason} addresses are not allowed`);
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
    throw new SolverError('target_blocked', `only http and https URLs are fetched, not ${url.protocol.replace(/:$/, '')}`);
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
      if (reason) throw blocked(host, address, reason);
    }
  }
  return addresses;
}

async function resolveAll(host: string): Promise<dns.LookupAddress[]> {
  try {
    return await dns.promises.lookup(host, { all: true, verbatim: true });
  } catch (error) {
    throw dnsError(host, error);
  }
}

function dnsError(host: string, error: unknown): SolverError {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ENOTFOUND' || code === 'ENODATA') return new SolverError('host_not_found', `the host ${host} does not resolve`);
  return new SolverError('fetch_failed', `could not resolve ${host}: ${code ?? String(error)}`);
}

type LookupCallback = (error: NodeJS.ErrnoException | null, address: string | dns.LookupAddress[], family?: number) => void;

/**
 * A `lookup` for net/http that applies the policy to the addresses actually connected to, so a host
 * that changes its DNS answer between the check and the connection (DNS rebinding) is still refused.
 */
export function guardedLookup(policy: NetPolicy) {
  return (hostname: string, options: dns.LookupOptions, callback: LookupCallback): void => {
    dns.lookup(hostname, { all: true, verbatim: true, family: options.family }, (error, addresses) => {
      if (error) return callback(dnsError(hostname, error) as unknown as NodeJS.ErrnoException, '', 0);
      if (!policy.allowPrivateNetworks) {
        for (const { address } of addresses) {
          const reason = refusalReason(address);
          if (reason) return callback(blocked(hostname, address, reason) as unknown as NodeJS.ErrnoException, '', 0);
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
    if (usable.length === 0) return callback(Object.assign(new Error(`${hostname} has no checked IPv${family} address`), { code: 'ENOTFOUND' }), '', 0);
    if (options.all) return callback(null, usable);
    callback(null, usable[0]!.address, usable[0]!.family);
  };
}
