import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'slonik';
import { z } from 'zod';
import { createArtifactStore } from '../src/artifacts/store';
import { loadConfig } from '../src/config';
import { auditLedger } from '../src/db/ledger';
import { createLogger } from '../src/logger';
import { purgeExpired, type PurgeRun } from '../src/tasks/retention';
import { ADMIN_KEY, measuredRunEnv, runMain, runStops, startStack } from './lib/processes';
import { cpuPerCall, cpuSnapshot } from './lib/cpu';
import { call, FETCH_RESULT, keptSolver, markedPng, noisePng, register, request } from './lib/sim';
import { load, sleep, summarize, type LoadRun } from './lib/stats';

/**
 * `npm run bench:retention`: screenshot-sized results at steady state under a short retention. Clients
 * take RESULTS screenshots (simulated solvers answer each at once with a 116 KB PNG of its own bytes,
 * so no browser is the bottleneck) while the retention purge (`purgeExpired`, the function every worker's
 * sweep runs) removes results past WINDOW seconds. Reports how large PostgreSQL and the artifact store grow, what the purge
 * costs per row, and the web path's p99 (POST /v1/fetch) in alternating batches with the purge running
 * and without it, under the same screenshot load.
 */

const RESULTS = Number(process.env.BENCH_RETENTION_RESULTS ?? 10_000);
const WINDOW_SECONDS = Number(process.env.BENCH_RETENTION_WINDOW_SECONDS ?? 30);
// Callers enough that the stack's CPU (about 90 ms a task), not their round trips, sets the rate.
const SCREENSHOT_CONCURRENCY = Number(process.env.BENCH_RETENTION_CONCURRENCY ?? 16);
const PROBE_CONCURRENCY = 4;
const PROBES_PER_BATCH = 100;
// While on, the purge runs back to back with this pause: harsher than a worker's one run a minute.
const PURGE_PAUSE_MS = 1000;
// A full-page screenshot of a small page as measured in issue #42 (116 KB, which does not compress), or a
// real render given by BENCH_RETENTION_PNG; each task gets it with a chunk of its own (markedPng).
const PNG = process.env.BENCH_RETENTION_PNG ? fs.readFileSync(process.env.BENCH_RETENTION_PNG) : noisePng(116 * 1024);
const pngFor = markedPng(PNG);

const round = (value: number, digits = 1) => Math.round(value * 10 ** digits) / 10 ** digits;
const mb = (bytes: number) => round(bytes / 1024 / 1024, 1);

/** Bytes of the files under `dir`; a folder or file the purge removes while it is read counts as empty. */
function bytesUnder(dir: string): number {
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw error;
  }
  let total = 0;
  for (const entry of entries) {
    const at = path.join(dir, entry.name);
    // A file may be renamed or deleted between the listing and its stat (a put's partial file, the purge).
    if (entry.isDirectory()) total += bytesUnder(at);
    else if (entry.isFile()) total += fs.statSync(at, { throwIfNoEntry: false })?.size ?? 0;
  }
  return total;
}

