import type { SCRAPE_FORMATS } from '../schemas/requests';
import { mergeScans, type ScanResult } from '../safety/scanner';
import { cleanHtml, extractLinks, pageMetadata } from './page-html';

/**
 * Firecrawl v1 scrape semantics on top of our web tasks: which tasks a request needs, and how their
 * results become Firecrawl's `data` document and failure bodies.
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

/** Firecrawl's `data` document: only the requested formats, plus `metadata`. */
export function scrapeDocument(input: { url: string; formats: readonly ScrapeFormat[]; onlyMainContent: boolean; results: ScrapeResults }) {
  const { url, formats, onlyMainContent, results } = input;
  const fetched = results.markdown?.result ?? results.rawHtml?.result;
  const finalUrl = fetched?.final_url ?? url;
  const raw = results.rawHtml?.result.content ?? '';
  const fromHead = results.rawHtml ? pageMetadata(raw) : {};
  const title = results.markdown?.result.title ?? results.rawHtml?.result.title ?? fromHead.title;
  const taskIds = Object.values(results).map((part) => part!.taskId);
  const screenshot = results.screenshot?.result;
  return {
    ...(formats.includes('markdown') ? { markdown: results.markdown?.result.content ?? '' } : {}),
    ...(formats.includes('html') ? { html: cleanHtml(raw, finalUrl, onlyMainContent) } : {}),
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

// Firecrawl clients know 400, 401, 402, 403, 408, 409, 429 and 500; our other failure statuses map here.
const FIRECRAWL_STATUS: Record<number, number> = { 502: 500, 503: 500, 504: 408 };

/**
 * Rewrites one of our error bodies as Firecrawl's failure body `{success:false, error}`. Validation
 * errors keep 422 and their `detail` list (the API contract), with `success` and `error` added.
 */
export function firecrawlFailure(status: number, body: unknown): { status: number; body: unknown } {
  const ours = body as { detail?: Array<{ loc: (string | number)[]; msg: string }>; error?: { type: string; message: string } } | undefined;
  if (ours?.detail) {
    const summary = ours.detail.map((item) => `${item.loc.join('.')}: ${item.msg}`).join('; ');
    return { status, body: { success: false, error: `Bad Request: ${summary}`, detail: ours.detail } };
  }
  if (ours?.error) {
    const { type, message, ...extra } = ours.error;
    return { status: FIRECRAWL_STATUS[status] ?? status, body: { success: false, error: message, code: type, ...extra } };
  }
  return { status, body };
}
