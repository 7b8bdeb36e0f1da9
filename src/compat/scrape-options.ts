import { ApiError } from '../errors';

/**
 * Every Firecrawl scrape option (v1 and v2), and what this service does with it: serves it, accepts it
 * because it cannot change the answer, or refuses it (400 `unsupported_option`, naming it) because it
 * would and is not served. A key that is no Firecrawl option is refused too, as Firecrawl's strict
 * request schemas refuse it. docs/decisions.md shows this table.
 */

type Version = 'v1' | 'v2';

interface OptionRule {
  versions: readonly Version[];
  verdict: 'served' | 'accepted' | 'refused';
  why: string;
  /** For an accepted option: the values that would change the answer, and so are refused. */
  refuses?: (value: unknown) => boolean;
}

const BOTH: readonly Version[] = ['v1', 'v2'];
const given = (value: unknown) => value !== undefined && value !== null;
const truthy = (value: unknown) => given(value) && value !== false;

export const SCRAPE_OPTIONS: Readonly<Record<string, OptionRule>> = Object.freeze({
  url: { versions: BOTH, verdict: 'served', why: 'the page; without a scheme, http:// is assumed' },
  formats: {
    versions: BOTH,
    verdict: 'served',
    why:
      'markdown, html, rawHtml, links, screenshot; json (v1 json and extract) and summary by a ' +
      "strong-tier chat on the page's markdown, billed with the page; others are 400 " +
      'unsupported_format',
  },
  onlyMainContent: { versions: BOTH, verdict: 'served', why: 'strips page chrome from html and markdown' },
  includeTags: { versions: BOTH, verdict: 'served', why: 'CSS selectors kept in html and markdown' },
  excludeTags: { versions: BOTH, verdict: 'served', why: 'CSS selectors removed from html and markdown' },
  timeout: { versions: BOTH, verdict: 'served', why: "milliseconds, the tasks' timeout" },
  waitFor: {
    versions: BOTH,
    verdict: 'served',
    why: 'the page is rendered and waited for before its content and screenshot are taken',
  },
  mobile: {
    versions: BOTH,
    verdict: 'served',
    why: 'a rendered page and its screenshot use a phone viewport (390×844)',
  },
  actions: { versions: BOTH, verdict: 'served', why: 'run in order in the rendered page; results in data.actions' },
  removeBase64Images: {
    versions: BOTH,
    verdict: 'served',
    why: 'default true: base64 images in markdown become <Base64-Image-Removed>',
  },
  maxPricePoints: {
    versions: BOTH,
    verdict: 'served',
    why:
      "this service's own option: the most the scrape may charge, page tasks and json and " +
      'summary completions together',
  },
  origin: {
    versions: BOTH,
    verdict: 'accepted',
    why: 'a label of the calling program (SDKs send it); it changes nothing in the answer',
  },
  integration: {
    versions: BOTH,
    verdict: 'accepted',
    why: 'a label of the calling integration; it changes nothing in the answer',
  },
  maxAge: {
    versions: BOTH,
    verdict: 'served',
    why:
      'milliseconds (default 172800000, two days): a page fetched less long ago is answered from ' +
      'the page cache, free, with metadata.cacheState "hit" and cachedAt; 0 fetches fresh. ' +
      'Screenshots and actions are always fresh',
  },
  storeInCache: { versions: BOTH, verdict: 'served', why: 'false: the page fetched is not kept in the page cache' },
  fastMode: { versions: BOTH, verdict: 'accepted', why: 'a speed hint; the content is the same' },
  parsePDF: {
    versions: BOTH,
    verdict: 'accepted',
    why: 'PDFs are not parsed: a PDF answers unsupported_content whatever it says, never a different ' + 'text',
  },
  parsers: {
    versions: ['v2'],
    verdict: 'accepted',
    why: 'PDFs and images are not parsed: such a URL answers unsupported_content whatever it says',
  },
  skipTlsVerification: {
    versions: BOTH,
    verdict: 'accepted',
    why: 'certificates are always verified: a bad one answers tls_error, never other content',
  },
  auditMetadata: {
    versions: BOTH,
    verdict: 'accepted',
    why: "a label for Firecrawl's audit log; it changes nothing in the answer",
  },
  toolDetail: { versions: ['v2'], verdict: 'accepted', why: 'only shapes domainTools, which is not served' },
  headers: {
    versions: BOTH,
    verdict: 'accepted',
    why:
      'a solver sends no caller-chosen headers (they could carry credentials to any site); ' +
      'headers other than none are refused',
    refuses: (value) => given(value) && Object.keys(value as object).length > 0,
  },
  blockAds: {
    versions: BOTH,
    verdict: 'accepted',
    why:
      "Firecrawl's default, which firecrawl-py 4.x sends with every scrape: ads and cookie " +
      'banners come from third-party scripts, which a fetch never runs and main-content ' +
      "extraction drops; a rendered page's screenshot may show them",
  },
  proxy: {
    versions: BOTH,
    verdict: 'accepted',
    why: 'solvers fetch directly: basic is what is served; stealth, enhanced and auto are refused',
    refuses: (value) => given(value) && value !== 'basic',
  },
  location: {
    versions: BOTH,
    verdict: 'served',
    why:
      'country (default US, as Firecrawl): only solvers that declare fetching from it take the ' +
      'scrape; languages (the Accept-Language a browser sends) are refused, as headers are',
    refuses: (value) => Boolean((value as { languages?: unknown[] | null }).languages?.length),
  },
  minAge: {
    versions: ['v2'],
    verdict: 'refused',
    why: 'an answer only from a cached copy at least this old is not served; maxAge is',
  },
  lockdown: {
    versions: ['v2'],
    verdict: 'accepted',
    why: 'false is what is served; true (an answer from the cache only, never a fetch) is refused',
    refuses: truthy,
  },
  useMock: { versions: BOTH, verdict: 'refused', why: "Firecrawl's recorded test responses are not served" },
  redactPII: {
    versions: ['v2'],
    verdict: 'accepted',
    why: 'no redaction: false is what is served, any other is refused',
    refuses: truthy,
  },
  threatProtection: {
    versions: ['v2'],
    verdict: 'refused',
    why: 'the domain policy decides which sites are refused; it is not set per request',
  },
  profile: {
    versions: ['v2'],
    verdict: 'refused',
    why: 'every task runs in a fresh browser context; no profile is kept',
  },
  domainTools: {
    versions: ['v2'],
    verdict: 'accepted',
    why: 'tools are not listed: false is what is served, true is refused',
    refuses: truthy,
  },
  zeroDataRetention: {
    versions: BOTH,
    verdict: 'accepted',
    why:
      'tasks (payload and result) are kept (results for RESULT_RETENTION_SECONDS) and their pages ' +
      'cached: false is what is served, true is refused',
    refuses: truthy,
  },
  jsonOptions: {
    versions: ['v1'],
    verdict: 'served',
    why:
      "the json format's schema, prompt and systemPrompt: a strong-tier chat fills data.json " +
      'from the page, validated against the schema',
  },
  extract: {
    versions: ['v1'],
    verdict: 'served',
    why:
      "the extract format's schema, prompt and systemPrompt: a strong-tier chat fills " +
      'data.extract from the page, validated against the schema',
  },
  changeTrackingOptions: { versions: ['v1'], verdict: 'refused', why: 'change tracking is not served' },
  agent: { versions: ['v1'], verdict: 'refused', why: 'the FIRE-1 agent is not served' },
});

export function unsupportedOption(option: string, message: string): ApiError {
  return new ApiError('unsupported_option', message, { option });
}

/** Refuses the first option of `body` that is unknown to Firecrawl's `version`, refused, or given a refused value. */
export function assertScrapeOptions(body: Record<string, unknown>, version: Version): void {
  for (const [option, value] of Object.entries(body)) {
    const rule = Object.hasOwn(SCRAPE_OPTIONS, option) ? SCRAPE_OPTIONS[option]! : undefined;
    if (!rule || !rule.versions.includes(version)) {
      throw unsupportedOption(
        option,
        `Unrecognized key in body: "${option}" is not a Firecrawl ${version} scrape option.`,
      );
    }
    if (!given(value)) continue;
    if (rule.verdict === 'refused' || rule.refuses?.(value)) {
      throw unsupportedOption(
        option,
        `The "${option}" option${rule.refuses ? ` (${JSON.stringify(value)})` : ''} is not ` +
          `supported by this service: ${rule.why}.`,
      );
    }
  }
}
