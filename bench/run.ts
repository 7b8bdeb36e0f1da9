import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type http from 'node:http';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { Client } from '@temporalio/client';
import { sql } from 'slonik';
import { z } from 'zod';
import { loadConfig } from '../src/config';
import { auditLedger, PLATFORM_ACCOUNT_ID } from '../src/db/ledger';
import { createDb, type Db } from '../src/db/pool';
import { pickPort } from '../src/embedded/ports';
import { createLogger } from '../src/logger';
import { startInfrastructure } from '../src/runtime/infrastructure';
import { createTemporalClient } from '../src/temporal/connection';
import { cpuPerCall, cpuSnapshot, cpuSpent, type CpuGroups } from './lib/cpu';
import { ADMIN_KEY, BENCH_STACK_ENV, runStops, startService, type Service } from './lib/processes';
import { call, FETCH_RESULT, postSse, register, request, SimSolver, startFakeUpstream, type Pacing, type TaskFrame } from './lib/sim';
import { alternate, jainIndex, load, sleep, summarize, type Summary } from './lib/stats';
import { tokenizerCostApart } from './lib/tokenizer';
import { startWebhookReceiver } from './lib/webhooks';

/**
 * `npm run bench`: the marketplace against Temporal's own ceiling and a direct model upstream, on one
 * machine with the embedded defaults (or DATABASE_URL / TEMPORAL_ADDRESS). The API and the worker run
 * as their own processes; simulated solvers and clients run here, so they do not share the API's CPU.
 * Prints a table and writes bench-results.json. `--quick` takes a quarter of the samples.
 */

