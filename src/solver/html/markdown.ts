import { parseHTML } from 'linkedom';
import { Readability } from '@mozilla/readability';
import TurndownService from 'turndown';

/**
 * HTML → markdown of the page's main content. Readability runs on a linkedom DOM; turndown is given the
 * article as an HTML *string* (it parses it with its own DOM: its rules walk nodes in ways linkedom's
 * nodes do not support, tables in particular). Links and images are made absolute beforehand because
 * linkedom has no base URL for Readability to resolve them against.
 */

export type LinkedomDocument = ReturnType<typeof parseHTML>['document'];
type LinkedomElement = ReturnType<LinkedomDocument['querySelectorAll']>[number];

const URL_ATTRIBUTES: Array<[selector: string, attribute: string]> = [
  ['a[href]', 'href'],
  ['area[href]', 'href'],
  ['img[src]', 'src'],
  ['video[src]', 'src'],
  ['video[poster]', 'poster'],
  ['audio[src]', 'src'],
  ['source[src]', 'src'],
  ['iframe[src]', 'src'],
];

const SRCSET_SELECTORS = ['img[srcset]', 'source[srcset]'];
const NEVER_CONTENT = 'script, style, noscript, template, link, meta';

export type MarkdownPage = { title: string | null; markdown: string };

export type MarkdownOptions = {
  /** Keep only the main content (Readability); false converts the whole fragment, e.g. a selected element. */
  mainContentOnly?: boolean;
  /** Start the markdown with the page title as a heading unless the content already does. Default true. */
  titleHeading?: boolean;
};

export function htmlToMarkdown(html: string, pageUrl: string, options: MarkdownOptions = {}): MarkdownPage {
  return documentToMarkdown(parseDocument(html).document, html, pageUrl, options);
}

/**
 * htmlToMarkdown of a document parsed already (with parseDocument from `html`), which it changes: read what else
 * is wanted of it first.
 */
export function documentToMarkdown(
  document: LinkedomDocument,
  html: string,
  pageUrl: string,
  options: MarkdownOptions = {},
): MarkdownPage {
  const title = documentTitle(document);
  absolutizeUrls(document, baseUrlOf(document, pageUrl));
  for (const element of document.querySelectorAll(NEVER_CONTENT)) element.remove();
  const wholeBody = document.body?.innerHTML ?? html;

  let contentHtml = wholeBody;
  let articleTitle: string | null = null;
  if (options.mainContentOnly !== false) {
    const article = readArticle(document);
    if (article?.content && article.textContent && article.textContent.trim().length > 0) {
      contentHtml = article.content;
      articleTitle = article.title?.trim() || null;
    }
  }
  const body = turndown().turndown(contentHtml).trim();
  const pageTitle = title ?? articleTitle;
  return { title: pageTitle, markdown: options.titleHeading === false ? body : withTitleHeading(pageTitle, body) };
}

/** linkedom only builds <html>/<body> when the markup has them; fragments are wrapped so `body` exists. */
export function parseDocument(html: string) {
  const hasShell = /<(html|body)[\s>]/i.test(html);
  return parseHTML(hasShell ? html : `<!DOCTYPE html><html><head></head><body>${html}</body></html>`);
}

/** A title's text as it is shown: runs of white space as one space, none at the ends. */
const collapseSpaces = (text: string) => text.replace(/\s+/g, ' ').trim();

/** The <title>, or the first heading when there is none. */
export function documentTitle(document: LinkedomDocument): string | null {
  const title = collapseSpaces(document.querySelector('title')?.textContent ?? '');
  if (title) return title;
  return collapseSpaces(document.querySelector('h1, h2')?.textContent ?? '') || null;
}

/** documentTitle of the page's markup; a plain <title> is read without building the page's DOM. */
export function titleOfHtml(html: string): string | null {
  return plainTitle(html) ?? documentTitle(parseDocument(html).document);
}

