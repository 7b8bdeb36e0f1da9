import http from 'node:http';
import os from 'node:os';
import type { AddressInfo } from 'node:net';
import { BrowserPool } from '../src/solver/browser/browser-pool';
import { createPageSnapshotHandler } from '../src/solver/handlers/page-snapshot';
import { createProxyFetchHandler } from '../src/solver/handlers/proxy-fetch';
import { createScreenshotHandler } from '../src/solver/handlers/screenshot';
import type { TaskHandler } from '../src/solver/handlers/types';

/**
 * Throughput of the solver's own work, without the marketplace: proxy_fetch (HTTP + Readability +
 * markdown), rendered pages (page_snapshot's html mode, what a Firecrawl scrape of a page that needs a
 * browser runs) and screenshots (warm Chromium, one context per task) against pages served on 127.0.0.1.
 * Each run stops after a time budget or a request budget, whichever comes first.
 *
 *   npm run bench:solver
 */

export const FETCH_CONCURRENCY = [1, 4, 16];
const SCREENSHOT_CONCURRENCY = [1, 2, 4];
export const FETCH_BUDGET = { seconds: 3, requests: 3000 };
const SCREENSHOT_BUDGET = { seconds: 4, requests: 80 };
const CHROMIUM_PATH = '/usr/bin/chromium';

export type BenchRow = { task: string; concurrency: number; requests: number; errors: number; seconds: number; pagesPerSecond: number };

export type SolverBenchmark = {
  environment: { cpus: number; node: string; platform: string };
  fetch: BenchRow[];
  rendered: BenchRow[];
  screenshot: BenchRow[];
};

/** A page of prose with 40 relative links; `linkOf` says where each points (the crawl benchmark links them to other articles). */
export function articlePage(index: number, linkOf: (link: number) => string = (link) => `/article/${index}/link/${link}`): string {
  const paragraphs = Array.from(
    { length: 40 },
    (_, i) => `<p>Paragraph ${i} of article ${index}, with <a href="${linkOf(i)}">a relative link</a> and enough words to look like prose a reader would want to keep.</p>`,
  ).join('\n');
  return `<!DOCTYPE html><html><head><meta charset="utf-8"><title>Benchmark article ${index}</title>
<style>body{font-family:sans-serif;max-width:48rem;margin:2rem auto}</style></head>
<body><nav><a href="/">Home</a> <a href="/about">About</a></nav><main><article><h1>Benchmark article ${index}</h1>
${paragraphs}
<table><tr><th>Key</th><th>Value</th></tr><tr><td>index</td><td>${index}</td></tr></table>
</article></main><footer>Footer</footer></body></html>`;
}

/** Serves `respond` (by default, article N at any path holding N) on 127.0.0.1. */
export async function startPageServer(respond?: http.RequestListener): Promise<{ baseUrl: string; close(): Promise<void> }> {
  const server = http.createServer(
    respond ??
      ((req, res) => {
        const index = Number((req.url ?? '').match(/\d+/)?.[0] ?? 0);
        const body = articlePage(index);
        res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-length': Buffer.byteLength(body) });
        res.end(body);
      }),
  );
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

export async function measure(
  task: string,
  handler: TaskHandler,
  payloadFor: (n: number) => Record<string, unknown>,
  concurrency: number,
  budget: { seconds: number; requests: number },
): Promise<BenchRow> {
  const started = process.hrtime.bigint();
  const deadline = Date.now() + budget.seconds * 1000;
  let issued = 0;
  let completed = 0;
  let errors = 0;
  const worker = async () => {
    while (Date.now() < deadline && issued < budget.requests) {
      const n = issued++;
      try {
        await handler(payloadFor(n), { signal: new AbortController().signal });
        completed++;
      } catch {
        errors++;
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return { task, concurrency, requests: completed, errors, seconds: round(seconds, 2), pagesPerSecond: round(completed / seconds, 1) };
}

export const round = (value: number, digits: number) => Math.round(value * 10 ** digits) / 10 ** digits;

export function formatTable(rows: BenchRow[]): string {
  const header = ['task', 'concurrency', 'pages', 'errors', 'seconds', 'pages/s'];
  const lines = rows.map((row) => [row.task, row.concurrency, row.requests, row.errors, row.seconds, row.pagesPerSecond].map(String));
  const widths = header.map((title, column) => Math.max(title.length, ...lines.map((line) => line[column]!.length)));
  const format = (cells: string[]) => cells.map((cell, column) => (column === 0 ? cell.padEnd(widths[column]!) : cell.padStart(widths[column]!))).join('  ');
  return [format(header), widths.map((width) => '-'.repeat(width)).join('  '), ...lines.map(format)].join('\n');
}

export async function runSolverBenchmark(): Promise<SolverBenchmark> {
  const policy = { allowPrivateNetworks: true };
  const site = await startPageServer();
  const pool = new BrowserPool({ executablePath: CHROMIUM_PATH, pages: Math.max(...SCREENSHOT_CONCURRENCY), policy, timeoutMs: 30_000 });
  try {
    const fetchPage = createProxyFetchHandler({ policy, maxBytes: 5 * 1024 * 1024, timeoutMs: 30_000 });
    const fetchPayload = (n: number) => ({ url: `${site.baseUrl}/article/${n % 50}` });
    await fetchPage(fetchPayload(0), { signal: new AbortController().signal });
    const fetchRows: BenchRow[] = [];
    for (const concurrency of FETCH_CONCURRENCY) fetchRows.push(await measure('proxy_fetch', fetchPage, fetchPayload, concurrency, FETCH_BUDGET));

    // The pool has room for the highest concurrency; each run's worker count is what limits the pages in use.
    await pool.start();
    const render = createPageSnapshotHandler({ pool, policy, timeoutMs: 30_000, maxBytes: 5 * 1024 * 1024 });
    const renderPayload = (n: number) => ({ url: `${site.baseUrl}/article/${n % 50}`, mode: 'html' });
    await render(renderPayload(0), { signal: new AbortController().signal });
    const renderedRows: BenchRow[] = [];
    for (const concurrency of SCREENSHOT_CONCURRENCY) renderedRows.push(await measure('rendered (page_snapshot html)', render, renderPayload, concurrency, SCREENSHOT_BUDGET));

    const screenshot = createScreenshotHandler({ pool, policy, timeoutMs: 30_000 });
    const screenshotPayload = (n: number) => ({ url: `${site.baseUrl}/article/${n % 50}`, viewport: { width: 1280, height: 800 } });
    await screenshot(screenshotPayload(0), { signal: new AbortController().signal });
    const screenshotRows: BenchRow[] = [];
    for (const concurrency of SCREENSHOT_CONCURRENCY) {
      screenshotRows.push(await measure('screenshot', screenshot, screenshotPayload, concurrency, SCREENSHOT_BUDGET));
    }
    return {
      environment: { cpus: os.cpus().length, node: process.version, platform: `${os.platform()} ${os.arch()}` },
      fetch: fetchRows,
      rendered: renderedRows,
      screenshot: screenshotRows,
    };
  } finally {
    await pool.close();
    await site.close();
  }
}

if (require.main === module) {
  runSolverBenchmark().then(
    (result) => {
      process.stdout.write(`Solver benchmark (${result.environment.cpus} CPUs, Node ${result.environment.node})\n\n`);
      process.stdout.write(`${formatTable([...result.fetch, ...result.rendered, ...result.screenshot])}\n`);
    },
    (error) => {
      process.stderr.write(`${error instanceof Error ? error.stack : String(error)}\n`);
      process.exit(1);
    },
  );
}
