import { resolveArtifacts } from '../artifacts/results';
import { ArtifactMissingError, type ArtifactStore } from '../artifacts/store';
import { Batches } from '../db/batches';
import { cachedPages, cachePages, SHARED_SCOPE, type CachedPageRow, type PageCacheKey } from '../db/page-cache';
import type { Db } from '../db/pool';
import type { ScrapeV2Plan } from './firecrawl-v2';

/**
 * Firecrawl's page cache (docs/crawl.md, "Page cache"): a scrape, batch scrape or crawl page whose page
 * was fetched less than `maxAge` ago is answered from that fetch's task, without a solver. What may be
 * served to whom is the key's scope: a public page fetched with nothing of the client's is shared, any
 * other only to its account. Lookups and writes of many pages at once (a crawl's) go as one statement.
 */

export { SHARED_SCOPE, type PageCacheKey };

/** A page found in the cache: the task that fetched it, its result (artifacts read back) and when it was fetched. */
export interface CachedPage {
  taskId: string;
  taskType: string;
  cachedAt: string;
  result: Record<string, unknown>;
}

/** How a crawl or batch page is obtained: fetched as raw HTML, never rendered. */
export const FETCHED_VARIANT = 'fetch';

/**
 * The key's URL: the fragment, which no server sees, left out. Credentials in the URL stay in it, and
 * make its scope the account's (`hasCredentials`).
 */
export function cacheUrl(url: string): string {
  try {
    const parsed = new URL(url);
    parsed.hash = '';
    return parsed.href;
  } catch {
    return url;
  }
}

/** A URL carrying a user name or password sends the client's credentials to the site: its page is never shared. */
export function hasCredentials(url: string): boolean {
  try {
    const parsed = new URL(url);
    return parsed.username !== '' || parsed.password !== '';
  } catch {
    return false;
  }
}

/** A request's `maxAge` (milliseconds) as the cache reads it: the service's default when absent. */
export function maxAgeOf(given: number | null | undefined, defaultMs: number): number {
  return given === undefined || given === null ? defaultMs : Math.max(0, given);
}

export class PageCache {
  private readonly lookups: Batches<PageCacheKey & { maxAgeMs: number }, CachedPageRow | null>;
  private readonly writes: Batches<PageCacheKey & { taskId: string }, void>;

  constructor(private readonly deps: { db: Db; artifacts: ArtifactStore }) {
    this.lookups = new Batches((items) => cachedPages(deps.db, items));
    this.writes = new Batches<PageCacheKey & { taskId: string }, void>(async (items) => {
      await cachePages(deps.db, items);
      return items.map(() => undefined);
    });
  }

  /** The page cached under `key` no older than `maxAgeMs`; null when there is none (or maxAge is 0). */
  async find(key: PageCacheKey, maxAgeMs: number): Promise<CachedPage | null> {
    if (maxAgeMs <= 0) return null;
    const row = await this.lookups.add({ ...key, maxAgeMs });
    if (!row) return null;
    try {
      return {
        taskId: row.task_id,
        taskType: row.task_type,
        cachedAt: row.cached_at,
        result: await resolveArtifacts(this.deps.artifacts, row.result),
      };
    } catch (error) {
      // Purged between the two reads: as if it was not cached.
      if (error instanceof ArtifactMissingError) return null;
      throw error;
    }
  }

  /** Caches the completed task's page under `key`. */
  keep(key: PageCacheKey, taskId: string): Promise<void> {
    return this.writes.add({ ...key, taskId });
  }
}

/**
 * The cache key of a single scrape's page, or null when its answer is never cached: a screenshot (an
 * image of the client's own task) or actions (an interaction, with its own screenshots and scrapes) are
 * always taken fresh. The variant says how the page is obtained (fetched and rendered when it needs it,
 * or rendered after a wait; the viewport; the country it is fetched from); a location or credentials in
 * the URL make it the account's own.
 */
export function scrapeCacheKey(
  url: string,
  plan: Pick<ScrapeV2Plan, 'content' | 'screenshot' | 'actions' | 'render' | 'waitMs' | 'viewport'>,
  country: string | undefined,
  accountId: string,
): PageCacheKey | null {
  if (!plan.content || plan.screenshot || plan.actions.length > 0) return null;
  const variant = [
    plan.render === 'always' ? `render:wait=${plan.waitMs}` : 'auto',
    ...(plan.viewport ? [`viewport=${plan.viewport.width}x${plan.viewport.height}`] : []),
    ...(country ? [`country=${country}`] : []),
  ].join(';');
  return { url: cacheUrl(url), variant, scope: country || hasCredentials(url) ? accountId : SHARED_SCOPE };
}
