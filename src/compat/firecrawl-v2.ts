import { ApiError } from '../errors';
import { SCRAPE_V2_FORMATS, type PageActionStep, type ScrapeV2Request } from '../schemas/requests';
import type { TagFilter } from './page-html';

/**
 * Firecrawl v2 on top of our web tasks: a scrape's formats (names or objects) and options become the
 * tasks it needs; a search becomes one web_search task whose results take v1's or v2's shape.
 */

export type ScrapeV2Format = (typeof SCRAPE_V2_FORMATS)[number];

export interface ScrapeV2Plan {
  formats: ScrapeV2Format[];
  /** markdown, html, rawHtml or links: the page's HTML is needed, fetched or rendered. */
  content: boolean;
  /** always: waitFor or actions need the browser; when_needed: fetch first, render when the page needs it. */
  render: 'always' | 'when_needed';
  screenshot: { full_page: boolean; viewport?: { width: number; height: number }; wait_ms?: number } | null;
  /** The rendered page's viewport (mobile), when not the solver's default. */
  viewport?: { width: number; height: number };
  waitMs: number;
  actions: PageActionStep[];
  onlyMainContent: boolean;
  tags: TagFilter;
  removeBase64Images: boolean;
}

// A phone-sized viewport for `mobile: true` (an iPhone 12–15's CSS pixels).
export const MOBILE_VIEWPORT = { width: 390, height: 844 };

const typeOf = (format: string | { type: string }) => (typeof format === 'string' ? format : format.type);

const listed = (names: readonly string[]) => `${names.slice(0, -1).join(', ')} and ${names[names.length - 1]}`;

/** The refusal of a format (or search source) this service does not produce, naming it. */
export function unsupportedFormat(format: string, what = 'format', alsoServed: readonly string[] = []): ApiError {
  const served = what === 'format' ? listed([...SCRAPE_V2_FORMATS, ...alsoServed]) : 'web';
  return new ApiError(
    'unsupported_format',
    `The "${format}" ${what} is not supported by this service; it serves ${served}.`,
    { format },
  );
}

/** Search results come as links only: scraping them (`scrapeOptions.formats`) is one scrape per result URL. */
export function unsupportedResultScrape(format: string): ApiError {
  return new ApiError(
    'unsupported_format',
    `Scraping search results (scrapeOptions.formats "${format}") is not supported by this ` +
      `service; scrape the result URLs with /v2/scrape.`,
    { format },
  );
}

const CONTENT_FORMATS: readonly ScrapeV2Format[] = ['markdown', 'html', 'rawHtml', 'links'];

/**
 * The tasks a scrape needs; throws `unsupported_format` for a format this service does not produce
 * (its message naming `alsoServed` too: the formats the caller serves itself, a scrape's json and summary).
 */
export function planScrapeV2(
  body: ScrapeV2Request,
  actions: PageActionStep[] = [],
  alsoServed: readonly string[] = [],
): ScrapeV2Plan {
  const requested = body.formats && body.formats.length > 0 ? body.formats : ['markdown'];
  const formats = new Set<ScrapeV2Format>();
  const waitMs = body.waitFor ?? 0;
  const mobileViewport = body.mobile ? MOBILE_VIEWPORT : undefined;
  let screenshot: ScrapeV2Plan['screenshot'] = null;
  for (const format of requested) {
    const type = typeOf(format);
    if (!(SCRAPE_V2_FORMATS as readonly string[]).includes(type)) throw unsupportedFormat(type, 'format', alsoServed);
    formats.add(type as ScrapeV2Format);
    if (type === 'screenshot') {
      // The route has validated a screenshot object's fields; quality applies to JPEG only and our images are PNG.
      const options =
        typeof format === 'string'
          ? {}
          : (format as { fullPage?: boolean | null; viewport?: { width: number; height: number } | null });
      const viewport = options.viewport ?? mobileViewport;
      screenshot = {
        full_page: options.fullPage === true,
        ...(viewport ? { viewport } : {}),
        ...(waitMs ? { wait_ms: waitMs } : {}),
      };
    }
  }
  return {
    formats: [...formats],
    content: CONTENT_FORMATS.some((format) => formats.has(format)),
    render: waitMs > 0 || actions.length > 0 ? 'always' : 'when_needed',
    screenshot,
    ...(mobileViewport ? { viewport: mobileViewport } : {}),
    waitMs,
    actions,
    onlyMainContent: body.onlyMainContent ?? true,
    tags: { include: body.includeTags ?? undefined, exclude: body.excludeTags ?? undefined },
    removeBase64Images: body.removeBase64Images ?? true,
  };
}

/**
 * The page_snapshot payload that renders the page; with actions, a wanted screenshot is its last one, taken
 * after the others.
 */
export function renderPayload(url: string, plan: ScrapeV2Plan): Record<string, unknown> {
  const screenshotAction =
    plan.screenshot && plan.actions.length > 0
      ? [
          {
            type: 'screenshot' as const,
            fullPage: plan.screenshot.full_page,
            ...(plan.screenshot.viewport && plan.screenshot.viewport !== plan.viewport
              ? { viewport: plan.screenshot.viewport }
              : {}),
          },
        ]
      : [];
  const actions = [...plan.actions, ...screenshotAction];
  return {
    url,
    mode: 'html',
    ...(plan.waitMs ? { wait_ms: plan.waitMs } : {}),
    ...(plan.viewport ? { viewport: plan.viewport } : {}),
    ...(actions.length > 0 ? { actions } : {}),
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
