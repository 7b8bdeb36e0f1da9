import crypto from 'node:crypto';
import { htmlToMarkdown } from '../../src/solver/html/markdown';
import { parseCanaryHosts } from '../../src/config';
import { drawCanaryHost, isCanaryHost } from '../../src/trust/canary-hosts';
import { canaryPage, canaryPageText, PAGE_TEMPLATES } from '../../src/trust/canary-pages';
import { SIMILARITY_MEASURES, textSimilarity } from '../../src/trust/similarity';
import { pageText } from '../support/cheats';

// Seeds are fixed so the figures below are the same on every run.
const seedOf = (i: number) => crypto.createHash('sha256').update(`canary-page-${i}`).digest('hex').slice(0, 32);
const { threshold } = SIMILARITY_MEASURES.proxy_fetch;

describe('canary pages', () => {
  const pages = Array.from({ length: 300 }, (_, i) => {
    const host = i % 3 === 0 ? 'notes.localhost' : `${['quiet-harbor', 'golden-kettle-12', 'slow-meadow'][i % 3]}.pages.example`;
    const s = seedOf(i);
    return { host, seed: s, ...canaryPage(s, 'proxy_fetch', host) };
  });

  test('are drawn from several templates at realistic, varied paths with no canary mark', () => {
    expect(new Set(pages.map((page) => page.template))).toEqual(new Set(PAGE_TEMPLATES));
    // Two seeds may draw one path (the canary's creator draws again when its host has it): rarely.
    expect(new Set(pages.map((page) => page.path)).size).toBeGreaterThanOrEqual(pages.length * 0.98);
    for (const page of pages) {
      expect(page.path).toMatch(/^\/[a-z0-9/._-]+$/);
      expect(`${page.path} ${page.html}`.toLowerCase()).not.toMatch(/canary|token|reference [0-9a-f]/);
    }
    // First path segments of several kinds (/blog, /products, /docs, /category, ...).
    expect(new Set(pages.map((page) => page.path.split('/')[1])).size).toBeGreaterThan(12);
    // Page texts differ in length and wording: no fixed template text.
    const lengths = pages.map((page) => canaryPageText(page.html).length);
    expect(Math.max(...lengths) / Math.min(...lengths)).toBeGreaterThan(2);
  });

  test('are the same page again from the same seed and host, and a site keeps its look across pages', () => {
    const [a] = pages;
    expect(canaryPage(a!.seed, 'proxy_fetch', a!.host)).toEqual({ template: a!.template, path: a!.path, html: a!.html });
    const siteMarkup = (html: string) => html.match(/<header[\s\S]*?<\/header>/)![0];
    const same = pages.filter((page) => page.host === a!.host);
    expect(new Set(same.map((page) => siteMarkup(page.html))).size).toBe(1);
    expect(new Set(pages.map((page) => siteMarkup(page.html))).size).toBeGreaterThan(1);
  });

  test("pass the reference solver's markdown and an honest fetch's text, and fail another page's text", () => {
    // The solver's markdown takes some 10–20 ms a page: a third of the pages covers every template many times.
    for (const page of pages.slice(0, pages.length / 3)) {
      const expected = canaryPageText(page.html);
      const markdown = htmlToMarkdown(page.html, `http://${page.host}${page.path}`).markdown;
      expect(textSimilarity(expected, markdown)).toBeGreaterThan(Math.max(threshold, 0.6));
      expect(textSimilarity(expected, pageText(page.html))).toBeGreaterThan(0.6);
    }
    for (let i = 1; i < pages.length; i++) {
      expect(textSimilarity(canaryPageText(pages[i]!.html), canaryPageText(pages[i - 1]!.html))).toBeLessThan(threshold / 2);
    }
  });

  test("a screenshot's page is at the same kind of path and shows the seed's grid", () => {
    const s = seedOf(pages.length);
    const page = canaryPage(s, 'screenshot', 'notes.localhost');
    expect(page.path).toBe(canaryPage(s, 'proxy_fetch', 'notes.localhost').path);
    expect(page.html).toContain('grid-template-columns');
  });
});

describe('canary hosts', () => {
  test('CANARY_HOSTS names hosts and wildcards with an optional scheme and port', () => {
    expect(parseCanaryHosts('*.pages.example, http://shop.localhost:8080,news.example.org')).toEqual([
      { scheme: 'https', host: '*.pages.example', port: null },
      { scheme: 'http', host: 'shop.localhost', port: 8080 },
      { scheme: 'https', host: 'news.example.org', port: null },
    ]);
    expect(parseCanaryHosts('')).toEqual([]);
    for (const bad of ['localhost', '*.example', 'ftp://a.example', 'a.example/path', 'a.example:99999', '*.*.example']) {
      expect(typeof parseCanaryHosts(bad)).toBe('string');
    }
  });

  test('a request is a canary page by its host name only: names under a wildcard, or the name itself', () => {
    const hosts = [{ host: '*.pages.example' }, { host: 'shop.example' }];
    expect(isCanaryHost(hosts, 'quiet-harbor.pages.example')).toBe(true);
    expect(isCanaryHost(hosts, 'Shop.Example')).toBe(true);
    expect(isCanaryHost(hosts, 'pages.example')).toBe(false);
    expect(isCanaryHost(hosts, 'api.example')).toBe(false);
    expect(isCanaryHost([{ host: '*.localhost' }], 'localhost')).toBe(false);
    expect(isCanaryHost([{ host: '*.localhost' }], '127.0.0.1')).toBe(false);
  });

  test('a wildcard draws fresh site names and reuses a host the solver was sent before about half of the time', () => {
    const origin = { scheme: 'https' as const, host: '*.pages.example', port: null };
    const fresh = Array.from({ length: 50 }, () => drawCanaryHost(origin, []));
    for (const host of fresh) expect(host).toMatch(/^[a-z]+-[a-z]+(-\d+)?\.pages\.example$/);
    expect(new Set(fresh).size).toBeGreaterThan(40);
    const earlier = ['old-site.pages.example', 'elsewhere.example'];
    const reused = Array.from({ length: 400 }, () => drawCanaryHost(origin, earlier)).filter((host) => host === 'old-site.pages.example').length;
    expect(reused).toBeGreaterThan(140);
    expect(reused).toBeLessThan(260);
    expect(drawCanaryHost({ scheme: 'https', host: 'shop.example', port: null }, earlier)).toBe('shop.example');
  });
});
