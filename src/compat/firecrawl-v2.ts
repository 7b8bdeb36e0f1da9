import { ApiError } from '../errors';
import { SCRAPE_V2_FORMATS, type ScrapeV2Request } from '../schemas/requests';
import type { TagFilter } from './page-html';

/**
 * Firecrawl v2 on top of our web tasks: a scrape's formats (names or objects) and options become the
 * tasks it needs; a search becomes one web_search task whose results take v1's or v2's shape.
 */

export type ScrapeV2Format = (typeof SCRAPE_V2_FORMATS)[number];

export interface ScrapeV2Plan {
  formats: ScrapeV2Format[];
  /** A fetch of the solver's main-content markdown; without it, markdown is derived from the raw HTML. */
  solverMarkdown: boolean;
  /** A fetch of the raw HTML: html, rawHtml and links, and markdown when tags filter or the whole page is wanted. */
  rawHtml: boolean;
  screenshot: { full_page: boolean; viewport?: { width: number; height: number }; wait_ms?: number } | null;
  onlyMainContent: boolean;
  tags: TagFilter;
}

// A phone-sized viewport for `mobile: true` screenshots (an iPhone 12–15's CSS pixels).
export const MOBILE_VIEWPORT = { width: 390, height: 844 };

const typeOf = (format: string | { type: string }) => (typeof format === 'string' ? format : format.type);

const listed = (names: readonly string[]) => `${names.slice(0, -1).join(', ')} and ${names[names.length - 1]}`;

/** The refusal of a format (or search source) this service does not produce, naming it. */
export function unsupportedFormat(format: string, what = 'format'): ApiError {
  const served = what === 'format' ? listed(SCRAPE_V2_FORMATS) : 'web';
  return new ApiError('unsupported_format', `The "${format}" ${what} is not supported by this service; it serves ${served}.`, { format });
}

/** Search results come as links only: scraping them (`scrapeOptions.formats`) is one scrape per result URL. */
export function unsupportedResultScrape(format: string): ApiError {
  return new ApiError(
    'unsupported_format',
    `Scraping search results (scrapeOptions.formats "${format}") is not supported by this service; scrape the result URLs with /v2/scrape.`,
    { format },
  );
}

/** The tasks a v2 scrape needs; throws `unsupported_format` for a format this service does not produce. */
export function planScrapeV2(body: ScrapeV2Request): ScrapeV2Plan {
  const requested = body.formats && body.formats.length > 0 ? body.formats : ['markdown'];
  const formats = new Set<ScrapeV2Format>();
  let screenshot: ScrapeV2Plan['screenshot'] = null;
  for (const format of requested) {
    const type = typeOf(format);
    if (!(SCRAPE_V2_FORMATS as readonly string[]).includes(type)) throw unsupportedFormat(type);
    formats.add(type as ScrapeV2Format);
    if (type === 'screenshot') {
      // The route has validated a screenshot object's fields; quality applies to JPEG only and our images are PNG.
      const options = typeof format === 'string' ? {} : (format as { fullPage?: boolean | null; viewport?: { width: number; height: number } | null });
      const viewport = options.viewport ?? (body.mobile ? MOBILE_VIEWPORT : undefined);
      // waitFor lets the page's scripts render before the capture; a fetch runs no script, so only screenshots wait.
      screenshot = { full_page: options.fullPage === true, ...(viewport ? { viewport } : {}), ...(body.waitFor ? { wait_ms: body.waitFor } : {}) };
    }
  }
  const onlyMainContent = body.onlyMainContent ?? true;
  const tags: TagFilter = { include: body.includeTags ?? undefined, exclude: body.excludeTags ?? undefined };
  const filtered = Boolean(tags.include?.length || tags.exclude?.length);
  // The solver's markdown is always the main content, unfiltered; anything else is derived from the raw HTML.
  const solverMarkdown = formats.has('markdown') && onlyMainContent && !filtered;
  return {
    formats: [...formats],
    solverMarkdown,
    rawHtml: formats.has('html') || formats.has('rawHtml') || formats.has('links') || (formats.has('markdown') && !solverMarkdown),
    screenshot,
    onlyMainContent,
    tags,
  };
}

export interface SearchHit {
  title: string;
  url: string;
  snippet: string;
}

/** Firecrawl's search result: `description` is our snippet; v2 adds the 1-based `position`. */
export const webResultV1 = (hit: SearchHit) => ({ url: hit.url, title: hit.title, description: hit.snippet });
export const webResultV2 = (hit: SearchHit, index: number) => ({ ...webResultV1(hit), position: index + 1 });
