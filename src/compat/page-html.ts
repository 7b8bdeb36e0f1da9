import { documentTitle, parseDocument } from '../solver/html/markdown';

/**
 * What Firecrawl derives from a page's raw HTML: its cleaned HTML, its links and its metadata. Done on
 * the API node from one raw-HTML fetch, so `html`, `rawHtml` and `links` cost a single task.
 */

type PageDocument = ReturnType<typeof parseDocument>['document'];

// Never content in any view of the page.
const NEVER_CONTENT = 'script, style, noscript, template, link, meta, base';
// Page chrome around the main content; removed when onlyMainContent is on (Firecrawl's default).
const NOT_MAIN_CONTENT =
  'header, nav, footer, aside, [role="navigation"], [role="banner"], [role="contentinfo"], ' +
  '[role="complementary"], [aria-hidden="true"]';
const URL_ATTRIBUTES: Array<[string, string]> = [
  ['a[href]', 'href'],
  ['area[href]', 'href'],
  ['img[src]', 'src'],
  ['source[src]', 'src'],
  ['video[src]', 'src'],
  ['audio[src]', 'src'],
  ['iframe[src]', 'src'],
];

function absolute(value: string, baseUrl: string): string | null {
  try {
    const url = new URL(value.trim(), baseUrl);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url.href : null;
  } catch {
    return null;
  }
}

function baseUrlOf(document: PageDocument, pageUrl: string): string {
  const declared = document.querySelector('base[href]')?.getAttribute('href');
  return (declared && absolute(declared, pageUrl)) || pageUrl;
}

/** Firecrawl's includeTags / excludeTags: CSS selectors (tag names, `.class`, `#id`, …). */
export interface TagFilter {
  include?: readonly string[];
  exclude?: readonly string[];
}

/** Whether `selector` is a CSS selector the page parser understands (a bad one is the client's 422). */
export function isValidSelector(selector: string): boolean {
  try {
    parseDocument('<p></p>').document.querySelectorAll(selector);
    return true;
  } catch {
    return false;
  }
}

/**
 * The page's HTML without scripts, styles and (when `onlyMainContent`) its chrome; URLs made absolute.
 * With `tags`, excluded elements are removed and, when some are included, only those are kept.
 */
export function cleanHtml(rawHtml: string, pageUrl: string, onlyMainContent: boolean, tags: TagFilter = {}): string {
  const { document } = parseDocument(rawHtml);
  const base = baseUrlOf(document, pageUrl);
  for (const element of document.querySelectorAll(NEVER_CONTENT)) element.remove();
  if (onlyMainContent) for (const element of document.querySelectorAll(NOT_MAIN_CONTENT)) element.remove();
  for (const selector of tags.exclude ?? [])
    for (const element of document.querySelectorAll(selector)) element.remove();
  if (tags.include?.length && document.body) {
    const kept = [...document.body.querySelectorAll(tags.include.join(', '))];
    // An element inside another kept one is already part of it.
    const outermost = kept.filter((element) => !kept.some((other) => other !== element && other.contains(element)));
    document.body.innerHTML = outermost.map((element) => element.outerHTML).join('');
  }
  for (const [selector, attribute] of URL_ATTRIBUTES) {
    for (const element of document.querySelectorAll(selector)) {
      const value = element.getAttribute(attribute) ?? '';
      // javascript: and other schemes are dropped rather than handed to a client as links.
      const resolved = absolute(value, base);
      if (resolved) element.setAttribute(attribute, resolved);
      else if (!/^(data:|#|mailto:|tel:)/i.test(value.trim())) element.removeAttribute(attribute);
    }
  }
  return (document.body?.innerHTML ?? '').trim();
}

/** Every distinct http(s) link of the page, absolute, in document order. */
export function extractLinks(rawHtml: string, pageUrl: string): string[] {
  return linksOf(parseDocument(rawHtml).document, pageUrl);
}

/** extractLinks of a parsed page. */
export function linksOf(document: PageDocument, pageUrl: string): string[] {
  const base = baseUrlOf(document, pageUrl);
  const links = new Set<string>();
  for (const element of document.querySelectorAll('a[href], area[href]')) {
    const resolved = absolute(element.getAttribute('href') ?? '', base);
    if (resolved) links.add(resolved);
  }
  return [...links];
}

// Firecrawl metadata key for each <meta name|property>.
const META_FIELDS: Record<string, string> = {
  description: 'description',
  keywords: 'keywords',
  robots: 'robots',
  'og:title': 'ogTitle',
  'og:description': 'ogDescription',
  'og:url': 'ogUrl',
  'og:image': 'ogImage',
  'og:site_name': 'ogSiteName',
  'og:locale': 'ogLocale',
};

/** An attribute by case-insensitive name (the parser keeps names as written: NAME, Content...). */
function attribute(
  element: { attributes: ArrayLike<{ name: string; value: string }> },
  name: string,
): string | undefined {
  for (const attr of Array.from(element.attributes)) if (attr.name.toLowerCase() === name) return attr.value;
  return undefined;
}

/** Firecrawl's metadata fields that the page's head declares (title, description, language, og:*). */
export function pageMetadata(rawHtml: string): Record<string, string> {
  return metadataOf(parseDocument(rawHtml).document);
}

/** pageMetadata of a parsed page. */
export function metadataOf(document: PageDocument): Record<string, string> {
  const metadata: Record<string, string> = {};
  const title = documentTitle(document);
  if (title) metadata.title = title;
  const language = document.documentElement ? attribute(document.documentElement, 'lang')?.trim() : undefined;
  if (language) metadata.language = language;
  for (const meta of document.querySelectorAll('meta')) {
    const key = META_FIELDS[(attribute(meta, 'name') ?? attribute(meta, 'property') ?? '').trim().toLowerCase()];
    const content = attribute(meta, 'content')?.trim();
    // The first declaration wins, as browsers and crawlers read it.
    if (key && content && !(key in metadata)) metadata[key] = content;
  }
  return metadata;
}
