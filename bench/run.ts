import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { sql } from 'slonik';
import { z } from 'zod';
import { onShutdown } from '../src/bin/shutdown';
import { loadConfig } from '../src/config';
import { createDb } from '../src/db/pool';
import { pickPort } from '../src/embedded/ports';
import { createLogger } from '../src/logger';
import { startInfrastructure } from '../src/runtime/infrastructure';
import { createTemporalClient } from '../src/temporal/connection';
import { cpuPerCall, cpuSnapshot, cpuSpent, type CpuGroups } from './lib/cpu';
import { startService, type Service } from './lib/processes';
import { call, FETCH_RESULT, postSse, register, SimSolver, startFakeUpstream, type Pacing, type TaskFrame } from './lib/sim';
import { alternate, load, sleep, summarize, type Summary } from './lib/stats';

/**
 * `npm run bench`: the marketplace against Temporal's own ceiling and a direct model upstream, on one
 * machine with the embedded defaults (or DATABASE_URL / TEMPORAL_ADDRESS). The API and the worker run
 * as their own processes; simulated solvers and clients run here, so they do not share the API's CPU.
 * Prints a table and writes bench-results.json. `--quick` takes a quarter of the samples.
 */

const quick = process.argv.includes('--quick');
const skipSolver = process.argv.includes('--skip-solver');
// `--only=ceiling,web,chat,scale` runs some phases (the web ratios need the ceiling phase).
const only = process.argv.find((arg) => arg.startsWith('--only='))?.slice('--only='.length).split(',');
const runs = (phase: 'ceiling' | 'web' | 'chat' | 'scale') => !only || only.includes(phase);
const scale = (n: number) => (quick ? Math.max(20, Math.round(n / 4)) : n);
const ADMIN_KEY = 'bench-admin-key';
// Chat streams as a model does (a first token after 100 ms, then 50 chunks a second, 100 chunks): 32 such
// streams are open at once at about 15 starts a second. The burst phase streams 50 chunks at once in a
// closed loop instead, which saturates the service and measures its queueing.
const MODEL_PACING: Pacing = { chunks: 100, firstTokenMs: 100, chunkIntervalMs: 20 };
const BURST_PACING: Pacing = { chunks: 50, firstTokenMs: 0, chunkIntervalMs: 0 };

interface Row {
  figure: string;
  concurrency?: number;
  latency?: Summary;
  perSecond?: number;
  extra?: Record<string, unknown>;
}

