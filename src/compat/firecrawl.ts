import type { SCRAPE_FORMATS } from '../schemas/requests';
import { mergeScans, type ScanResult } from '../safety/scanner';
import { documentToMarkdown, htmlToMarkdown, parseDocument, type LinkedomDocument } from '../solver/html/markdown';
import { cleanHtml, linksOf, metadataOf, type TagFilter } from './page-html';
import type { firecrawlActions } from './firecrawl-actions';

/**
 * Firecrawl scrape semantics on top of our web tasks: which tasks a request needs, and how their
 * results become Firecrawl's `data` document (v1 and v2 share it) and failure bodies.
 */

export type ScrapeFormat = (typeof SCRAPE_FORMATS)[number];

/** Firecrawl's default when `formats` is absent. */
export const DEFAULT_FORMATS: ScrapeFormat[] = ['markdown'];

/** Firecrawl accepts a URL without a scheme and assumes http. */
export function withScheme(url: string): string {
  const trimmed = url.trim();
  return /^[a-z][a-z0-9+.-]*:/i.test(trimmed) ? trimmed : `http://${trimmed}`;
}

/** Firecrawl's `timeout` is milliseconds; our tasks count whole seconds. */
export const timeoutSecondsOf = (timeoutMs: number | null | undefined) =>
  timeoutMs ? Math.max(1, Math.ceil(timeoutMs / 1000)) : undefined;

/** The page a scrape's content comes from: a fetch's raw HTML (or text), or a rendered page's HTML. */
export interface ScrapedPage {
  content: string;
  /** text: a fetched non-HTML page (JSON, plain text…), given as it is. */
  kind: 'html' | 'text';
  finalUrl?: string;
  statusCode?: number | null;
  title?: string | null;
}

export interface ScrapeParts {
  page?: ScrapedPage;
  /** Where the client fetches the screenshot (src/http/routes/tasks.ts, GET /v1/tasks/{task_id}/artifacts/{name}). */
  screenshot?: { url: string };
  actions?: ReturnType<typeof firecrawlActions>;
  taskIds: string[];
  /** Each task's safety findings, under the name of the part it produced. */
  scans: Array<{ name: string; safety: ScanResult }>;
  warning?: string;
}

/** Safety findings of each task, their locations named after the part they came from. */
function mergedSafety(scans: ScrapeParts['scans']): { safety: ScanResult } | Record<string, never> {
  if (scans.length === 0) return {};
  return {
    safety: mergeScans(
      scans.map(({ name, safety }) => ({
        flagged: safety.flagged,
        findings: safety.findings.map((finding) => ({
          ...finding,
          location: `${name}.${finding.location ?? ''}`.replace(/\.$/, ''),
        })),
      })),
    ),
  };
}

// Firecrawl's placeholder for an inline image it leaves out of markdown.
const BASE64_IMAGE = /\(data:image\/[^;)]+;base64,[^)]*\)/g;

/**
 * The main content as the solver's fetch converts it, from the page's parsed HTML (which it changes);
 * filtered or whole-page markdown from the cleaned HTML.
 */
function markdownOf(
  page: ScrapedPage,
  parsed: LinkedomDocument | null,
  pageUrl: string,
  onlyMainContent: boolean,
  tags: TagFilter,
): string {
  if (page.kind === 'text') return page.content;
  if (!page.content || !parsed) return '';
  const filtered = Boolean(tags.include?.length || tags.exclude?.length);
  if (onlyMainContent && !filtered) return documentToMarkdown(parsed, page.content, pageUrl).markdown;
  return htmlToMarkdown(cleanHtml(page.content, pageUrl, onlyMainContent, tags), pageUrl, {
    mainContentOnly: false,
    titleHeading: false,
  }).markdown;
}

type ScrapeInput = {
  url: string;
  formats: readonly string[];
  onlyMainContent: boolean;
  tags?: TagFilter;
  removeBase64Images?: boolean;
  parts: ScrapeParts;
};

