import crypto from 'node:crypto';
import type { CanaryOrigin } from '../config';
import { siteLabel } from './canary-pages';

/**
 * Where canary pages are served (docs/trust.md, "Canary pages"): under host names the operator points
 * at the service (CANARY_HOSTS: names, or wildcards such as `*.pages.example` backed by a wildcard DNS
 * record), never on the API's own origin. The API tells a canary page's request from an API request by
 * its Host header alone.
 */

/**
 * Without CANARY_HOSTS and with ALLOW_PRIVATE_NETWORKS, names under `localhost` (RFC 6761: loopback), on the
 * port of the node the solver is connected to.
 */
export const LOCAL_CANARY_DOMAIN = '*.localhost';

/** Whether a request's host name (no port) is one canary pages are served under. */
export function isCanaryHost(origins: readonly Pick<CanaryOrigin, 'host'>[], hostname: string): boolean {
  const name = hostname.toLowerCase().replace(/\.$/, '');
  return origins.some(({ host }) =>
    host.startsWith('*.') ? name.endsWith(host.slice(1)) && name.length > host.length - 1 : name === host,
  );
}

/**
 * Of the wildcard's earlier hosts for a solver, one is used again this often: a site has many pages, and
 * a solver that caches by origin meets a site it fetched before.
 */
const REUSED_HOST_SHARE = 0.5;

/**
 * The host of a new canary page under an origin: the name itself, or a label under a wildcard (one the solver
 * saw before, at times).
 */
export function drawCanaryHost(origin: CanaryOrigin, earlierHosts: readonly string[]): string {
  if (!origin.host.startsWith('*.')) return origin.host;
  const earlier = earlierHosts.filter((host) => isCanaryHost([origin], host));
  if (earlier.length > 0 && Math.random() < REUSED_HOST_SHARE) return earlier[crypto.randomInt(earlier.length)]!;
  return `${siteLabel()}${origin.host.slice(1)}`;
}

/** The URL base of a page on `host` under the origin. */
export const canaryUrlBase = (origin: CanaryOrigin, host: string) =>
  `${origin.scheme}://${host}${origin.port === null ? '' : `:${origin.port}`}`;
