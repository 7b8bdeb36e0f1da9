import dns from 'node:dns';
import type { NotifyBus } from '../db/notify';
import type { Logger } from '../logger';
import { evaluateAddress, evaluateTarget, type DomainPolicy, type Verdict } from '../policy/domain-policy';
import { readDomainPolicy } from '../policy/loader';

/** Every API node listens here; the node that handles the admin reload publishes. */
export const DOMAIN_POLICY_CHANNEL = 'domain_policy_reload';

// DNS is only a pre-check (the solver checks the addresses it actually connects to), so it must never
// make a request slow: a lookup gets this long, and answers are reused for a short while.
const DNS_TIMEOUT_MS = 1000;
const DNS_CACHE_MS = 30_000;
const DNS_FAILURE_CACHE_MS = 5_000;
const DNS_CACHE_ENTRIES = 1000;

/** The addresses of a host; rejects when it does not resolve. */
export type Resolver = (host: string) => Promise<string[]>;

const systemResolver: Resolver = async (host) =>
  (await dns.promises.lookup(host, { all: true, verbatim: true })).map((entry) => entry.address);

interface CacheEntry {
  addresses: Promise<string[] | null>;
  expiresAt: number;
}

/**
 * The domain policy in force on this node: checks target URLs, re-reads the policy file on reload, and
 * follows reloads made on other nodes through the notification bus.
 */
export class DomainGuard {
  private policy: DomainPolicy;
  private readonly cache = new Map<string, CacheEntry>();
  private readonly resolve: Resolver;
  /** The bus this node follows reloads on, once it listens; reloads made here are told on it. */
  private bus?: NotifyBus;

  constructor(
    private readonly options: {
      file: string;
      allowPrivateNetworks: boolean;
      logger: Logger;
      nodeId: string;
      resolve?: Resolver;
      dnsTimeoutMs?: number;
    },
  ) {
    this.resolve = options.resolve ?? systemResolver;
    this.policy = readDomainPolicy(options.file);
  }

  /** Re-reads the file; an invalid file throws and leaves the policy in force unchanged. */
  reload(): DomainPolicy {
    this.policy = readDomainPolicy(this.options.file);
    this.options.logger.info(
      { file: this.options.file, allow: this.policy.allow.length, deny: this.policy.deny.length },
      'domain policy loaded',
    );
    return this.policy;
  }

  /** Reloads here, then tells every other node to reload (on the bus it listens on). */
  async reloadEverywhere(): Promise<DomainPolicy> {
    const policy = this.reload();
    await this.bus?.publish(DOMAIN_POLICY_CHANNEL, { node_id: this.options.nodeId });
    return policy;
  }

  async listen(bus: NotifyBus): Promise<() => Promise<void>> {
    this.bus = bus;
    return bus.subscribe(DOMAIN_POLICY_CHANNEL, (payload) => {
      if ((payload as { node_id?: string } | undefined)?.node_id === this.options.nodeId) return;
      try {
        this.reload();
      } catch (error) {
        this.options.logger.error({ err: error }, 'domain policy reload failed; the previous policy stays in force');
      }
    });
  }

  async check(url: string): Promise<Verdict> {
    const verdict = evaluateTarget(this.policy, url, { allowPrivateNetworks: this.options.allowPrivateNetworks });
    if (!('needsDns' in verdict)) return verdict;
    const addresses = await this.addressesOf(verdict.needsDns);
    // A name that does not resolve here is let through: the solver resolves it again and refuses a
    // private answer itself, or reports that the host does not exist.
    for (const address of addresses ?? []) {
      const byAddress = evaluateAddress(verdict.needsDns, address);
      if (!byAddress.allowed) return byAddress;
    }
    return { allowed: true };
  }

  private addressesOf(host: string): Promise<string[] | null> {
    const now = Date.now();
    const cached = this.cache.get(host);
    if (cached && cached.expiresAt > now) return cached.addresses;
    const entry: CacheEntry = { expiresAt: now + DNS_CACHE_MS, addresses: Promise.resolve(null) };
    entry.addresses = this.boundedLookup(host).then((addresses) => {
      if (addresses === null) entry.expiresAt = Date.now() + DNS_FAILURE_CACHE_MS;
      return addresses;
    });
    this.cache.delete(host);
    this.cache.set(host, entry);
    if (this.cache.size > DNS_CACHE_ENTRIES) this.cache.delete(this.cache.keys().next().value!);
    return entry.addresses;
  }

  /** The host's addresses, or null when it does not resolve in time. */
  private async boundedLookup(host: string): Promise<string[] | null> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<null>((resolve) => {
      timer = setTimeout(() => resolve(null), this.options.dnsTimeoutMs ?? DNS_TIMEOUT_MS);
    });
    try {
      const addresses = await Promise.race([this.resolve(host).catch(() => null), timeout]);
      return addresses && addresses.length > 0 ? addresses : null;
    } finally {
      clearTimeout(timer);
    }
  }
}
