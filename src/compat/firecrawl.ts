import type { SCRAPE_FORMATS } from '../schemas/requests';
import { mergeScans, type ScanResult } from '../safety/scanner';
import { htmlToMarkdown } from '../solver/html/markdown';
import { cleanHtml, extractLinks, pageMetadata, type TagFilter } from './page-html';

/**
 * Firecrawl scrape semantics on top of our web tasks: which tasks a request needs, and how their
 * results become Firecrawl's `data` document (v1 and v2 share it) and failure bodies.
 */

export type ScrapeFormat = (typeof SCRAPE_FORMATS)[number];

/** Firecrawl's default when `formats` is absent. */
export const DEFAULT_FORMATS: ScrapeFormat[] = ['markdown'];

export interface ScrapePlan {
  /** proxy_fetch, markdown (the solver's main-content conversion). */
  markdown: boolean;
  /** proxy_fetch with raw_html: html, rawHtml and links are all derived from it. */
  rawHtml: boolean;
  screenshot: { fullPage: boolean } | null;
}

export function planScrape(formats: readonly ScrapeFormat[]): ScrapePlan {
  const has = (format: ScrapeFormat) => formats.includes(format);
  return {
    markdown: has('markdown'),
    rawHtml: has('html') || has('rawHtml') || has('links'),
    screenshot: has('screenshot@fullPage') ? { fullPage: true } : has('screenshot') ? { fullPage: false } : null,
  };
}

/** Firecrawl accepts a URL without a scheme and assumes http. */
export function withScheme(url: string): string {
  const trimmed = url.trim();
  return /^[a-z][a-z0-9+.-]*:/i.test(trimmed) ? trimmed : `http://${trimmed}`;
}

/** Firecrawl's `timeout` is milliseconds; our tasks count whole seconds. */
export const timeoutSecondsOf = (timeoutMs: number | null | undefined) => (timeoutMs ? Math.max(1, Math.ceil(timeoutMs / 1000)) : undefined);

interface FetchResult {
  final_url?: string;
  status_code?: number;
  content?: string;
  title?: string | null;
  safety?: ScanResult;
}

interface ScreenshotResult {
  mime_type?: string;
  image_base64?: string;
  safety?: ScanResult;
}

export interface ScrapeResults {
  markdown?: { taskId: string; result: FetchResult };
  rawHtml?: { taskId: string; result: FetchResult };
  screenshot?: { taskId: string; result: ScreenshotResult };
}

/** Safety findings of each task, their locations named after the Firecrawl field they came from. */
function mergedSafety(results: ScrapeResults): { safety: ScanResult } | Record<string, never> {
  const parts = Object.entries(results).filter(([, part]) => part?.result.safety) as Array<[string, { result: { safety: ScanResult } }]>;
  if (parts.length === 0) return {};
  const scans = parts.map(([name, part]) => ({
    flagged: part.result.safety.flagged,
    findings: part.result.safety.findings.map((finding) => ({ ...finding, location: `${name}.${finding.location ?? ''}`.replace(/\.$/, '') })),
  }));
  return { safety: mergeScans(scans) };
}

/**
 * Firecrawl's `data` document: only the requested formats, plus `metadata`. Markdown is the solver's
 * main-content conversion when it ran a fetch for it, else it is derived here from the cleaned HTML
 * (the plan asks for that when tag filters or the whole page are wanted).
 */
export function scrapeDocument(input: { url: string; formats: readonly string[]; onlyMainContent: boolean; tags?: TagFilter; results: ScrapeResults }) {
  const { url, formats, onlyMainContent, tags, results } = input;
  const fetched = results.markdown?.result ?? results.rawHtml?.result;
  const finalUrl = fetched?.final_url ?? url;
  const raw = results.rawHtml?.result.content ?? '';
  const fromHead = results.rawHtml ? pageMetadata(raw) : {};
  const title = results.markdown?.result.title ?? results.rawHtml?.result.title ?? fromHead.title;
  const taskIds = Object.values(results).map((part) => part!.taskId);
  const screenshot = results.screenshot?.result;
  return {
    ...(formats.includes('markdown') ? { markdown: results.markdown ? (results.markdown.result.content ?? '') : derivedMarkdown(raw, finalUrl, onlyMainContent, tags) } : {}),
    ...(formats.includes('html') ? { html: cleanHtml(raw, finalUrl, onlyMainContent, tags) } : {}),
    ...(formats.includes('rawHtml') ? { rawHtml: raw } : {}),
    ...(formats.includes('links') ? { links: extractLinks(raw, finalUrl) } : {}),
    ...(screenshot ? { screenshot: `data:${screenshot.mime_type ?? 'image/png'};base64,${screenshot.image_base64 ?? ''}` } : {}),
    metadata: {
      ...fromHead,
      ...(title ? { title } : {}),
      sourceURL: url,
      url: finalUrl,
      ...(fetched?.status_code !== undefined ? { statusCode: fetched.status_code } : {}),
      scrapeId: taskIds[0],
      taskIds,
    },
    ...mergedSafety(results),
  };
}

function derivedMarkdown(rawHtml: string, pageUrl: string, onlyMainContent: boolean, tags: TagFilter | undefined): string {
  if (!rawHtml) return '';
  return htmlToMarkdown(cleanHtml(rawHtml, pageUrl, onlyMainContent, tags), pageUrl, { mainContentOnly: false, titleHeading: false }).markdown;
}

// Firecrawl clients know 400, 401, 402, 403, 408, 409, 429 and 500; our other failure statuses map here.
// 503 stays: it is temporary (no solver online) and carries Retry-After, which a 500 would hide.
export const FIRECRAWL_STATUS: Record<number, number> = { 502: 500, 504: 408 };

/**
 * Rewrites one of our error bodies as Firecrawl's failure body `{success:false, error}`. Validation
 * errors keep 422 and their `detail` list (the API contract), with `success` and `error` added.
 */
export function firecrawlFailure(status: number, body: unknown): { status: number; body: unknown } {
  const ours = body as { detail?: Array<{ type: string; loc: (string | number)[]; msg: string; input?: unknown }>; error?: { type: string; message: string } } | undefined;
  if (ours?.detail) {
    // A refused value is named (the `json` format, say); a missing field's input is its parent, left out.
    const given = (item: { type: string; input?: unknown }) => (item.type !== 'missing' && ['string', 'number', 'boolean'].includes(typeof item.input) ? ` (got ${JSON.stringify(item.input)})` : '');
    const summary = ours.detail.map((item) => `${item.loc.join('.')}: ${item.msg}${given(item)}`).join('; ');
    return { status, body: { success: false, error: `Bad Request: ${summary}`, detail: ours.detail } };
  }
  if (ours?.error) {
    const { type, message, ...extra } = ours.error;
    return { status: FIRECRAWL_STATUS[status] ?? status, body: { success: false, error: message, code: type, ...extra } };
  }
  return { status, body };
}