const quick = process.argv.includes('--quick');
const skipSolver = process.argv.includes('--skip-solver');
// `--webhooks`: every task of the benchmark's client carries a webhook (the account's default) to a
// receiver in this process, which counts the verified deliveries.
const withWebhooks = process.argv.includes('--webhooks');
// `--only=ceiling,web,cache,chat,scale,overload,trust,trust-steady` runs some phases (the web ratios need the
// ceiling phase).
const only = process.argv.find((arg) => arg.startsWith('--only='))?.slice('--only='.length).split(',');
type Phase = 'ceiling' | 'web' | 'cache' | 'chat' | 'scale' | 'overload' | 'trust' | 'trust-steady';
const runs = (phase: Phase) => !only || only.includes(phase);
const scale = (n: number) => (quick ? Math.max(20, Math.round(n / 4)) : n);
// Chat streams as a model does (a first token after 100 ms, then 50 chunks a second, 100 chunks): 32 such
// streams are open at once at about 15 starts a second. The burst phase streams 50 chunks at once in a
// closed loop instead, which saturates the service and measures its queueing.
const MODEL_PACING: Pacing = { chunks: 100, firstTokenMs: 100, chunkIntervalMs: 20 };
const BURST_PACING: Pacing = { chunks: 50, firstTokenMs: 0, chunkIntervalMs: 0 };
// The fraction of client web tasks run again by a second solver (REDUNDANT_RUN_FRACTION): the web goal
// is to hold at the service's default of 2%. Set for the whole run (API and worker read it as they start).
const REDUNDANT_FRACTION = process.env.BENCH_REDUNDANT_FRACTION ?? '0.02';

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

  log(`# benchmark on ${os.cpus().length} cores, node ${process.version}${quick ? ' (quick)' : ''}${withWebhooks ? ', a webhook on every task' : ''}`);
  const { stops, stopAll } = runStops(logger, dataDir);
  const infra = await startInfrastructure(config, logger);
  stops.push(infra.stop);
  const port = await pickPort(undefined);
  const env = {
    DATABASE_URL: infra.databaseUrl,
    TEMPORAL_ADDRESS: infra.temporalAddress,
    DATA_DIR: dataDir,
    ...BENCH_STACK_ENV,
    REDUNDANT_RUN_FRACTION: REDUNDANT_FRACTION,
    // The throughput phases measure a market of solvers past their newcomer rate: verified at the floor.
    VERIFICATION_START_FRACTION: REDUNDANT_FRACTION,
    // The simulated solvers return one fixed page, which canaries would catch and quarantine: the platform
    // account is funded for redundant runs only, and new solvers are on no probation.
    CANARY_EVERY_TASKS: '0',
    TRUST_PROBATION_CANARIES: '0',
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
    // Redundant runs are paid by the platform account.
    await call(base, 'POST', '/v1/admin/deposit', { account_id: PLATFORM_ACCOUNT_ID, amount_points: '100000000' }, { 'X-Admin-API-Key': ADMIN_KEY });
    // The receiver is on 127.0.0.1, which the service allows here (ALLOW_PRIVATE_NETWORKS above).
    const receiver = withWebhooks ? await startWebhookReceiver((await call(base, 'GET', '/v1/account/webhook-secret', undefined, client.auth)).secret) : undefined;
    if (receiver) {
      stops.push(receiver.close);
      await call(base, 'PUT', '/v1/account/webhook', { url: receiver.url }, client.auth);
    }
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

    // 2b. Page cache (docs/crawl.md, "Page cache"): a Firecrawl scrape of a page no one fetched, through
    // a solver, then the same scrape again within maxAge, answered from the cache; one client, one at a
    // time, each page once each way. The goal is a hit at least 10 times faster than the fetch (p50).
    if (runs('cache')) {
      const pages = scale(200);
      const fetched: number[] = [];
      const hits: number[] = [];
      const states: Record<string, number> = {};
      const scrape = async (url: string, pass: 'first' | 'repeat') => {
        const started = performance.now();
        const answer = (await call(base, 'POST', '/v2/scrape', { url, maxAge: 600_000 }, client.auth)) as { data: { metadata: { cacheState: string } } };
        (pass === 'first' ? fetched : hits).push(performance.now() - started);
        const key = `${pass}_${answer.data.metadata.cacheState}`;
        states[key] = (states[key] ?? 0) + 1;
      };
      const run = crypto.randomUUID();
      for (let i = 0; i < pages; i++) {
        const url = `https://example.com/cache-bench/${run}/${i}`;
        await scrape(url, 'first');
        await scrape(url, 'repeat');
      }
      const first = summarize(fetched);
      const again = summarize(hits);
      rows.push({ figure: 'page cache: POST /v2/scrape, fetched by a solver', concurrency: 1, latency: first });
      rows.push({ figure: 'page cache: the same scrape within maxAge (hit)', concurrency: 1, latency: again, extra: { p50_speedup: Math.round((first.p50 / again.p50) * 10) / 10, ...states } });
      log(`page cache: ${JSON.stringify(rows[rows.length - 2])} ${JSON.stringify(rows[rows.length - 1])}`);
    }
    if (runs('web')) {
      rows.push({ figure: 'redundant runs (web phase)', extra: await redundantRuns(db, Number(REDUNDANT_FRACTION)) });
      log(`redundant runs: ${JSON.stringify(rows[rows.length - 1].extra)}`);
      rows.push({ figure: 'work spread: equal web solvers (web phase)', extra: await workSpread(db, client.account_id, solvers.slice(0, 4).map((solver) => solver.solverId)) });
      log(`work spread: ${JSON.stringify(rows[rows.length - 1].extra)}`);
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
    // The service's own steps before the first byte (its Server-Timing header), by step.
    const steps = new Map<string, number[]>();
    const collectSteps = (headers: http.IncomingHttpHeaders) => {
      for (const part of String(headers['server-timing'] ?? '').split(',')) {
        const [name, duration] = part.trim().split(';dur=');
        if (name && duration !== undefined) steps.set(name, [...(steps.get(name) ?? []), Number(duration)]);
      }
    };
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
        }, collectSteps);
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
    if (runs('chat')) {
      // In this process, not the service's: what counting a chat's usage costs (src/chat/usage.ts).
      rows.push({ figure: 'micro: usage count per 1,000 streamed tokens (CPU ms)', extra: await tokenizerCostApart() });
      log(`usage count: ${JSON.stringify(rows[rows.length - 1].extra)}`);
    }
    for (const { label, pacing, concurrency, total, steady } of runs('chat') ? chatPhases : []) {
      // Steady phases start their streams spread over one stream's length, as independent clients would.
      const rampMs = steady ? pacing.firstTokenMs + pacing.chunks * pacing.chunkIntervalMs : 0;
      upstream.setPacing(pacing);
      relay.length = 0;
      toSolver.length = 0;
      overheads.length = 0;
      rates.length = 0;
      steps.clear();
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
      const stepsP50 = Object.fromEntries([...steps].map(([name, values]) => [name, summarize(values).p50]));
      rows.push({ figure: `${label}: service steps before the first byte (Server-Timing, ms p50)`, concurrency, extra: stepsP50 });
      log(`${label} c=${concurrency}: steps p50 ${JSON.stringify(stepsP50)}`);
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
      // A stream ends as its last delta is relayed, before its workflow closes: the 1,000 workflows are
      // still closing for seconds (tens of seconds on a busy machine), and the next phase should not pay for them.
      const drained = await untilWorkflowsEnd(temporal);
      scaleRow.workflows_drained_after_seconds = drained.seconds;
      if (drained.running > 0) scaleRow.workflows_still_running = drained.running;
      rows.push({ figure: 'scale: API process RSS (MB)', extra: scaleRow });
      log(`scale: ${JSON.stringify(scaleRow)}`);
    }

    // 5. Overload: closed loops of several times as many clients as slots, for a web task and for chat;
    // then 10,000 tasks queued at rest, and requests refused by the full queue.
    if (runs('overload')) {
      for (const solver of solvers.splice(0)) solver.close();
      await sleep(1000);
      await untilWorkflowsEnd(temporal);
      // Each request carries a key (the search's query, the chat's user): the solver says when its task
      // frame arrived (the request's wait) and how long it kept the slot (its service time).
      const requested = new Map<string, number>();
      const waits: number[] = [];
      const serviceMs: number[] = [];
      const arrived = (key: string) => {
        const now = performance.now();
        const at = requested.get(key);
        requested.delete(key);
        if (at !== undefined) waits.push(now - at);
        return now;
      };
      const overload = async (label: string, slots: number, clients: number, total: number, once: () => Promise<void>) => {
        waits.length = 0;
        serviceMs.length = 0;
        const run = await measured(clients, total, once);
        const service = serviceMs.reduce((sum, ms) => sum + ms, 0) / (serviceMs.length || 1);
        const capacity = (slots * 1000) / service;
        // A fair queue, C clients in a closed loop on S slots of service time T: S are served while the
        // other C − S wait, so each request waits (C / S − 1) × T.
        const fairWait = (clients / slots - 1) * service;
        // The same for slots held as long as they were (S / throughput each): how fair the order was,
        // whatever the slots lost between tasks.
        const fairWaitAtServed = (clients - slots) / (run.perSecond || Infinity) * 1000;
        const wait = summarize(waits);
        const round2 = (value: number) => Math.round(value * 100) / 100;
        rows.push({
          figure: `overload ${label}: wait for a slot`,
          concurrency: clients,
          latency: wait,
          perSecond: run.perSecond,
          extra: {
            slots,
            service_ms: round2(service),
            capacity_per_second: round2(capacity),
            throughput_vs_capacity: round2(run.perSecond / capacity),
            fair_wait_ms: Math.round(fairWait),
            p99_wait_vs_fair: round2(wait.p99 / fairWait),
            fair_wait_at_served_rate_ms: Math.round(fairWaitAtServed),
            p99_wait_vs_fair_at_served_rate: round2(wait.p99 / fairWaitAtServed),
            errors: run.errors,
            ...(run.firstError ? { first_error: run.firstError } : {}),
            cpu_ms_per_call: run.cpu,
          },
        });
        log(`overload ${label}: ${JSON.stringify(rows[rows.length - 1])}`);
      };

      // Web: one solver, 2 slots of 250 ms (8 tasks a second), 16 clients calling POST /v1/search.
      const WEB_SERVICE_MS = 250;
      const webSlots = 2;
      const searcher = await register(base);
      await call(base, 'POST', '/v1/solver/capabilities', [{ ...fetchCapability, task_type: 'web_search', model_name: 'slow', max_concurrent: webSlots }], searcher.auth);
      solvers.push(
        await SimSolver.connect(base, searcher, (frame, solver) => {
          const received = arrived(String(frame.payload.query));
          solver.send({ type: 'accept', attempt_id: frame.attempt_id });
          setTimeout(() => {
            serviceMs.push(performance.now() - received);
            solver.send({ type: 'result', attempt_id: frame.attempt_id, result: { results: [{ title: 'Result', url: 'https://example.com/r', snippet: 'found' }] } });
          }, WEB_SERVICE_MS);
        }),
      );
      await overload('web (POST /v1/search)', webSlots, 8 * webSlots, quick ? 80 : 160, async () => {
        const key = crypto.randomUUID();
        requested.set(key, performance.now());
        try {
          await call(base, 'POST', '/v1/search', { query: key }, client.auth);
        } finally {
          requested.delete(key);
        }
      });

      await untilWorkflowsEnd(temporal);

      // Chat: one solver, 4 slots forwarding to the upstream (a first token after 100 ms, 20 chunks
      // 20 ms apart: about half a second a stream), 24 streaming clients.
      const chatSlots = 4;
      upstream.setPacing({ chunks: 20, firstTokenMs: 100, chunkIntervalMs: 20 });
      const chatter = await register(base);
      await call(base, 'POST', '/v1/solver/capabilities', [{ ...chatCapability, model_name: 'gpt-4o', max_concurrent: chatSlots }], chatter.auth);
      solvers.push(
        await SimSolver.connect(base, chatter, (frame, solver) => {
          const received = arrived(String(frame.payload.user));
          solver.send({ type: 'accept', attempt_id: frame.attempt_id });
          let usage: Record<string, number> = {};
          void postSse(`${upstream.url}/v1/chat/completions`, { ...frame.payload, stream: true }, {}, (data) => {
            if (data === '[DONE]') return;
            const part = JSON.parse(data);
            if (part.usage) usage = part.usage;
            const delta = part.choices?.[0]?.delta;
            if (delta?.content !== undefined) solver.send({ type: 'chunk', attempt_id: frame.attempt_id, delta });
          }).then(() => {
            serviceMs.push(performance.now() - received);
            solver.send({ type: 'result', attempt_id: frame.attempt_id, result: { finish_reason: 'stop', usage } });
          });
        }),
      );
      await overload('chat (streams)', chatSlots, 6 * chatSlots, quick ? 80 : 160, async () => {
        const user = crypto.randomUUID();
        requested.set(user, performance.now());
        try {
          await postSse(`${base}/v1/chat/completions`, { model: 'service/strong', messages: [{ role: 'user', content: 'overload' }], stream: true, user }, client.auth, (data) => {
            if (data !== '[DONE]' && JSON.parse(data).error) throw new Error(data);
          });
        } finally {
          requested.delete(user);
        }
      });
      upstream.setPacing(BURST_PACING);
      for (const solver of solvers.splice(0)) solver.close();

      // At rest: the database's transactions (pg_stat_database: xact_commit + xact_rollback; a statement
      // outside a transaction is one) and each process's CPU over a quiet interval, with an empty queue
      // and then with QUEUE_LIMIT_PER_TASK_TYPE (10,000) tasks waiting. The workflows of the tasks just
      // queued are still starting for a while after their creation: an interval starts once the worker and
      // the Temporal server are idle (under a fifth of a core together over 5 s), and 10 s later still,
      // since backends report their counters when idle, up to 10 s late.
      const Counters = z.object({ xacts: z.string(), written: z.string() });
      const counters = async () =>
        db.one(sql.type(Counters)`
          SELECT (xact_commit + xact_rollback)::text AS xacts, (tup_inserted + tup_updated + tup_deleted)::text AS written
          FROM pg_stat_database WHERE datname = current_database()`);
      const SETTLE_MS = 10_000;
      const QUIET_MS = quick ? 20_000 : 30_000;
      const atRest = async () => {
        const settling = Date.now();
        for (;;) {
          const before = cpuSnapshot({ api: api.child.pid, worker: worker.child.pid });
          await sleep(5000);
          const spent = cpuSpent(before, cpuSnapshot({ api: api.child.pid, worker: worker.child.pid }));
          if ((spent.worker ?? 0) + (spent.temporal ?? 0) < 1000 || Date.now() - settling > 300_000) break;
        }
        const settledAfterSeconds = Math.round((Date.now() - settling) / 1000);
        await sleep(SETTLE_MS);
        const before = await counters();
        const cpuBefore = cpuSnapshot({ api: api.child.pid, worker: worker.child.pid });
        await sleep(QUIET_MS);
        const after = await counters();
        const spent = cpuSpent(cpuBefore, cpuSnapshot({ api: api.child.pid, worker: worker.child.pid }));
        const perSecond = (n: number) => Math.round((n / (QUIET_MS / 1000)) * 100) / 100;
        return {
          settled_after_seconds: settledAfterSeconds,
          // Less the one transaction of the first reading, counted in the interval.
          db_transactions_per_second: perSecond(Number(after.xacts) - Number(before.xacts) - 1),
          db_rows_written_per_second: perSecond(Number(after.written) - Number(before.written)),
          cpu_ms_per_second: Object.fromEntries(Object.entries(spent).map(([group, ms]) => [group, perSecond(ms)])),
        };
      };
      const empty = await atRest();
      log(`overload at rest, empty queue: ${JSON.stringify(empty)}`);
      const QUEUED = config.queueLimitPerTaskType;
      // No solver offers page_snapshot: every task waits in line until its deadline, far beyond the phase.
      const queueOne = { task_type: 'page_snapshot', payload: { url: 'https://example.com/queued' }, max_price_points: 1, timeout_seconds: 86_400 };
      const queuing = await load(32, QUEUED, async () => {
        const created = await call(base, 'POST', '/v1/tasks', queueOne, client.auth);
        if (created.status !== 'queued') throw new Error(`a task to queue is ${created.status}`);
      });
      const queued = await db.oneFirst(sql.type(z.object({ n: z.number() }))`SELECT count(*)::int AS n FROM task_queue WHERE task_type = 'page_snapshot'`);
      log(`queued ${queued} tasks in ${Math.round(queuing.seconds)} s (${queuing.perSecond} per s, errors ${queuing.errors}${queuing.firstError ? `, first: ${queuing.firstError}` : ''})`);
      const full = await atRest();
      log(`overload at rest, ${queued} queued: ${JSON.stringify(full)}`);
      rows.push({
        figure: 'overload: at rest, empty queue',
        extra: { ...empty, quiet_seconds: QUIET_MS / 1000 },
      });
      rows.push({
        figure: 'overload: at rest, tasks queued',
        extra: {
          ...full,
          quiet_seconds: QUIET_MS / 1000,
          queued,
          added_db_transactions_per_second: Math.round((full.db_transactions_per_second - empty.db_transactions_per_second) * 100) / 100,
        },
      });

      // The queue is at its limit: further tasks of its type are refused. One client alone, then 8 at
      // once, whose refusals keep the 2 cores busy (their latency is then 8 / the refusals per second).
      const refuseOnce = async () => {
        const answer = await request(base, 'POST', '/v1/tasks', queueOne, client.auth);
        if (answer.status !== 429 || !answer.text.includes('solvers_busy')) throw new Error(`${answer.status} ${answer.text.slice(0, 200)}`);
      };
      for (const concurrency of [1, 8]) {
        const refusals = await load(concurrency, quick ? 100 : 400, refuseOnce);
        rows.push({ figure: 'overload: refused (429 solvers_busy)', concurrency, latency: summarize(refusals.latencies), perSecond: refusals.perSecond, extra: { errors: refusals.errors, ...(refusals.firstError ? { first_error: refusals.firstError } : {}) } });
        log(`overload refused: ${JSON.stringify(rows[rows.length - 1])}`);
      }
    }

    // 6. Trust: scripted cheats beside honest solvers under the service's default canary settings. The
    // API and the worker start again with canaries on (the phases above run without them: their
    // simulated solvers return one fixed page) and search canaries against the bundled index.
    if (runs('trust') || runs('trust-steady')) {
      for (const solver of solvers.splice(0)) solver.close();
      for (const service of services.splice(0).reverse()) await service.stop();
      const { CANARY_EVERY_TASKS: _off, TRUST_PROBATION_CANARIES: _noProbation, VERIFICATION_START_FRACTION: _floor, ...trustEnv } = { ...env, CANARY_SEARCH_ORACLE: 'bundled' };
      services.push(await startService('worker', { ...trustEnv, LOG_LEVEL: 'info' }, /temporal worker started/));
      services.push(await startService('api', { ...trustEnv, PORT: String(port), NODE_ID: 'bench-api-trust' }, async () => (await fetch(`${base}/health`)).ok));
      if (runs('trust')) {
        const { runTrustPhase } = await import('./trust');
        const trust = await runTrustPhase(base, db, ADMIN_KEY, log);
        for (const cheat of trust.cheats) {
          rows.push({ figure: `trust: ${cheat.cheat}`, extra: cheat });
          log(`trust cheat: ${JSON.stringify(cheat)}`);
        }
        rows.push({ figure: 'trust: honest solvers', extra: trust.honest });
        rows.push({ figure: 'trust: redundant runs', extra: { rate_floor: Number(REDUNDANT_FRACTION), ...trust.redundant } });
        log(`trust honest: ${JSON.stringify(trust.honest)}; redundant runs: ${JSON.stringify(trust.redundant)}; phase ${trust.seconds} s`);
      }
      // 6b. Steady state: honest solvers past their newcomer rate, against pages that change between fetches.
      if (runs('trust-steady')) {
        const { runTrustSteadyPhase } = await import('./trust-steady');
        const { verificationStartFraction: start, redundantRunFraction: floor } = loadConfig({ ...process.env, ...trustEnv }).trust;
        const steady = await runTrustSteadyPhase(base, db, ADMIN_KEY, { start, floor }, log);
        rows.push({ figure: 'trust steady: honest solvers', extra: steady as unknown as Record<string, unknown> });
        log(`trust steady: ${JSON.stringify(steady)}`);
      }
    }

    // 7. The ledger stays exact, and (`--webhooks`) every finished task of the client was delivered.
    await sleep(3000);
    if (receiver) {
      const finished = async () =>
        db.oneFirst(sql.type(z.object({ n: z.number() }))`SELECT count(*)::int AS n FROM tasks WHERE account_id = ${client.account_id} AND completed_at IS NOT NULL`);
      // Deliveries trail their tasks by a hop through PostgreSQL and Temporal; a minute is ample.
      const deadline = Date.now() + 60_000;
      let tasks = await finished();
      while (receiver.counts().verified < tasks && Date.now() < deadline) {
        await sleep(1000);
        tasks = await finished();
      }
      const counts = receiver.counts();
      rows.push({ figure: 'webhooks', extra: { finished_tasks: tasks, verified_deliveries: counts.verified, duplicates: counts.duplicates, unverified: counts.unverified } });
      log(`webhooks: ${counts.verified} verified deliveries for ${tasks} finished tasks (duplicate attempts ${counts.duplicates}, unverified ${counts.unverified})`);
    }
    const { accountsOff: drift, openHoldsOnFinishedTasks: openHolds, doubleMovements: doubled } = await auditLedger(db);
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
    printGoals(rows, log);
    if (solverBench) {
      const { formatTable } = await import('./solver');
      log('');
      log('solver alone (reference agent handlers, pages on 127.0.0.1):');
      log(formatTable([...solverBench.fetch, ...solverBench.rendered, ...solverBench.screenshot]));
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
 * The redundant runs sampled so far, once those started have ended (or 20 s have passed): the rate set,
 * the fraction of completed client web tasks sampled, and how many ended each way.
 */
async function redundantRuns(db: Db, rate: number): Promise<Record<string, unknown>> {
  const count = () =>
    db.any(sql.type(z.object({ status: z.string(), n: z.number() }))`SELECT status, count(*)::int AS n FROM redundant_runs GROUP BY status ORDER BY status`);
  let byStatus = await count();
  for (let waited = 0; waited < 20 && byStatus.some((row) => row.status === 'pending'); waited++) {
    await sleep(1000);
    byStatus = await count();
  }
  const clientTasks = await db.oneFirst(sql.type(z.object({ n: z.number() }))`
    SELECT count(*)::int AS n FROM tasks WHERE task_type = 'proxy_fetch' AND status = 'completed' AND account_id <> ${PLATFORM_ACCOUNT_ID}`);
  const sampled = byStatus.reduce((sum, row) => sum + row.n, 0);
  return {
    rate,
    client_web_tasks: clientTasks,
    sampled,
    sampled_fraction: clientTasks ? Math.round((sampled / clientTasks) * 10_000) / 10_000 : 0,
    ...Object.fromEntries(byStatus.map((row) => [row.status, row.n])),
  };
}

/**
 * How the client's web tasks spread over the equal fetch solvers (one price, one capacity, no record to
 * tell them apart): the first attempts each served, and Jain's fairness index over them (docs/queue.md,
 * "Sharing work").
 */
async function workSpread(db: Db, clientId: string, solverIds: string[]): Promise<Record<string, unknown>> {
  const rows = await db.any(sql.type(z.object({ solver_id: z.string(), n: z.number() }))`
    SELECT a.solver_id, count(*)::int AS n
    FROM task_attempts a JOIN tasks t ON t.task_id = a.task_id
    WHERE t.account_id = ${clientId} AND a.task_type = 'proxy_fetch' AND a.attempt_number = 1 AND a.solver_id = ANY(${sql.array(solverIds, 'text')})
    GROUP BY a.solver_id`);
  const served = solverIds.map((id) => rows.find((row) => row.solver_id === id)?.n ?? 0);
  return { solvers: solverIds.length, tasks_per_solver: served, jain_index: jainIndex(served) };
}

/**
 * Waits until no workflow runs, as Temporal's visibility counts them (a workflow counts as running until
 * its close is recorded there), or `boundMs` has passed. A phase's clients have their answers before
 * its workflows close (a chat's stream ends, then its dispatch activity and workflow finish), and those
 * closing in the next phase would be counted against it. Returns the seconds waited and the workflows
 * still running at the bound.
 */
async function untilWorkflowsEnd(temporal: Client, boundMs = 180_000): Promise<{ seconds: number; running: number }> {
  const started = Date.now();
  const running = async () => (await temporal.workflow.count('ExecutionStatus="Running"')).count;
  let left = await running();
  while (left > 0 && Date.now() - started < boundMs) {
    await sleep(500);
    left = await running();
  }
  const seconds = Math.round((Date.now() - started) / 100) / 10;
  if (process.env.BENCH_VERBOSE || left > 0) process.stdout.write(`waited ${seconds} s for the running workflows to end${left > 0 ? `; ${left} still running` : ''}\n`);
  return { seconds, running: left };
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

/** The goals of docs/performance.md, checked on the figures of the phases that ran. */
function printGoals(rows: Row[], log: (line: string) => void) {
  const find = (figure: string, concurrency?: number) => rows.find((row) => row.figure.startsWith(figure) && (concurrency === undefined || row.concurrency === concurrency));
  const note = (row: Row | undefined, key: string) => row?.extra?.[key] as number | undefined;
  const goals: { goal: string; figure: number | undefined; met: (value: number) => boolean }[] = [
    { goal: 'web task p50 at concurrency 1 ≤ 2× the ceiling', figure: note(find('web task', 1), 'p50_vs_ceiling'), met: (v) => v <= 2 },
    { goal: 'web task throughput at concurrency 64 ≥ 0.60 of the ceiling', figure: note(find('web task', 64), 'throughput_vs_ceiling'), met: (v) => v >= 0.6 },
    { goal: 'page cache: a hit\'s p50 ≥ 10× faster than the fetch\'s', figure: note(find('page cache: the same scrape'), 'p50_speedup'), met: (v) => v >= 10 },
    { goal: 'work spread over equal web solvers: Jain\'s fairness index ≥ 0.9', figure: note(find('work spread'), 'jain_index'), met: (v) => v >= 0.9 },
    { goal: 'chat TTFT overhead at 32 streams p50 ≤ 15 ms', figure: find('chat: TTFT overhead', 32)?.latency?.p50, met: (v) => v <= 15 },
    { goal: 'chat TTFT overhead at 32 streams p99 ≤ 50 ms', figure: find('chat: TTFT overhead', 32)?.latency?.p99, met: (v) => v <= 50 },
    { goal: 'chunk relay p50 at 32 streams ≤ 2 ms', figure: find('chat: chunk relay', 32)?.latency?.p50, met: (v) => v <= 2 },
    { goal: 'API RSS with 5,000 idle solvers ≤ 300 MB', figure: note(find('scale'), 'rss_mb_5000_idle_solvers'), met: (v) => v <= 300 },
    { goal: 'overload web: throughput / slot capacity ≥ 0.9', figure: note(find('overload web'), 'throughput_vs_capacity'), met: (v) => v >= 0.9 },
    { goal: 'overload web: p99 wait / fair-queue wait ≤ 1.5', figure: note(find('overload web'), 'p99_wait_vs_fair'), met: (v) => v <= 1.5 },
    { goal: 'overload chat: throughput / slot capacity ≥ 0.9', figure: note(find('overload chat'), 'throughput_vs_capacity'), met: (v) => v >= 0.9 },
    { goal: 'overload chat: p99 wait / fair-queue wait ≤ 1.5', figure: note(find('overload chat'), 'p99_wait_vs_fair'), met: (v) => v <= 1.5 },
    // ≈ 0: the waiting tasks add less than one transaction a second to what the service does at rest anyway.
    { goal: 'tasks queued at rest add < 1 database transaction per s', figure: note(find('overload: at rest, tasks queued'), 'added_db_transactions_per_second'), met: (v) => v < 1 },
    { goal: 'refused requests (429) p99 ≤ 50 ms, one client', figure: find('overload: refused', 1)?.latency?.p99, met: (v) => v <= 50 },
    { goal: 'webhooks: one verified delivery per finished task', figure: find('webhooks') && (note(find('webhooks'), 'finished_tasks') ?? 0) - (note(find('webhooks'), 'verified_deliveries') ?? 0), met: (v) => v === 0 },
    { goal: 'ledger exact', figure: find('ledger') && ['accounts_off', 'open_holds_on_finished_tasks', 'double_movements'].reduce((sum, key) => sum + (note(find('ledger'), key) ?? 0), 0), met: (v) => v === 0 },
  ];
  log('');
  log('goals:');
  for (const { goal, figure, met } of goals) {
    if (figure === undefined) continue;
    log(`  ${met(figure) ? 'MET   ' : 'MISSED'} ${goal}: ${figure}`);
  }
}

main().catch((error) => {
  process.stderr.write(`benchmark failed: ${error instanceof Error ? error.stack : String(error)}\n`);
  process.exit(1);
});
