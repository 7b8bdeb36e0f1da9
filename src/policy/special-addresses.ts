import net from 'node:net';
import os from 'node:os';

/**
 * The one classifier of the addresses no target may have (SSRF), used by the domain policy, the
 * solver's network guard and webhook deliveries alike: every block of IANA's IPv4 and IPv6
 * Special-Purpose Address Registries, multicast, and this host's own interface addresses (where its
 * services, and a container's, listen on more than loopback). An IPv6 address that carries an IPv4 one
 * (mapped, NAT64, 6to4, IPv4-compatible or -translated) is judged by that IPv4 address too.
 */

type Block = { bytes: number[]; prefix: number; label: string };

/** Bytes of an IP address (4 or 16), or null when it is not one; a zone (`%eth0`) is ignored. */
export function addressBytes(address: string): number[] | null {
  const bare = address.replace(/%.*$/, '');
  if (net.isIPv4(bare)) return bare.split('.').map(Number);
  if (!net.isIPv6(bare)) return null;
  let text = bare.toLowerCase();
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted[1]!.split('.').map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.split('::') as [string, string | undefined];
  const groups = (part: string) => (part === '' ? [] : part.split(':').map((group) => parseInt(group, 16)));
  const left = groups(head);
  const right = tail === undefined ? [] : groups(tail);
  const all = [
    ...left,
    ...new Array<number>(tail === undefined ? 0 : 8 - left.length - right.length).fill(0),
    ...right,
  ];
  return all.flatMap((group) => [group >> 8, group & 255]);
}

function block(cidr: string, label: string): Block {
  const [network, prefix] = cidr.split('/') as [string, string];
  return { bytes: addressBytes(network)!, prefix: Number(prefix), label };
}

function inBlock(bytes: number[], { bytes: network, prefix }: Block): boolean {
  if (bytes.length !== network.length) return false;
  for (let bit = 0; bit < prefix; bit += 8) {
    const width = Math.min(8, prefix - bit);
    const mask = (0xff << (8 - width)) & 0xff;
    if ((bytes[bit / 8]! & mask) !== (network[bit / 8]! & mask)) return false;
  }
  return true;
}

/** IANA IPv4 Special-Purpose Address Registry, and multicast; the first match names the refusal. */
const IPV4_BLOCKS: Block[] = [
  block('0.0.0.0/8', 'unspecified'),
  block('10.0.0.0/8', 'private'),
  block('100.64.0.0/10', 'private'),
  block('127.0.0.0/8', 'loopback'),
  block('169.254.0.0/16', 'link-local'),
  block('172.16.0.0/12', 'private'),
  block('192.0.0.0/24', 'reserved'),
  block('192.0.2.0/24', 'documentation'),
  block('192.31.196.0/24', 'reserved'),
  block('192.52.193.0/24', 'reserved'),
  block('192.88.99.0/24', 'reserved'),
  block('192.168.0.0/16', 'private'),
  block('192.175.48.0/24', 'reserved'),
  block('198.18.0.0/15', 'benchmarking'),
  block('198.51.100.0/24', 'documentation'),
  block('203.0.113.0/24', 'documentation'),
  block('224.0.0.0/4', 'multicast'),
  block('255.255.255.255/32', 'broadcast'),
  block('240.0.0.0/4', 'reserved'),
];

/** IANA IPv6 Special-Purpose Address Registry, and multicast (the forms that carry IPv4 are judged first). */
const IPV6_BLOCKS: Block[] = [
  block('64:ff9b:1::/48', 'private'),
  block('::/8', 'reserved'),
  block('100::/64', 'reserved'),
  block('100:0:0:1::/64', 'reserved'),
  block('2001:2::/48', 'benchmarking'),
  block('2001::/23', 'reserved'),
  block('2001:db8::/32', 'documentation'),
  block('2620:4f:8000::/48', 'reserved'),
  block('3fff::/20', 'documentation'),
  block('5f00::/16', 'reserved'),
  block('fc00::/7', 'private'),
  block('fe80::/10', 'link-local'),
  block('fec0::/10', 'private'),
  block('ff00::/8', 'multicast'),
];

/** Inside ::/96, which otherwise carries an IPv4 address. */
const IPV6_EXACT: Block[] = [block('::/128', 'unspecified'), block('::1/128', 'loopback')];
const MAPPED = block('::ffff:0:0/96', '');
const TRANSLATED = block('::ffff:0:0:0/96', '');
const COMPATIBLE = block('::/96', '');
const NAT64 = block('64:ff9b::/96', '');
const SIX_TO_FOUR = block('2002::/16', '');

/**
 * The IPv4 address an IPv6 one carries, and whether the IPv6 address reaches it: a mapped address is
 * that IPv4 host, and NAT64 and 6to4 gateways forward to it; an IPv4-compatible or -translated one is
 * not routed as such, so it is refused whatever it carries.
 */
function carriedIpv4(bytes: number[]): { ipv4: number[]; reaches: boolean } | null {
  if (inBlock(bytes, MAPPED) || inBlock(bytes, NAT64)) return { ipv4: bytes.slice(12), reaches: true };
  if (inBlock(bytes, SIX_TO_FOUR)) return { ipv4: bytes.slice(2, 6), reaches: true };
  if (inBlock(bytes, TRANSLATED) || inBlock(bytes, COMPATIBLE)) return { ipv4: bytes.slice(12), reaches: false };
  return null;
}

// Interfaces change rarely (a container's never); reading them at every check would be a system call per connection.
const OWN_ADDRESSES_TTL_MS = 10_000;
let ownAddresses: { keys: Set<string>; readAt: number } | undefined;

/** This host's interface addresses, as byte keys. */
function ownAddressKeys(): Set<string> {
  const now = Date.now();
  if (!ownAddresses || now - ownAddresses.readAt > OWN_ADDRESSES_TTL_MS) {
    const keys = new Set<string>();
    for (const entries of Object.values(os.networkInterfaces())) {
      for (const entry of entries ?? []) {
        const bytes = addressBytes(entry.address);
        if (bytes) keys.add(bytes.join('.'));
      }
    }
    ownAddresses = { keys, readAt: now };
  }
  return ownAddresses.keys;
}

function reasonOfBytes(bytes: number[]): string | null {
  if (bytes.length === 16) {
    const exact = IPV6_EXACT.find((candidate) => inBlock(bytes, candidate));
    if (exact) return exact.label;
    const carried = carriedIpv4(bytes);
    if (carried) {
      const inner = reasonOfBytes(carried.ipv4);
      if (inner || !carried.reaches) return inner ?? 'reserved';
      return null;
    }
  }
  const found = (bytes.length === 4 ? IPV4_BLOCKS : IPV6_BLOCKS).find((candidate) => inBlock(bytes, candidate));
  if (found) return found.label;
  return ownAddressKeys().has(bytes.join('.')) ? "this host's own" : null;
}

/**
 * Why an address may not be a target ('loopback', 'private', 'documentation', "this host's own", ...),
 * or null for a public address. A refusal message names the host and this reason, never the address a
 * name resolved to.
 */
export function refusalReason(address: string): string | null {
  const bytes = addressBytes(address);
  return bytes ? reasonOfBytes(bytes) : 'not an IP address';
}