async function main() {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'marketplace-bench-'));
  fs.chmodSync(dataDir, 0o755);
  const config = loadConfig({ ...process.env, DATA_DIR: dataDir });
  const logger = createLogger('warn', 'bench');
  const rows: Row[] = [];
  const log = (line: string) => process.stdout.write(`${line}\n`);

  log(`# benchmark on ${os.cpus().length} cores, node ${process.version}${quick ? ' (quick)' : ''}`);
  // Ctrl-C mid-run stops what was started: the embedded servers run in their own process groups and
  // would otherwise outlive the run, holding their ports and the data directory.
  const stops: (() => Promise<void>)[] = [];
  let stopping: Promise<void> | undefined;
  const stopAll = () =>
    (stopping ??= (async () => {
      for (const stop of stops.reverse()) await stop().catch(() => undefined);
      fs.rmSync(dataDir, { recursive: true, force: true });
    })());
  onShutdown(logger, stopAll, ['SIGINT', 'SIGTERM', 'SIGHUP']);
  const infra = await startInfrastructure(config, logger);
  stops.push(infra.stop);
  const port = await pickPort(undefined);
  const env = {
    DATABASE_URL: infra.databaseUrl,
    TEMPORAL_ADDRESS: infra.temporalAddress,
    DATA_DIR: dataDir,
    ADMIN_API_KEY: ADMIN_KEY,
    LOCAL_SOLVER: 'off',
    ALLOW_PRIVATE_NETWORKS: 'true',
    RATE_LIMIT_PER_MINUTE: '100000000',
    HOST: '127.0.0.1',
  };
  const services: Service[] = [];
  const db = await createDb(infra.databaseUrl);
  stops.push(() => db.end());
  const solvers: SimSolver[] = [];
  stops.push(async () => {
    for (const solver of solvers) solver.close();
    for (const service of services.reverse()) await service.stop();
  });
  try {
    const worker = await startService('worker', { ...env, LOG_LEVEL: 'info' }, /temporal worker started/);
    services.push(worker);
    const base = `http://127.0.0.1:${port}`;
    const api = await startService('api', { ...env, PORT: String(port), NODE_ID: 'bench-api' }, async () => (await fetch(`${base}/health`)).ok);
    services.push(api);
    log(`stack up: API ${base}, Temporal ${infra.temporalAddress}`);
    // Runs a load phase and reports the CPU each process spent (`spent`, in ms) and spent per completed call.
    const measured = async (concurrency: number, total: number, fn: () => Promise<void>, options: { rampMs?: number } = {}) => {
      const before = cpuSnapshot({ api: api.child.pid, worker: worker.child.pid });
      const run = await load(concurrency, total, fn, options);
      const after = cpuSnapshot({ api: api.child.pid, worker: worker.child.pid });
      return { ...run, spent: cpuSpent(before, after), cpu: cpuPerCall(before, after, run.latencies.length) };
    };

    // 1. Ceiling: one workflow running one activity, through the same server and worker.
    // 2. Web task path: POST /v1/fetch end to end, instant solvers.
    const temporal = await createTemporalClient(infra.temporalAddress, config.temporalNamespace);
    const smoke = () => temporal.workflow.execute('smokeWorkflow', { taskQueue: config.taskQueue, workflowId: `bench-${crypto.randomUUID()}`, args: ['x'] });
    const client = await register(base);
    await call(base, 'POST', '/v1/admin/deposit', { account_id: client.account_id, amount_points: '100000000' }, { 'X-Admin-API-Key': ADMIN_KEY });
    const fetchCapability = { task_type: 'proxy_fetch', tier: 'standard', billing_type: 'per_request', fulfillment_path: 'http', provider_name: 'bench', model_name: 'instant', marginal_cost: 0, min_price_points: 1, max_concurrent: 64 };
    for (let i = 0; i < 4; i++) {
      const account = await register(base);
      await call(base, 'POST', '/v1/solver/capabilities', [fetchCapability], account.auth);
      solvers.push(
        await SimSolver.connect(base, account, (frame, solver) => {
          solver.send({ type: 'accept', attempt_id: frame.attempt_id });
          solver.send({ type: 'result', attempt_id: frame.attempt_id, result: FETCH_RESULT(frame.payload.url) });
        }),
      );
    }
    const fetchOnce = async () => void (await call(base, 'POST', '/v1/fetch', { url: 'https://example.com/bench' }, client.auth));
    if (runs('ceiling')) await load(8, 40, async () => void (await smoke()));
    if (runs('web')) await load(8, 40, fetchOnce);
    // At each concurrency the ceiling and the web task run in alternating batches (see `alternate`), so
    // their ratio compares the two on one machine rather than on whatever speed each phase met.
    type Load = 'ceiling' | 'web';
    const loads: Partial<Record<Load, () => Promise<void>>> = {
      ...(runs('ceiling') ? { ceiling: async () => void (await smoke()) } : {}),
      ...(runs('web') ? { web: fetchOnce } : {}),
    };
    for (const [concurrency, total] of [[1, scale(200)], [16, scale(800)], [64, scale(1600)]]) {
      // CPU per process, summed over each load's batches.
      const spent: Partial<Record<Load, CpuGroups>> = {};
      const batch = async (name: Load, callers: number, calls: number) => {
        const run = await measured(callers, calls, loads[name]!);
        const into = (spent[name] ??= {});
        for (const [group, ms] of Object.entries(run.spent)) into[group] = (into[group] ?? 0) + ms;
        if (process.env.BENCH_VERBOSE) log(`  batch ${name} c=${callers}: ${calls} calls, ${run.perSecond} per s, p50 ${summarize(run.latencies).p50} ms, cpu ms per call ${JSON.stringify(run.cpu)}`);
        return run;
      };
      const pooled = await alternate(loads, concurrency, total, quick ? 2 : 4, batch);
      const cpu = (name: Load) => cpuPerCall({}, spent[name]!, pooled[name]!.latencies.length);
      const ceiling = pooled.ceiling && { latency: summarize(pooled.ceiling.latencies), perSecond: pooled.ceiling.perSecond };
      if (ceiling) {
        rows.push({ figure: 'ceiling: workflow + 1 activity', concurrency, latency: ceiling.latency, perSecond: ceiling.perSecond, extra: { cpu_ms_per_call: cpu('ceiling') } });
        log(`ceiling c=${concurrency}: ${JSON.stringify(rows[rows.length - 1])}`);
      }
      const run = pooled.web;
      if (!run) continue;
      const latency = summarize(run.latencies);
      rows.push({
        figure: 'web task: POST /v1/fetch',
        concurrency,
        latency,
        perSecond: run.perSecond,
        extra: {
          ...(ceiling
            ? {
                throughput_vs_ceiling: Math.round((run.perSecond / ceiling.perSecond) * 100) / 100,
                p50_vs_ceiling: Math.round((latency.p50 / ceiling.latency.p50) * 100) / 100,
              }
            : {}),
          errors: run.errors,
          ...(run.firstError ? { first_error: run.firstError } : {}),
          cpu_ms_per_call: cpu('web'),
        },
      });
      log(`fetch c=${concurrency}: ${JSON.stringify(rows[rows.length - 1])}`);
    }

    // 3. Chat: strong solvers forwarding to a fake upstream; overhead = service TTFT − the solver's own time.
    const upstream = await startFakeUpstream(MODEL_PACING);
    const sentAt = new Map<string, number>();
    const solverFirstToken = new Map<string, number>();
    const chatCapability = { task_type: 'chat_completion', tier: 'strong', billing_type: 'per_token', fulfillment_path: 'provider_api', provider_name: 'bench', model_name: 'gpt-4o', marginal_cost: '0.01', min_price_points: '1', max_concurrent: 64 };
    const forwardToUpstream = async (frame: TaskFrame, solver: SimSolver) => {
      const received = performance.now();
      const requested = requestedAt.get(String(frame.payload.user));
      requestedAt.delete(String(frame.payload.user));
      if (requested !== undefined) toSolver.push(received - requested);
      solver.send({ type: 'accept', attempt_id: frame.attempt_id });
      const key = frame.task_id.replace(/^chat_/, '');
      let seq = 0;
      let usage: Record<string, number> = {};
      await postSse(`${upstream.url}/v1/chat/completions`, { ...frame.payload, stream: true }, {}, (data) => {
        if (data === '[DONE]') return;
        const part = JSON.parse(data);
        if (part.usage) usage = part.usage;
        const delta = part.choices?.[0]?.delta;
        if (!delta || delta.content === undefined) return;
        const now = performance.now();
        if (seq === 0) solverFirstToken.set(key, now - received);
        sentAt.set(`${key}:${seq++}`, now);
        solver.send({ type: 'chunk', attempt_id: frame.attempt_id, delta });
      });
      solver.send({ type: 'result', attempt_id: frame.attempt_id, result: { finish_reason: 'stop', usage } });
    };
    for (let i = 0; i < 2; i++) {
      const account = await register(base);
      await call(base, 'POST', '/v1/solver/capabilities', [chatCapability], account.auth);
      solvers.push(await SimSolver.connect(base, account, (frame, solver) => void forwardToUpstream(frame, solver)));
    }
    const relay: number[] = [];
    // The request's leg of the overhead: from the client's request to the task frame at the solver.
    const requestedAt = new Map<string, number>();
    const toSolver: number[] = [];
    const overheads: number[] = [];
    const rates: number[] = [];
    const chatOnce = async () => {
      const started = performance.now();
      const user = crypto.randomUUID();
      requestedAt.set(user, started);
      let first: number | undefined;
      let last = 0;
      let seq = 0;
      let key = '';
      const body = { model: 'service/strong', messages: [{ role: 'user', content: 'benchmark' }], stream: true, user };
      try {
        await postSse(`${base}/v1/chat/completions`, body, client.auth, (data, at) => {
          if (data === '[DONE]') return;
          const part = JSON.parse(data);
          if (part.error) throw new Error(part.error.message);
          if (part.choices?.[0]?.delta?.content === undefined || part.choices[0].delta.content === '') return;
          key = part.id.replace(/^chatcmpl-/, '');
          first ??= at;
          last = at;
          const sent = sentAt.get(`${key}:${seq}`);
          if (sent !== undefined) relay.push(at - sent);
          sentAt.delete(`${key}:${seq++}`);
        });
      } finally {
        // Once the stream has ended the task frame has surely gone out; one not received is not counted.
        requestedAt.delete(user);
      }
      if (first === undefined) throw new Error('no token arrived');
      overheads.push(first - started - (solverFirstToken.get(key) ?? 0));
      solverFirstToken.delete(key);
      // Chunks per second between the first and the last token; streams whose tokens all arrived in one
      // read have no measurable span and are left out.
      if (seq > 1 && last > first) rates.push((seq - 1) / ((last - first) / 1000));
    };
    const directOnce = async () => {
      const started = performance.now();
      let first: number | undefined;
      await postSse(`${upstream.url}/v1/chat/completions`, { stream: true }, {}, (data, at) => {
        if (first === undefined && data.includes('"content"')) first = at;
      });
      directTtft.push(first! - started);
    };
    let directTtft: number[] = [];
    if (runs('chat')) await load(4, 20, chatOnce);
    const chatPhases = [
      { label: 'chat', pacing: MODEL_PACING, concurrency: 1, total: scale(60), steady: true },
      { label: 'chat', pacing: MODEL_PACING, concurrency: 32, total: scale(320), steady: true },
      { label: 'chat burst (instant upstream, closed loop)', pacing: BURST_PACING, concurrency: 32, total: scale(640), steady: false },
    ];
    for (const { label, pacing, concurrency, total, steady } of runs('chat') ? chatPhases : []) {
      // Steady phases start their streams spread over one stream's length, as independent clients would.
      const rampMs = steady ? pacing.firstTokenMs + pacing.chunks * pacing.chunkIntervalMs : 0;
      upstream.setPacing(pacing);
      relay.length = 0;
      toSolver.length = 0;
      overheads.length = 0;
      rates.length = 0;
      // The clients, solvers and upstream share this process: its event-loop delay is part of every figure here.
      const LOOP_SAMPLE_MS = 5;
      const loopDelay = monitorEventLoopDelay({ resolution: LOOP_SAMPLE_MS });
      loopDelay.enable();
      const run = await measured(concurrency, total, chatOnce, { rampMs });
      loopDelay.disable();
      // The histogram records each sampling interval whole; past the interval is the delay.
      const lateMs = (p: number) => Math.max(0, Math.round((loopDelay.percentile(p) / 1e6 - LOOP_SAMPLE_MS) * 100) / 100);
      const benchLoopDelayMs = { p50: lateMs(50), p99: lateMs(99) };
      directTtft = [];
      await load(concurrency, total, directOnce, { rampMs });
      rows.push({ figure: `${label}: TTFT overhead (service − solver)`, concurrency, latency: summarize(overheads), perSecond: run.perSecond, extra: { errors: run.errors, ...(run.firstError ? { first_error: run.firstError } : {}), cpu_ms_per_call: run.cpu, bench_loop_delay_ms: benchLoopDelayMs } });
      rows.push({ figure: `${label}: request to task frame at the solver`, concurrency, latency: summarize(toSolver) });
      rows.push({ figure: `${label}: chunk relay latency`, concurrency, latency: summarize(relay), extra: { chunks_per_second_per_stream_p50: summarize(rates).p50 } });
      rows.push({ figure: `${label} baseline: TTFT direct to upstream`, concurrency, latency: summarize(directTtft) });
      log(`${label} c=${concurrency}: overhead ${JSON.stringify(summarize(overheads))} to solver ${JSON.stringify(summarize(toSolver))} relay ${JSON.stringify(summarize(relay))} per s ${run.perSecond} errors ${run.errors} bench loop delay ${JSON.stringify(benchLoopDelayMs)} cpu ${JSON.stringify(run.cpu)}`);
    }
    upstream.setPacing(BURST_PACING);

    // 4. Scale: API RSS with idle solvers, then with open SSE streams.
    if (runs('scale')) {
      for (const solver of solvers.splice(0)) solver.close();
      await sleep(1000);
      const scaleRow: Record<string, number> = { rss_mb_start: api.rssMb() };
      const idle: SimSolver[] = [];
      const connectIdle = async (count: number) => {
        const accounts = [];
        for (let i = 0; i < count; i += 50) {
          accounts.push(...(await Promise.all(Array.from({ length: Math.min(50, count - i) }, () => register(base)))));
        }
        for (let i = 0; i < accounts.length; i += 100) {
          idle.push(...(await Promise.all(accounts.slice(i, i + 100).map((account) => SimSolver.connect(base, account)))));
        }
      };
      await connectIdle(1000);
      scaleRow.rss_mb_1000_idle_solvers = await steadyRss(api);
      await connectIdle(4000);
      scaleRow.rss_mb_5000_idle_solvers = await steadyRss(api);
      log(`scale: ${JSON.stringify(scaleRow)}`);
      for (const solver of idle.splice(0)) solver.close();
      await sleep(3000);

      const holders: { solver: SimSolver; frame: TaskFrame }[] = [];
      const holdAccount = await register(base);
      await call(base, 'POST', '/v1/solver/capabilities', [{ ...chatCapability, max_concurrent: 1100 }], holdAccount.auth);
      const holder = await SimSolver.connect(base, holdAccount, (frame, solver) => {
        solver.send({ type: 'accept', attempt_id: frame.attempt_id });
        solver.send({ type: 'chunk', attempt_id: frame.attempt_id, delta: { content: 'holding' } });
        holders.push({ solver, frame });
      });
      const failures: string[] = [];
      const streams = Array.from({ length: 1000 }, async () => {
        try {
          await postSse(`${base}/v1/chat/completions`, { model: 'service/strong', messages: [{ role: 'user', content: 'hold' }], stream: true }, client.auth, (data) => {
            if (data.includes('"error"')) failures.push(data);
          });
        } catch (error) {
          failures.push(String(error));
        }
      });
      const openDeadline = Date.now() + 180_000;
      while (holders.length + failures.length < 1000 && Date.now() < openDeadline) await sleep(500);
      scaleRow.open_sse_streams = holders.length;
      if (failures.length) log(`SSE streams that failed to open: ${failures.length}; first: ${failures[0].slice(0, 300)}`);
      scaleRow.rss_mb_1000_sse_streams = await steadyRss(api);
      for (const { solver, frame } of holders) solver.send({ type: 'result', attempt_id: frame.attempt_id, result: { finish_reason: 'stop', usage: { prompt_tokens: 1, completion_tokens: 1 } } });
      await Promise.allSettled(streams);
      holder.close();
      rows.push({ figure: 'scale: API process RSS (MB)', extra: scaleRow });
      log(`scale: ${JSON.stringify(scaleRow)}`);
    }

    // 5. The ledger stays exact.
    await sleep(3000);
    const drift = await db.oneFirst(sql.type(z.object({ count: z.number() }))`
      SELECT count(*)::int AS count FROM balances b
      LEFT JOIN LATERAL (
        SELECT COALESCE(SUM(CASE kind WHEN 'deposit' THEN amount WHEN 'payout' THEN amount WHEN 'fee' THEN amount WHEN 'release' THEN amount WHEN 'hold' THEN -amount ELSE 0 END), 0) AS available,
               COALESCE(SUM(CASE kind WHEN 'hold' THEN amount WHEN 'capture' THEN -amount WHEN 'release' THEN -amount ELSE 0 END), 0) AS held
        FROM ledger_entries e WHERE e.account_id = b.account_id) l ON true
      WHERE b.available <> l.available OR b.held <> l.held OR b.available < 0 OR b.held < 0
         OR b.available + b.held <> b.lifetime_deposited + b.lifetime_earned - b.lifetime_spent`);
    const openHolds = await db.oneFirst(sql.type(z.object({ count: z.number() }))`
      SELECT count(*)::int AS count FROM holds h JOIN tasks t ON t.task_id = h.hold_id
      WHERE h.status = 'open' AND t.status IN ('completed', 'failed', 'timed_out')`);
    const doubled = await db.oneFirst(sql.type(z.object({ count: z.number() }))`
      SELECT count(*)::int AS count FROM (SELECT hold_id, kind FROM ledger_entries WHERE kind IN ('capture', 'payout') GROUP BY 1, 2 HAVING count(*) > 1) d`);
    const ledgerLine = `ledger: ${drift === 0 && openHolds === 0 && doubled === 0 ? 'EXACT' : 'DRIFT'} (accounts off: ${drift}, open holds on finished tasks: ${openHolds}, double charges/payouts: ${doubled})`;
    rows.push({ figure: 'ledger', extra: { accounts_off: drift, open_holds_on_finished_tasks: openHolds, double_movements: doubled } });
    // An attempt whose activity never ran, or whose node went away, is reassigned by its workflow.
    const lost = await db.one(sql.type(z.object({ lost: z.number(), completed: z.number() }))`
      SELECT count(*)::int AS lost, count(*) FILTER (WHERE t.status = 'completed')::int AS completed
      FROM task_attempts a JOIN tasks t USING (task_id) WHERE a.error->>'type' = 'node_unavailable'`);
    const lostLine = `lost attempts (activity lost or never run): ${lost.lost}, their tasks completed after reassignment: ${lost.completed}`;
    rows.push({ figure: 'lost attempts', extra: { lost: lost.lost, tasks_completed: lost.completed } });

    let solverBench: Awaited<ReturnType<typeof import('./solver').runSolverBenchmark>> | undefined;
    if (!skipSolver) {
      const { runSolverBenchmark } = await import('./solver');
      solverBench = await runSolverBenchmark();
    }

    printTable(rows, log);
    log(ledgerLine);
    log(lostLine);
    if (solverBench) {
      const { formatTable } = await import('./solver');
      log('');
      log('solver alone (reference agent handlers, pages on 127.0.0.1):');
      log(formatTable([...solverBench.fetch, ...solverBench.screenshot]));
    }
    const out = path.resolve(__dirname, '..', 'bench-results.json');
    fs.writeFileSync(out, JSON.stringify({ at: new Date().toISOString(), cpus: os.cpus().length, quick, rows, solver: solverBench }, null, 2));
    log(`wrote ${out}`);
    await temporal.connection.close();
    await upstream.close();
  } finally {
    await stopAll();
  }
}

/**
 * RSS once the process holds its connections at rest: V8 hands back the garbage of the busy phases a
 * few seconds after allocation slows down, so the figure is read after 15 s without new work.
 */
async function steadyRss(service: Service): Promise<number> {
  const samples: number[] = [];
  for (let i = 0; i < 15; i++) {
    await sleep(1000);
    samples.push(service.rssMb());
  }
  if (process.env.BENCH_VERBOSE) process.stdout.write(`rss samples: ${samples.join(' ')}\n`);
  return samples[samples.length - 1];
}

function printTable(rows: Row[], log: (line: string) => void) {
  log('');
  log('| figure | conc. | p50 ms | p95 ms | p99 ms | per s | notes |');
  log('| --- | ---: | ---: | ---: | ---: | ---: | --- |');
  for (const row of rows) {
    const l = row.latency;
    log(`| ${row.figure} | ${row.concurrency ?? ''} | ${l?.p50 ?? ''} | ${l?.p95 ?? ''} | ${l?.p99 ?? ''} | ${row.perSecond ?? ''} | ${row.extra ? JSON.stringify(row.extra) : ''} |`);
  }
}

main().catch((error) => {
  process.stderr.write(`benchmark failed: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});
