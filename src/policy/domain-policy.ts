import net from 'node:net';
import { z } from 'zod';
import { refusalReason } from './special-addresses';

/**
 * The domain policy: which target hosts web tasks may reach. Pure rule matching, no I/O; the guard
 * (src/guard/domain-guard.ts) adds file loading, DNS and reloads around it.
 *
 * Patterns: `example.com` matches that host only; `*.example.com` matches every subdomain of it at any
 * depth (not example.com itself); `*` matches every host. The most specific matching pattern decides
 * (an exact host beats any wildcard, a longer wildcard beats a shorter one); on a tie deny wins.
 * Unmatched hosts get `default`. Private, loopback, link-local and every other special-purpose address
 * (src/policy/special-addresses.ts) are refused separately, whatever the rules say, unless private
 * networks are allowed.
 */

const HostPattern = z
  .string()
  .min(1)
  .transform((value) => value.trim().toLowerCase().replace(/\.$/, ''))
  .refine(
    (value) =>
      value === '*' ||
      /^(\*\.)?[a-z0-9_-]+(\.[a-z0-9_-]+)*$/.test(value) ||
      net.isIP(value.replace(/^\[|\]$/g, '')) !== 0,
    {
      message: 'a host pattern is a host name, an IP address, "*.<domain>" or "*"',
    },
  );

export const DomainPolicyFile = z
  .object({
    // JSON has no comments; the shipped file explains itself here.
    $comment: z.union([z.string(), z.array(z.string())]).optional(),
    default: z.enum(['allow', 'deny']).default('allow'),
    allow: z.array(HostPattern).default([]),
    deny: z.array(HostPattern).default([]),
    allow_private_networks: z.boolean().default(false),
  })
  .strict();

export type DomainPolicy = z.infer<typeof DomainPolicyFile>;

export type Verdict =
  | { allowed: true }
  | { allowed: false; reason: 'invalid_url' | 'scheme' | 'rule' | 'private_network'; message: string };

/** Lower-case host without IPv6 brackets or a trailing dot, as URL parsing gives it. */
export function normalizeHost(host: string): string {
  return host
    .toLowerCase()
    .replace(/^\[|\]$/g, '')
    .replace(/\.$/, '');
}

/** How specifically `pattern` matches `host`: -1 when it does not match at all. */
export function matchStrength(pattern: string, host: string): number {
  if (pattern === '*') return 0;
  if (pattern.startsWith('*.')) {
    const suffix = pattern.slice(1);
    return host.endsWith(suffix) && host.length > suffix.length ? suffix.split('.').length : -1;
  }
  return normalizeHost(pattern) === host ? Number.MAX_SAFE_INTEGER : -1;
}

const strongest = (patterns: string[], host: string) =>
  patterns.reduce<{ pattern: string | null; strength: number }>(
    (best, pattern) => {
      const strength = matchStrength(pattern, host);
      return strength > best.strength ? { pattern, strength } : best;
    },
    { pattern: null, strength: -1 },
  );

/** The rules' verdict for a host (no private-network check). */
export function evaluateHostRules(policy: DomainPolicy, rawHost: string): Verdict {
  const host = normalizeHost(rawHost);
  const allow = strongest(policy.allow, host);
  const deny = strongest(policy.deny, host);
  if (deny.pattern !== null && deny.strength >= allow.strength) {
    return { allowed: false, reason: 'rule', message: `The domain policy refuses ${host} (rule "${deny.pattern}").` };
  }
  if (allow.pattern !== null || policy.default === 'allow') return { allowed: true };
  return {
    allowed: false,
    reason: 'rule',
    message: `The domain policy allows only listed hosts, and ${host} is not one of them.`,
  };
}

/** Names that always mean this machine, whatever DNS says (RFC 6761). */
export function isLocalName(host: string): boolean {
  const name = normalizeHost(host);
  return name === 'localhost' || name.endsWith('.localhost') || name === 'localhost.localdomain';
}

/**
 * The private-network verdict for one of a host's addresses (src/policy/special-addresses.ts). The
 * message names the host, never the address: what an internal name resolves to is not for clients.
 */
export function evaluateAddress(host: string, address: string): Verdict {
  const reason = refusalReason(address);
  if (!reason) return { allowed: true };
  return privateNetworkRefusal(reason, normalizeHost(host));
}

function privateNetworkRefusal(reason: string, host: string): Verdict {
  return {
    allowed: false,
    reason: 'private_network',
    message:
      `Targets at ${reason} addresses are refused: ${host}. Only public addresses are served ` +
      `unless the operator sets ALLOW_PRIVATE_NETWORKS=true.`,
  };
}

export function parseTarget(raw: string): { url: URL; host: string } | Verdict {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { allowed: false, reason: 'invalid_url', message: 'The target is not an absolute URL.' };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return {
      allowed: false,
      reason: 'scheme',
      message: `Only http and https targets are allowed, not ${url.protocol.replace(/:$/, '')}.`,
    };
  }
  return { url, host: normalizeHost(url.hostname) };
}

/**
 * Everything that can be decided without DNS: scheme, rules, literal addresses and local names.
 * Returns `needs_dns` when the host is a name whose addresses decide the private-network question.
 */
export function evaluateTarget(
  policy: DomainPolicy,
  raw: string,
  options: { allowPrivateNetworks: boolean },
): Verdict | { needsDns: string } {
  const target = parseTarget(raw);
  if ('allowed' in target) return target;
  const byRules = evaluateHostRules(policy, target.host);
  if (!byRules.allowed) return byRules;
  if (options.allowPrivateNetworks || policy.allow_private_networks) return { allowed: true };
  if (net.isIP(target.host)) return evaluateAddress(target.host, target.host);
  if (isLocalName(target.host)) {
    return privateNetworkRefusal('loopback', target.host);
  }
  return { needsDns: target.host };
}
