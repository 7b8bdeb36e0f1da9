import { parseDocument } from '../solver/html/markdown';

/**
 * When a fetched page is rendered in a browser before its content is taken: it has scripts, and what a
 * fetch sees of it is an application shell. Firecrawl renders every page; fetching first keeps the
 * common static page to one cheap task.
 */

// Below this much visible text, a page that loads a script bundle is taken as filled by it.
export const RENDER_TEXT_CHARS = 200;
// The mount points of single-page application frameworks (React, Vue, Next, Nuxt, Gatsby, Angular, Svelte).
const APP_ROOTS = '#root, #app, #__next, #__nuxt, #___gatsby, #svelte, [data-reactroot], [ng-app], app-root';
const NOSCRIPT_HINT =
  /\b(enable|requires?|turn on|needs?)\b[^.]{0,40}\bjavascript\b|\bjavascript\b[^.]{0,40}\b(required|disabled|needed)\b/i;

/** Why the fetched page needs rendering, or null when its HTML is its content. */
export function renderReason(rawHtml: string): string | null {
  const { document } = parseDocument(rawHtml);
  if (document.querySelectorAll('script').length === 0) return null;
  for (const root of document.querySelectorAll(APP_ROOTS)) {
    if (!(root.textContent ?? '').trim()) return 'an empty application root';
  }
  for (const hint of document.querySelectorAll('noscript')) {
    if (NOSCRIPT_HINT.test(hint.textContent ?? '')) return 'a <noscript> asking for JavaScript';
  }
  // An inline snippet (analytics, a theme switch) rarely writes content; an application bundle does.
  const bundled = document.querySelectorAll('script[src]').length > 0;
  for (const element of document.querySelectorAll('script, style, template, noscript')) element.remove();
  const text = (document.body?.textContent ?? '').replace(/\s+/g, ' ').trim();
  return bundled && text.length < RENDER_TEXT_CHARS ? 'little text and a script bundle' : null;
}
