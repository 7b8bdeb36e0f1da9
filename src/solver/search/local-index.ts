import fs from 'node:fs/promises';
import path from 'node:path';
import MiniSearch from 'minisearch';
import { documentTitle, parseDocument } from '../html/markdown';
import { throwIfAborted } from '../abort';
import type { SearchBackend, SearchHit } from './backend';

/**
 * A full-text index over a folder of .html, .md and .txt pages, built once in memory. A page's URL
 * comes from its canonical link (HTML) or a `url:` front-matter line (markdown); otherwise it is
 * `local-index:<relative path>`.
 */

const INDEXED_EXTENSIONS = new Set(['.html', '.htm', '.md', '.markdown', '.txt']);
const SNIPPET_BEFORE = 60;
const SNIPPET_LENGTH = 240;

export type IndexedPage = { id: number; title: string; url: string; text: string };

export function createLocalSearchBackend(
  indexDir: string,
): SearchBackend & { load(): Promise<number>; pages(): Promise<IndexedPage[]> } {
  let loading: Promise<{ index: MiniSearch<IndexedPage>; pages: Map<number, IndexedPage> }> | undefined;
  const load = () => {
    loading ??= buildIndex(indexDir);
    return loading;
  };
  return {
    name: 'local',
    load: async () => (await load()).pages.size,
    pages: async () => [...(await load()).pages.values()],
    warm: () => load(),
    async search(query, count, signal) {
      const { index, pages } = await load();
      throwIfAborted(signal);
      const matches = index.search(query, { boost: { title: 3 }, prefix: true, fuzzy: 0.2, combineWith: 'OR' });
      return matches.slice(0, count).map((match): SearchHit => {
        const page = pages.get(match.id as number)!;
        return { title: page.title, url: page.url, snippet: snippet(page.text, match.terms) };
      });
    },
  };
}

async function buildIndex(indexDir: string) {
  const files = await listFiles(indexDir);
  const pages = new Map<number, IndexedPage>();
  for (const [id, file] of files.entries()) {
    const raw = await fs.readFile(file, 'utf8');
    const relative = path.relative(indexDir, file).split(path.sep).join('/');
    pages.set(id, { id, ...readPage(raw, path.extname(file).toLowerCase(), relative) });
  }
  const index = new MiniSearch<IndexedPage>({ fields: ['title', 'text'], storeFields: [] });
  index.addAll([...pages.values()]);
  return { index, pages };
}

async function listFiles(dir: string): Promise<string[]> {
  const entries = await fs.readdir(dir, { withFileTypes: true });
  const nested = await Promise.all(
    entries
      .filter((entry) => !entry.name.startsWith('.'))
      .sort((a, b) => a.name.localeCompare(b.name))
      .map(async (entry) => {
        const full = path.join(dir, entry.name);
        if (entry.isDirectory()) return listFiles(full);
        return entry.isFile() && INDEXED_EXTENSIONS.has(path.extname(entry.name).toLowerCase()) ? [full] : [];
      }),
  );
  return nested.flat();
}

function readPage(raw: string, extension: string, relative: string): Omit<IndexedPage, 'id'> {
  const fallbackUrl = `local-index:${relative}`;
  if (extension === '.html' || extension === '.htm') {
    const { document } = parseDocument(raw);
    const canonical = document.querySelector('link[rel="canonical"]')?.getAttribute('href');
    for (const element of document.querySelectorAll('script, style, noscript, template')) element.remove();
    const text = collapse(document.body?.textContent ?? '');
    return { title: documentTitle(document) ?? relative, url: canonical || fallbackUrl, text };
  }
  if (extension === '.md' || extension === '.markdown') {
    const { fields, body } = frontMatter(raw);
    const heading = body.match(/^#{1,6}\s+(.+)$/m);
    const title = fields.title ?? heading?.[1]?.trim() ?? relative;
    // The title heading would open every snippet; the title is shown anyway.
    const text = heading && heading[1]!.trim() === title ? body.replace(heading[0], '') : body;
    return { title, url: fields.url ?? fallbackUrl, text: collapse(markdownText(text)) };
  }
  const firstLine = raw
    .split('\n')
    .find((line) => line.trim() !== '')
    ?.trim();
  return { title: firstLine ?? relative, url: fallbackUrl, text: collapse(raw) };
}

function frontMatter(raw: string): { fields: Record<string, string>; body: string } {
  const match = raw.match(/^---\r?\n([\s\S]*?)\r?\n---\r?\n?/);
  if (!match) return { fields: {}, body: raw };
  const fields: Record<string, string> = {};
  for (const line of match[1]!.split(/\r?\n/)) {
    const pair = line.match(/^(\w+):\s*(.*)$/);
    if (pair) fields[pair[1]!] = pair[2]!.trim().replace(/^["']|["']$/g, '');
  }
  return { fields, body: raw.slice(match[0].length) };
}

/** Markdown syntax is noise in snippets: keep link texts, drop markers. */
function markdownText(markdown: string): string {
  return markdown
    .replace(/```[^\n]*\n/g, '')
    .replace(/!\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/^#{1,6}\s+/gm, '')
    .replace(/^\s*[-*+]\s+/gm, '')
    .replace(/^\|?[\s:|-]+\|[\s:|-]*$/gm, '')
    .replace(/^\s*>\s?/gm, '')
    .replace(/[*`|]/g, ' ');
}

const collapse = (text: string) => text.replace(/\s+/g, ' ').trim();

/** A window of the page text around the first matched term. */
export function snippet(text: string, terms: string[]): string {
  const lower = text.toLowerCase();
  const positions = terms.map((term) => lower.indexOf(term.toLowerCase())).filter((position) => position >= 0);
  const hit = positions.length > 0 ? Math.min(...positions) : 0;
  let start = Math.max(0, hit - SNIPPET_BEFORE);
  if (start > 0) {
    const space = text.indexOf(' ', start);
    start = space >= 0 && space < hit ? space + 1 : start;
  }
  let end = Math.min(text.length, start + SNIPPET_LENGTH);
  if (end < text.length) {
    const space = text.lastIndexOf(' ', end);
    end = space > hit ? space : end;
  }
  return `${start > 0 ? '…' : ''}${text.slice(start, end).trim()}${end < text.length ? '…' : ''}`;
}
