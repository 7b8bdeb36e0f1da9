import fs from 'node:fs';
import os from 'node:os';
import { loadConfig } from '../src/config';
import { auditLedger } from '../src/db/ledger';
import { createLogger } from '../src/logger';
import { startLocalSolver } from '../src/runtime/local-solver';
import { createProxyFetchHandler } from '../src/solver/handlers/proxy-fetch';
import { sql } from 'slonik';
import { z } from 'zod';
import { cpuPerCall, cpuSnapshot } from './lib/cpu';
import { ADMIN_KEY, measuredRunEnv, runMain, runStops, startStack } from './lib/processes';
import { call, register } from './lib/sim';
import { articlePage, FETCH_BUDGET, FETCH_CONCURRENCY, measure, round, startPageServer } from './solver';

/**
 * `npm run bench:crawl`: a crawl of a generated 1,000-page site on 127.0.0.1 through the whole service
 * (API and worker as their own processes, the bundled solver in this one), against the bundled solver's
 * own proxy_fetch speed as `npm run bench:solver` measures it (the page fetched and made markdown), on
 * the same pages, at the same concurrency, in the same run. The goal (docs/performance.md) is a ratio
 * of at least 0.7 with the ledger exact.
 */

const PAGES = Number(process.env.BENCH_CRAWL_PAGES ?? 1000);
// The crawl's maxConcurrency and the bundled solver's slots: the highest concurrency bench:solver measures.
const CONCURRENCY = Number(process.env.BENCH_CRAWL_CONCURRENCY ?? 16);
const GOAL = 0.7;

/** The site: PAGES articles, each linking to 40 others (so the crawl discovers them as it goes), and a robots.txt. */
async function startSite() {
  const hits = new Map<string, number>();
  const server = await startPageServer((req, res) => {
    const url = req.url ?? '/';
    hits.set(url, (hits.get(url) ?? 0) + 1);
    if (url === '/robots.txt') return void res.writeHead(200, { 'content-type': 'text/plain' }).end('User-agent: *\nAllow: /\n');
    const index = Number(url.match(/^\/article\/(\d+)$/)?.[1] ?? -1);
    if (index < 0 || index >= PAGES) return void res.writeHead(404).end();
    const body = articlePage(index, (link) => `/article/${(index * 40 + link + 1) % PAGES}`);
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-length': Buffer.byteLength(body) });
    res.end(body);
  });
  return { ...server, hits };
}