async function main() {
  const log = (line: string) => process.stdout.write(`${line}\n`);
  const measured = measuredRunEnv('retention');
  const { dataDir } = measured;
  // Nor a newcomer's verification runs, which would take every other screenshot twice.
  const env = { ...measured.env, VERIFICATION_START_FRACTION: '0' };
  // The services keep the default window, so the worker's own sweep removes nothing: this process runs the purge, timed and switched on and off.
  const config = loadConfig({ ...process.env, ...env });
  const artifacts = createArtifactStore(config);
  const artifactDir = path.join(dataDir, 'artifacts');
  const logger = createLogger('warn', 'bench');
  const { stops, stopAll } = runStops(logger, dataDir);
  try {
    log(`# retention benchmark on ${os.cpus().length} cores (load average ${os.loadavg().map((n) => n.toFixed(1)).join(' ')}), node ${process.version}: ${RESULTS} screenshots of ${round(PNG.length / 1024, 0)} KB, window ${WINDOW_SECONDS} s`);
    const { base, db, api, worker } = await startStack(config, env, logger, stops);
    const solvers: Array<Awaited<ReturnType<typeof keptSolver>>> = [];
    stops.push(async () => {
      for (const solver of solvers) solver.close();
    });

    const client = await register(base);
    await call(base, 'POST', '/v1/admin/deposit', { account_id: client.account_id, amount_points: '100000000' }, { 'X-Admin-API-Key': ADMIN_KEY });
    const capability = { tier: 'standard', billing_type: 'per_request', fulfillment_path: 'http', provider_name: 'bench', model_name: 'instant', marginal_cost: 0, min_price_points: 1, max_concurrent: 64 };
    let shot = 0;
    for (let i = 0; i < 2; i++) {
      const account = await register(base);
      await call(base, 'POST', '/v1/solver/capabilities', [{ ...capability, task_type: 'screenshot' }, { ...capability, task_type: 'proxy_fetch' }], account.auth);
      solvers.push(
        await keptSolver(base, account, (frame, solver) => {
          solver.send({ type: 'accept', attempt_id: frame.attempt_id });
          const result = frame.task_type === 'screenshot' ? { mime_type: 'image/png', image_base64: pngFor(shot++).toString('base64'), width: 1280, height: 2400 } : FETCH_RESULT(String(frame.payload.url));
          solver.send({ type: 'result', attempt_id: frame.attempt_id, result });
        }),
      );
    }

    const sizes = async () => {
      const row = await db.one(sql.type(z.object({ database: z.coerce.number(), tasks: z.coerce.number(), kept: z.number(), all: z.number() }))`
        SELECT pg_database_size(current_database()) AS database, pg_total_relation_size('tasks') AS tasks,
               (count(*) FILTER (WHERE result IS NOT NULL AND task_type = 'screenshot'))::int AS kept, (count(*) FILTER (WHERE task_type = 'screenshot'))::int AS all
        FROM tasks`);
      return { ...row, artifacts: fs.existsSync(artifactDir) ? bytesUnder(artifactDir) : 0 };
    };
    const peak = { database: 0, tasks: 0, kept: 0, artifacts: 0 };
    const samples: Array<Awaited<ReturnType<typeof sizes>> & { at: number; load: number }> = [];
    const started = Date.now();

    // The purge, switched on and off between probe batches.
    const purged: PurgeRun[] = [];
    let purging = false;
    let purgeLoop: Promise<void> = Promise.resolve();
    const startPurge = () => {
      purging = true;
      purgeLoop = (async () => {
        while (purging) {
          purged.push(await purgeExpired({ db, artifacts }, WINDOW_SECONDS));
          await sleep(PURGE_PAUSE_MS);
        }
      })();
    };
    const stopPurge = async () => {
      purging = false;
      await purgeLoop;
    };
    // Before the pool closes (stops run in reverse), so a stopped run's purge does not use a closed pool.
    stops.push(stopPurge);

    // The screenshot load, in the background until RESULTS are taken.
    let done = false;
    // The answer (the PNG as base64) is not parsed: the benchmark's process shares the cores with the stack.
    const screenshot = async (i: number) => {
      const { status, text } = await request(base, 'POST', '/v1/screenshot', { url: `https://example.com/shot/${i}` }, client.auth);
      if (status !== 200) throw new Error(`POST /v1/screenshot → ${status} ${text.slice(0, 300)}`);
    };
    const cpuBefore = cpuSnapshot({ api: api.child.pid, worker: worker.child.pid });
    const screenshots = load(SCREENSHOT_CONCURRENCY, RESULTS, screenshot).finally(() => {
      done = true;
    });
    const sampler = (async () => {
      while (!done) {
        const now = await sizes();
        samples.push({ ...now, at: (Date.now() - started) / 1000, load: os.loadavg()[0]! });
        for (const key of Object.keys(peak) as Array<keyof typeof peak>) peak[key] = Math.max(peak[key], now[key]);
        await sleep(2000);
      }
      // Settled here, so a failed sample fails the run through its end (stopping the stack), not the process at once.
    })().catch((error: unknown) => error);

    // The first window fills the store; the probes start once results begin to expire.
    log(`stack up at ${base}; screenshots running, the probes start after the first window`);
    startPurge();
    await sleep(WINDOW_SECONDS * 1000);
    const probe = async () => void (await call(base, 'POST', '/v1/fetch', { url: 'https://example.com/probe' }, client.auth));
    const runs: Record<'purging' | 'quiet', LoadRun[]> = { purging: [], quiet: [] };
    for (let round = 0; !done; round++) {
      for (const name of round % 2 === 0 ? (['quiet', 'purging'] as const) : (['purging', 'quiet'] as const)) {
        if (name === 'purging') startPurge();
        else await stopPurge();
        runs[name].push(await load(PROBE_CONCURRENCY, PROBES_PER_BATCH, probe));
      }
    }
    const shots = await screenshots;
    const probes = runs.purging.concat(runs.quiet).reduce((sum, run) => sum + run.latencies.length + run.errors, 0);
    const cpu = cpuPerCall(cpuBefore, cpuSnapshot({ api: api.child.pid, worker: worker.child.pid }), shots.latencies.length + probes);
    const sampled = await sampler;
    if (sampled) throw sampled;
    // Work off what the last quiet batch left, then once more after the window, so the end is the steady state's.
    startPurge();
    await sleep((WINDOW_SECONDS + 2) * 1000);
    await stopPurge();
    const end = await sizes();

    const total = purged.reduce((sum, run) => ({ results: sum.results + run.results, artifacts: sum.artifacts + run.artifacts, seconds: sum.seconds + run.seconds }), { results: 0, artifacts: 0, seconds: 0 });
    const busy = purged.filter((run) => run.results > 0);
    const latencies = (name: 'purging' | 'quiet') => summarize(runs[name].flatMap((run) => run.latencies));
    const errors = (name: 'purging' | 'quiet') => runs[name].reduce((sum, run) => sum + run.errors, 0);
    const ledger = await auditLedger(db);
    const rate = round(shots.latencies.length / shots.seconds, 1);
    log(`screenshots: ${shots.latencies.length} in ${round(shots.seconds)} s (${rate}/s), ${shots.errors} errors${shots.firstError ? ` (${shots.firstError})` : ''}; screenshot p99 ${summarize(shots.latencies).p99} ms`);
    log(`kept results: at most ${peak.kept} (the window holds about ${Math.round(rate * WINDOW_SECONDS)} at that rate), ${end.kept} at the end of ${end.all}`);
    log(`PostgreSQL: database at most ${mb(peak.database)} MB (${mb(end.database)} MB at the end), tasks table at most ${mb(peak.tasks)} MB; artifact store at most ${mb(peak.artifacts)} MB (${mb(end.artifacts)} MB at the end; all ${end.all} kept would be ${mb(end.all * PNG.length)} MB)`);
    log(`purge: ${total.results} results and ${total.artifacts} artifacts in ${round(total.seconds, 2)} s over ${busy.length} runs that removed any: ${round((total.seconds * 1000) / Math.max(1, total.results), 2)} ms a row (artifact files included)`);
    log(`web p99 (POST /v1/fetch, ${PROBE_CONCURRENCY} callers, beside the screenshot load): purge running ${JSON.stringify(latencies('purging'))} (${errors('purging')} errors), not running ${JSON.stringify(latencies('quiet'))} (${errors('quiet')} errors)`);
    log(`CPU per task over the screenshot load (ms; the ${probes} probes counted as tasks too): ${JSON.stringify(cpu)} (bench: this process, with the clients and solvers)`);
    log(`ledger: ${JSON.stringify(ledger)}; solver reconnections: ${solvers.reduce((sum, solver) => sum + solver.reconnects(), 0)}`);
    const exact = Object.values(ledger).every((count) => count === 0);
    const msPerRow = round((total.seconds * 1000) / Math.max(1, total.results), 2);
    const [on, off] = [latencies('purging'), latencies('quiet')];
    const loads = [...samples.map((sample) => sample.load), os.loadavg()[0]!].sort((a, b) => a - b);
    // One line for docs/performance.md's table.
    log(
      `summary: ${shots.latencies.length.toLocaleString('en-US')} screenshots of ${round(PNG.length / 1024, 0)} KB at ${rate}/s (${shots.errors} errors), ${WINDOW_SECONDS} s window, load average ${loads[0]!.toFixed(1)}–${loads.at(-1)!.toFixed(1)}; ` +
        `PostgreSQL at most ${mb(peak.database)} MB (tasks ${mb(peak.tasks)} MB), artifact store at most ${mb(peak.artifacts)} MB (${mb(end.artifacts)} MB at the end, ${mb(end.all * PNG.length)} MB if all kept); ` +
        `purge ${msPerRow} ms a row; POST /v1/fetch p50/p99 purge on ${Math.round(on.p50)}/${Math.round(on.p99)} ms, off ${Math.round(off.p50)}/${Math.round(off.p99)} ms (${on.samples}+${off.samples} calls); ledger ${exact ? 'exact' : 'NOT EXACT'}`,
    );
    fs.writeFileSync(
      'bench-results-retention.json',
      JSON.stringify(
        {
          results: RESULTS,
          concurrency: SCREENSHOT_CONCURRENCY,
          windowSeconds: WINDOW_SECONDS,
          pngBytes: PNG.length,
          cpus: os.cpus().length,
          loadavg: { least: loads[0], most: loads.at(-1), end: os.loadavg() },
          screenshots: { done: shots.latencies.length, seconds: round(shots.seconds), perSecond: rate, errors: shots.errors, latency: summarize(shots.latencies) },
          peak,
          end,
          purge: { ...total, runs: purged.length, msPerRow },
          cpuPerTaskMs: cpu,
          web: { purging: { ...latencies('purging'), errors: errors('purging') }, quiet: { ...latencies('quiet'), errors: errors('quiet') } },
          samples,
          ledger,
        },
        null,
        2,
      ),
    );
  } finally {
    await stopAll();
  }
}

runMain(main);