/** Firecrawl's `data` document: only the requested formats, plus `metadata` (and `actions` when some ran). */
export function scrapeDocument(input: ScrapeInput) {
  return scrapePage(input, false).document;
}

/**
 * scrapeDocument, and the page's links when `withLinks` (a crawl follows them) or the `links` format asks
 * for them. The HTML is parsed once for the metadata, the links and the main content's markdown, in that
 * order: the markdown's conversion changes the parsed page.
 */
export function scrapePage(input: ScrapeInput, withLinks: boolean) {
  const { url, formats, onlyMainContent, tags = {}, removeBase64Images = true, parts } = input;
  const page = parts.page;
  const finalUrl = page?.finalUrl ?? url;
  const html = page?.kind === 'html' ? page.content : '';
  const raw = page?.content ?? '';
  const parsed = html ? parseDocument(html).document : null;
  const fromHead = parsed ? metadataOf(parsed) : {};
  const links = parsed && (withLinks || formats.includes('links')) ? linksOf(parsed, finalUrl) : [];
  const title = page?.title ?? fromHead.title;
  const markdown = () => {
    const text = page ? markdownOf(page, parsed, finalUrl, onlyMainContent, tags) : '';
    return removeBase64Images ? text.replace(BASE64_IMAGE, '(<Base64-Image-Removed>)') : text;
  };
  const screenshot = parts.screenshot;
  const document = {
    ...(formats.includes('markdown') ? { markdown: markdown() } : {}),
    ...(formats.includes('html') ? { html: html ? cleanHtml(html, finalUrl, onlyMainContent, tags) : raw } : {}),
    ...(formats.includes('rawHtml') ? { rawHtml: raw } : {}),
    ...(formats.includes('links') ? { links } : {}),
    ...(screenshot ? { screenshot: screenshot.url } : {}),
    ...(parts.actions ? { actions: parts.actions } : {}),
    ...(parts.warning ? { warning: parts.warning } : {}),
    metadata: {
      ...fromHead,
      ...(title ? { title } : {}),
      sourceURL: url,
      url: finalUrl,
      ...(page?.statusCode !== undefined && page.statusCode !== null ? { statusCode: page.statusCode } : {}),
      scrapeId: parts.taskIds[0],
      taskIds: parts.taskIds,
    },
    ...mergedSafety(parts.scans),
  };
  return { document, links };
}

// Firecrawl clients know 400, 401, 402, 403, 408, 409, 429 and 500; our other failure statuses map here.
// 503 stays: it is temporary (no solver online) and carries Retry-After, which a 500 would hide.
export const FIRECRAWL_STATUS: Record<number, number> = { 502: 500, 504: 408 };

/**
 * Rewrites one of our error bodies as Firecrawl's failure body `{success:false, error}`. Validation
 * errors keep 422 and their `detail` list (the API contract), with `success` and `error` added.
 */
export function firecrawlFailure(status: number, body: unknown): { status: number; body: unknown } {
  const ours = body as
    | {
        detail?: Array<{ type: string; loc: (string | number)[]; msg: string; input?: unknown }>;
        error?: { type: string; message: string };
      }
    | undefined;
  if (ours?.detail) {
    // A refused value is named (the `json` format, say); a missing field's input is its parent, left out.
    const given = (item: { type: string; input?: unknown }) =>
      item.type !== 'missing' && ['string', 'number', 'boolean'].includes(typeof item.input)
        ? ` (got ${JSON.stringify(item.input)})`
        : '';
    const summary = ours.detail.map((item) => `${item.loc.join('.')}: ${item.msg}${given(item)}`).join('; ');
    return { status, body: { success: false, error: `Bad Request: ${summary}`, detail: ours.detail } };
  }
  if (ours?.error) {
    const { type, message, ...extra } = ours.error;
    return {
      status: FIRECRAWL_STATUS[status] ?? status,
      body: { success: false, error: message, code: type, ...extra },
    };
  }
  return { status, body };
}