// A start or end tag with its attributes, or a doctype. Before the title only these and text are read:
// anything else (a comment, a raw-text or foreign element, markup this does not read) leaves the title
// to the DOM, as does a title that holds an entity or markup.
const TAG =
  /<(?:!doctype[^>]*|(\/?)([a-z][^\s/>]*)(?:\s+[^\s"'>/=]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+))?)*\s*(\/?))>/iy;
const PARSED_CONTENT = new Set([
  'script',
  'style',
  'textarea',
  'xmp',
  'iframe',
  'noembed',
  'noframes',
  'noscript',
  'plaintext',
  'template',
  'svg',
  'math',
]);
const TITLE_END = /<\/title[\s/>]/gi;

/**
 * The title a DOM would read, when the markup's first <title> is plainly the first title element and
 * holds plain text (no entity, no markup); null otherwise, or when that text is blank.
 */
function plainTitle(html: string): string | null {
  let at = 0;
  for (;;) {
    at = html.indexOf('<', at);
    if (at < 0) return null;
    TAG.lastIndex = at;
    const tag = TAG.exec(html);
    if (!tag) return null;
    at = TAG.lastIndex;
    const [, closing, rawName, selfClosed] = tag;
    if (!rawName) continue;
    const name = rawName.toLowerCase();
    // The page's content begins: a title there is rare, and reading on would scan the whole page.
    if (name === 'body') return null;
    if (PARSED_CONTENT.has(name) && !closing) return null;
    if (name !== 'title' || closing) continue;
    if (selfClosed) return null;
    TITLE_END.lastIndex = at;
    const end = TITLE_END.exec(html);
    if (!end) return null;
    const text = html.slice(at, end.index);
    if (/[<&]/.test(text)) return null;
    return collapseSpaces(text) || null;
  }
}

function readArticle(document: LinkedomDocument) {
  try {
    return new Readability(document as unknown as ConstructorParameters<typeof Readability>[0]).parse();
  } catch {
    // Readability gives up on some malformed documents; the whole body is the fallback.
    return null;
  }
}

function withTitleHeading(title: string | null, body: string): string {
  if (!title) return body;
  const firstHeading = body.match(/^#{1,6}\s+(.+)$/m)?.[1]?.trim();
  if (firstHeading && body.trimStart().startsWith('#') && normalize(firstHeading) === normalize(title)) return body;
  return `# ${escapeHeading(title)}\n\n${body}`;
}

const normalize = (text: string) => text.toLowerCase().replace(/\s+/g, ' ').trim();
const escapeHeading = (text: string) => text.replace(/\n/g, ' ');

function baseUrlOf(document: LinkedomDocument, pageUrl: string): string {
  const declared = document.querySelector('base[href]')?.getAttribute('href');
  if (!declared) return pageUrl;
  try {
    return new URL(declared, pageUrl).href;
  } catch {
    return pageUrl;
  }
}

function absolutizeUrls(document: LinkedomDocument, baseUrl: string): void {
  for (const [selector, attribute] of URL_ATTRIBUTES) {
    for (const element of document.querySelectorAll(selector)) rewriteAttribute(element, attribute, baseUrl);
  }
  for (const image of document.querySelectorAll('img[data-src]')) {
    const current = image.getAttribute('src');
    if (!current || current.startsWith('data:')) {
      image.setAttribute('src', image.getAttribute('data-src')!);
      rewriteAttribute(image, 'src', baseUrl);
    }
  }
  for (const selector of SRCSET_SELECTORS) {
    for (const element of document.querySelectorAll(selector)) {
      const srcset = element.getAttribute('srcset')!;
      const rewritten = srcset
        .split(',')
        .map((candidate: string) => {
          const [url, ...descriptor] = candidate.trim().split(/\s+/);
          const absolute = url ? absoluteUrl(url, baseUrl) : null;
          return absolute ? [absolute, ...descriptor].join(' ') : null;
        })
        .filter(Boolean)
        .join(', ');
      element.setAttribute('srcset', rewritten);
    }
  }
}

function rewriteAttribute(element: LinkedomElement, attribute: string, baseUrl: string): void {
  const value = element.getAttribute(attribute)?.trim();
  if (!value) return;
  if (/^javascript:/i.test(value)) {
    element.removeAttribute(attribute);
    return;
  }
  const absolute = absoluteUrl(value, baseUrl);
  if (absolute) element.setAttribute(attribute, absolute);
}

function absoluteUrl(value: string, baseUrl: string): string | null {
  if (value.startsWith('data:')) return value;
  try {
    return new URL(value, baseUrl).href;
  } catch {
    return null;
  }
}

let sharedTurndown: TurndownService | undefined;

function turndown(): TurndownService {
  sharedTurndown ??= createTurndown();
  return sharedTurndown;
}

type TurndownNode = TurndownService.Node;

function createTurndown(): TurndownService {
  const service = new TurndownService({
    headingStyle: 'atx',
    codeBlockStyle: 'fenced',
    bulletListMarker: '-',
    emDelimiter: '_',
  });
  service.remove(['script', 'style', 'noscript', 'template'] as TurndownService.Filter);
  // GFM tables; the first row is the header row because markdown tables must have one.
  service.addRule('tableCell', {
    filter: ['th', 'td'],
    replacement: (content, node) => {
      const cell = content
        .replace(/\s*\n+\s*/g, ' ')
        .replace(/\|/g, '\\|')
        .trim();
      return `${isFirstElement(node) ? '| ' : ' '}${cell} |`;
    },
  });
  service.addRule('tableRow', {
    filter: 'tr',
    replacement: (content, node) => {
      const row = `\n${content}`;
      if (!isFirstRowOfTable(node)) return row;
      const cells = childElements(node).filter((child) => ['TH', 'TD'].includes(child.nodeName)).length;
      return `${row}\n|${' --- |'.repeat(Math.max(cells, 1))}`;
    },
  });
  service.addRule('tableSection', {
    filter: ['thead', 'tbody', 'tfoot'],
    replacement: (content) => content,
  });
  service.addRule('table', {
    filter: 'table',
    replacement: (content) => `\n\n${content.replace(/\n+/g, '\n').trim()}\n\n`,
  });
  return service;
}

function childElements(node: TurndownNode): TurndownNode[] {
  return Array.from(node.childNodes as ArrayLike<TurndownNode>).filter((child) => child.nodeType === 1);
}

function isFirstElement(node: TurndownNode): boolean {
  const parent = node.parentNode as TurndownNode | null;
  return !parent || childElements(parent)[0] === node;
}

function isFirstRowOfTable(row: TurndownNode): boolean {
  let table = row.parentNode as TurndownNode | null;
  while (table && table.nodeName !== 'TABLE') table = table.parentNode as TurndownNode | null;
  if (!table) return false;
  return firstRow(table) === row;
}

function firstRow(node: TurndownNode): TurndownNode | null {
  for (const child of childElements(node)) {
    if (child.nodeName === 'TR') return child;
    if (['THEAD', 'TBODY', 'TFOOT'].includes(child.nodeName)) {
      const row = firstRow(child);
      if (row) return row;
    }
  }
  return null;
}
