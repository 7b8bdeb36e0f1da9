import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A generated website for crawl tests, served on 127.0.0.1: `pages` linked pages under /docs/ (each
 * links onwards in a tree, back home, to a fragment, to a query-string variant, into /private/ and out
 * to another host), a robots.txt that forbids /private/, a sitemap naming a page no link reaches, and a
 * slow section (/slow/) for cancels. It counts every request, so a test can prove each page was fetched once.
 */
export interface CrawlSite {
  baseUrl: string;
  hits: Map<string, number>;
  /** The URLs a full crawl from / reaches (robots.txt obeyed, no query variants). */
  reachable: string[];
  close(): Promise<void>;
}

const page = (title: string, links: string[]) =>
  `<!doctype html><html lang="en"><head><title>${title}</title></head><body><nav><a href="/">Home</a></nav><main><h1>${title}</h1><p>Text of ${title}.</p>${links
    .map((href) => `<a href="${href}">${href}</a>`)
    .join(' ')}</main></body></html>`;

export async function startCrawlSite(pages: number, options: { slowMs?: number; pageDelayMs?: number } = {}): Promise<CrawlSite> {
  const hits = new Map<string, number>();
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://site');
    const key = `${url.pathname}${url.search}`;
    hits.set(key, (hits.get(key) ?? 0) + 1);
    const html = (body: string) => {
      setTimeout(() => {
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
        res.end(body);
      }, options.pageDelayMs ?? 0);
    };
    if (url.pathname === '/robots.txt') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      return void res.end(`User-agent: *\nDisallow: /private/\nAllow: /\n\nSitemap: ${base}/sitemap.xml\n`);
    }
    if (url.pathname === '/sitemap.xml') {
      res.writeHead(200, { 'content-type': 'application/xml' });
      const locs = ['/', '/orphan.html', '/docs/page-0.html', '/private/listed.html'].map((path) => `<url><loc>${base}${path}</loc></url>`).join('');
      return void res.end(`<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">${locs}</urlset>`);
    }
    if (url.pathname === '/') return html(page('Home', ['/docs/page-0.html', '/docs/page-0.html#top', '/private/secret.html', 'https://example.org/elsewhere']));
    if (url.pathname === '/orphan.html') return html(page('Orphan', ['/']));
    const doc = /^\/docs\/page-(\d+)\.html$/.exec(url.pathname);
    if (doc) {
      const i = Number(doc[1]);
      const next = [i + 1, 2 * i + 1, 2 * i + 2].filter((n) => n < pages).map((n) => `/docs/page-${n}.html`);
      return html(page(`Page ${i}`, [...next, ...(i % 2 ? [`/docs/page-${i}.html?ref=self`] : []), `/private/p-${i}.html`, '/', 'mailto:someone@example.org']));
    }
    const slow = /^\/slow\/(\d+)\.html$/.exec(url.pathname);
    if (slow) {
      const i = Number(slow[1]);
      return void setTimeout(() => html(page(`Slow ${i}`, [`/slow/${i + 1}.html`, `/slow/${i + 2}.html`])), options.slowMs ?? 1500);
    }
    if (url.pathname.startsWith('/private/')) return html(page('Private', []));
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('not found');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const reachable = [`${base}/`, `${base}/orphan.html`, ...Array.from({ length: pages }, (_, i) => `${base}/docs/page-${i}.html`)];
  for (let i = 1; i < pages; i += 2) reachable.push(`${base}/docs/page-${i}.html?ref=self`);
  return {
    baseUrl: base,
    hits,
    reachable,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
