/**
 * Which discovered URLs a crawl follows (Firecrawl's crawler options) and how a URL is written once
 * normalised, so that the same page found by two links is one page. Pure: the crawl activity and the
 * map route apply it.
 */

export interface CrawlScope {
  /** The start URL, normalised. */
  start: string;
  includePaths: string[];
  excludePaths: string[];
  /** Follow links outside the start URL's path (siblings, parents) on its host. */
  crawlEntireDomain: boolean;
  allowSubdomains: boolean;
  allowExternalLinks: boolean;
  ignoreQueryParameters: boolean;
  /** includePaths / excludePaths match the whole URL rather than its path. */
  regexOnFullURL: boolean;
}

/** An http(s) URL without its fragment (and without its query when asked); null for anything else. */
export function normaliseUrl(raw: string, ignoreQueryParameters: boolean, base?: string): string | null {
  let url: URL;
  try {
    url = new URL(raw.trim(), base);
  } catch {
    return null;
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return null;
  url.hash = '';
  url.username = '';
  url.password = '';
  if (ignoreQueryParameters) url.search = '';
  return url.href;
}

const registrableSuffix = (host: string, of: string) => host === of || host.endsWith(`.${of}`);

/** The host without a leading `www.`: www.example.org and example.org are one site to Firecrawl. */
const siteHost = (host: string) => host.replace(/^www\./, '');

/** The start URL's directory: its path up to and including the last slash. */
function basePath(start: URL): string {
  return start.pathname.endsWith('/') ? start.pathname : start.pathname.replace(/[^/]*$/, '') || '/';
}

/** Why a (normalised) URL is not followed, or null when it is. */
export function outOfScope(
  scope: CrawlScope,
  candidate: string,
): 'external' | 'path' | 'excluded' | 'not_included' | null {
  const start = new URL(scope.start);
  const url = new URL(candidate);
  const sameHost = siteHost(url.hostname) === siteHost(start.hostname);
  if (!sameHost) {
    const subdomain = scope.allowSubdomains && registrableSuffix(url.hostname, siteHost(start.hostname));
    if (!subdomain && !scope.allowExternalLinks) return 'external';
  } else if (!scope.crawlEntireDomain && !scope.allowExternalLinks && !url.pathname.startsWith(basePath(start))) {
    return 'path';
  }
  const subject = scope.regexOnFullURL ? url.href : url.pathname;
  if (scope.excludePaths.some((pattern) => new RegExp(pattern).test(subject))) return 'excluded';
  if (scope.includePaths.length > 0 && !scope.includePaths.some((pattern) => new RegExp(pattern).test(subject)))
    return 'not_included';
  return null;
}

/** The first pattern that is not a valid regular expression, with the engine's message. */
export function invalidPattern(patterns: readonly string[]): { pattern: string; message: string } | null {
  for (const pattern of patterns) {
    try {
      new RegExp(pattern);
    } catch (error) {
      return { pattern, message: (error as Error).message };
    }
  }
  return null;
}