async function main() {
  const log = (line: string) => process.stdout.write(`${line}\n`);
  const run = measuredRunEnv('crawl');
  const dataDir = run.dataDir;
  const env = { ...run.env, SOLVER_MAX_CONCURRENT: String(CONCURRENCY) };
  const config = loadConfig({ ...process.env, ...env });
  const logger = createLogger('warn', 'bench');
  const { stops, stopAll } = runStops(logger, dataDir);
  try {
    const site = await startSite();
    stops.push(site.close);
    log(`# crawl benchmark on ${os.cpus().length} cores (load average ${os.loadavg().map((n) => n.toFixed(1)).join(' ')}), node ${process.version}: ${PAGES} pages, concurrency ${CONCURRENCY}`);

    // The solver's own speed, before the stack takes the CPU: bench:solver's proxy_fetch measurement (its
    // handler, payload and budget, the page fetched and made markdown; its lower concurrencies first, as
    // they warm it there) on this site's pages, the figure at the crawl's concurrency.
    const fetchPage = createProxyFetchHandler({ policy: { allowPrivateNetworks: true }, maxBytes: 5 * 1024 * 1024, timeoutMs: 30_000 });
    const payload = (n: number) => ({ url: `${site.baseUrl}/article/${n % PAGES}` });
    await fetchPage(payload(0), { signal: new AbortController().signal });
    for (const concurrency of FETCH_CONCURRENCY.filter((n) => n < CONCURRENCY)) await measure('proxy_fetch', fetchPage, payload, concurrency, FETCH_BUDGET);
    const ownBefore = cpuSnapshot({});
    const own = await measure('proxy_fetch', fetchPage, payload, CONCURRENCY, FETCH_BUDGET);
    const ownCpu = cpuPerCall(ownBefore, cpuSnapshot({}), own.requests);
    log(`solver's own proxy_fetch (bench:solver's measurement at concurrency ${CONCURRENCY}): ${own.requests} pages in ${own.seconds} s, ${own.pagesPerSecond} pages/s; CPU per page (this process and the site) ${JSON.stringify(ownCpu)} ms`);

    const { base, worker, api, db } = await startStack(config, env, logger, stops);
    const solver = await startLocalSolver({ config, apiUrl: base, logger });
    stops.push(() => solver.stop());

    const client = await register(base);
    await call(base, 'POST', '/v1/admin/deposit', { account_id: client.account_id, amount_points: '100000' }, { 'X-Admin-API-Key': ADMIN_KEY });
    const auth = { Authorization: `Bearer ${client.api_key}` };
    const hitsBefore = new Map(site.hits);
    const cpuBefore = cpuSnapshot({ api: api.child.pid, worker: worker.child.pid });
    const started = Date.now();
    const job = (await call(base, 'POST', '/v2/crawl', { url: `${site.baseUrl}/article/0`, limit: PAGES, maxConcurrency: CONCURRENCY, sitemap: 'skip' }, auth)) as { id: string };
    let status: { status: string; completed: number; total: number; pointsCharged: string; pointsHeld: string } = { status: 'scraping', completed: 0, total: 0, pointsCharged: '0', pointsHeld: '0' };
    while (status.status === 'scraping') {
      await new Promise((resolve) => setTimeout(resolve, 250));
      status = (await call(base, 'GET', `/v2/crawl/${job.id}?limit=1`, undefined, auth)) as typeof status;
    }
    const seconds = (Date.now() - started) / 1000;
    const cpu = cpuPerCall(cpuBefore, cpuSnapshot({ api: api.child.pid, worker: worker.child.pid }), status.completed);
    const crawlRate = round(status.completed / seconds, 1);
    const fetchedTwice = [...site.hits.entries()].filter(([url, n]) => url.startsWith('/article/') && n - (hitsBefore.get(url) ?? 0) > 1).length;
    // Where a page's time goes: its task's life (created to completed) against the crawl's time per page in flight.
    const taskMs = await db.oneFirst(sql.type(z.object({ ms: z.number() }))`
      SELECT round(avg(extract(epoch FROM completed_at - created_at) * 1000))::int AS ms FROM tasks WHERE account_id = ${client.account_id} AND status = 'completed'`);
    // A page's task runs a workflow only when it leaves the page path (docs/crawl.md, "How a job runs").
    const withWorkflow = await db.oneFirst(sql.type(z.object({ n: z.number() }))`
      SELECT count(*)::int AS n FROM tasks WHERE account_id = ${client.account_id} AND workflow_started_at IS NOT NULL`);
    const balance = (await call(base, 'GET', '/v1/balance', undefined, auth)) as { available_points: string };
    const ledger = await auditLedger(db);
    const spent = 100000 - Number(balance.available_points);
    log(`crawl: ${status.status}, ${status.completed}/${status.total} pages in ${round(seconds, 1)} s, ${crawlRate} pages/s`);
    log(`CPU per page (ms): ${JSON.stringify(cpu)} (bench: this process, with the bundled solver and the site); a page's task lived ${taskMs} ms on average, a page took ${round((seconds * 1000 * CONCURRENCY) / Math.max(1, status.completed), 0)} ms of a slot; ${withWorkflow} pages' tasks ran a workflow`);
    log(`ratio to the solver's own proxy_fetch: ${round(crawlRate / own.pagesPerSecond, 2)} (goal ≥ ${GOAL})`);
    log(`ledger: ${JSON.stringify(ledger)}; points charged ${status.pointsCharged}, held ${status.pointsHeld}, balance moved ${spent}; pages fetched more than once by the crawl: ${fetchedTwice}`);
    fs.writeFileSync(
      'bench-results-crawl.json',
      JSON.stringify({ pages: PAGES, concurrency: CONCURRENCY, cpus: os.cpus().length, loadavg: os.loadavg(), solverPagesPerSecond: own.pagesPerSecond, crawl: { ...status, seconds: round(seconds, 1), pagesPerSecond: crawlRate, cpuPerPageMs: cpu, taskMs }, solverCpuPerPageMs: ownCpu, ratio: round(crawlRate / own.pagesPerSecond, 2), ledger, spent, tasksWithWorkflow: withWorkflow }, null, 2),
    );
  } finally {
    await stopAll();
  }
}

runMain(main);
