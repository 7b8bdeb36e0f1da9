import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { npmScriptNodeArgs } from '../../scripts/npm-script';
import { onShutdown } from '../../src/bin/shutdown';
import type { Config } from '../../src/config';
import { createDb } from '../../src/db/pool';
import { pickPort } from '../../src/embedded/ports';
import type { Logger } from '../../src/logger';
import { startInfrastructure } from '../../src/runtime/infrastructure';

const ROOT = path.resolve(__dirname, '../..');

export interface Service {
  child: ChildProcess;
  output: string[];
  stop(): Promise<void>;
  rssMb(): number;
}

/**
 * Starts `npm run <entry>`'s node process itself (tsx loaded in-process, so the pid is the server's).
 * BENCH_NODE_FLAGS adds node flags to both services, e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof` to profile them.
 */
export async function startService(entry: 'api' | 'worker', env: Record<string, string>, ready: RegExp | (() => Promise<boolean>)): Promise<Service> {
  const child = spawn(process.execPath, [...(process.env.BENCH_NODE_FLAGS?.split(/\s+/).filter(Boolean) ?? []), ...npmScriptNodeArgs(entry)], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const output: string[] = [];
  await new Promise<void>((resolve, reject) => {
    // A worker bundling its workflows on a machine busy with other work can take minutes.
    const timer = setTimeout(() => reject(new Error(`${entry} did not start:\n${output.join('')}`)), 180_000);
    const onData = (chunk: Buffer) => {
      output.push(chunk.toString());
      if (output.length > 200) output.shift();
      if (ready instanceof RegExp && ready.test(chunk.toString())) {
        clearTimeout(timer);
        resolve();
      }
    };
    if (typeof ready === 'function') {
      const poll = async () => {
        if (await ready().catch(() => false)) {
          clearTimeout(timer);
          resolve();
        } else if (child.exitCode === null) setTimeout(poll, 200);
      };
      void poll();
    }
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => reject(new Error(`${entry} exited (${code}):\n${output.join('')}`)));
  });
  return {
    child,
    output,
    rssMb: () => {
      const status = fs.readFileSync(`/proc/${child.pid}/status`, 'utf8');
      const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
      return Math.round(kb / 102.4) / 10;
    },
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        child.once('exit', () => {
          clearTimeout(timer);
          resolve();
        });
        child.kill('SIGTERM');
      }),
  };
}

export const ADMIN_KEY = 'bench-admin-key';

/** What every benchmark stack runs with: no bundled solver, pages on 127.0.0.1 allowed, and no per-address limits. */
export const BENCH_STACK_ENV = {
  ADMIN_API_KEY: ADMIN_KEY,
  LOCAL_SOLVER: 'off',
  ALLOW_PRIVATE_NETWORKS: 'true',
  RATE_LIMIT_PER_MINUTE: '100000000',
  // The simulated clients and solvers all come from 127.0.0.1.
  REGISTER_LIMIT_PER_HOUR: '100000000',
  SOLVER_CONNECT_LIMIT_PER_MINUTE: '100000000',
  UNAUTHENTICATED_LIMIT_PER_MINUTE: '100000000',
  HOST: '127.0.0.1',
};

/**
 * What a run started, stopped in reverse order once: at its end, or at Ctrl-C mid-run (the embedded
 * servers run in their own process groups and would otherwise outlive the run, holding their ports and
 * the data directory, which goes too).
 */
export function runStops(logger: Logger, dataDir: string) {
  const stops: (() => Promise<void>)[] = [];
  let stopping: Promise<void> | undefined;
  const stopAll = () =>
    (stopping ??= (async () => {
      for (const stop of stops.reverse()) await stop().catch(() => undefined);
      fs.rmSync(dataDir, { recursive: true, force: true });
    })());
  onShutdown(logger, stopAll, ['SIGINT', 'SIGTERM', 'SIGHUP']);
  return { stops, stopAll };
}

/**
 * A run's own data directory and its stack's environment. The solvers get client work at once: no
 * probation, canaries or redundant runs in the measured run.
 */
export function measuredRunEnv(name: string) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `marketplace-bench-${name}-`));
  fs.chmodSync(dataDir, 0o755);
  return { dataDir, env: { DATA_DIR: dataDir, ...BENCH_STACK_ENV, CANARY_EVERY_TASKS: '0', TRUST_PROBATION_CANARIES: '0', REDUNDANT_RUN_FRACTION: '0', VERIFICATION_START_FRACTION: '0' } };
}

/** PostgreSQL and Temporal, a worker and an API node (each its own process) and a pool, stopped with the run. */
export async function startStack(config: Config, env: Record<string, string>, logger: Logger, stops: (() => Promise<void>)[]) {
  const infra = await startInfrastructure(config, logger);
  stops.push(infra.stop);
  const stackEnv = { ...env, DATABASE_URL: infra.databaseUrl, TEMPORAL_ADDRESS: infra.temporalAddress };
  const port = await pickPort(undefined);
  const base = `http://127.0.0.1:${port}`;
  const services: Service[] = [];
  stops.push(async () => {
    for (const service of services.reverse()) await service.stop();
  });
  const worker = await startService('worker', { ...stackEnv, LOG_LEVEL: 'info' }, /temporal worker started/);
  services.push(worker);
  const api = await startService('api', { ...stackEnv, PORT: String(port), NODE_ID: 'bench-api' }, async () => (await fetch(`${base}/health`)).ok);
  services.push(api);
  const db = await createDb(infra.databaseUrl);
  stops.push(() => db.end());
  return { base, worker, api, db };
}

/** Runs a benchmark's `main` and exits with its outcome (its stack stopped by then), the error's stack on failure. */
export function runMain(main: () => Promise<void>) {
  main().then(
    () => process.exit(0),
    (error) => {
      process.stderr.write(`${error instanceof Error ? error.stack : String(error)}\n`);
      process.exit(1);
    },
  );
}
