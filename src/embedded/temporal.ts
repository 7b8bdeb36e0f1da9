import fs from 'node:fs';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { processEnvironment } from '../config';
import type { Logger } from '../logger';
import { SEARCH_ATTRIBUTES } from '../temporal/search-attributes';
import { pickPort } from './ports';
import { spawnServer } from './server-process';

export interface EmbeddedTemporalHandle {
  address: string;
  uiUrl: string;
  /** The UI port asked for, when it was taken and the UI serves on another. */
  uiPortTaken?: number;
  stop(): Promise<void>;
}

/** The Temporal CLI: TEMPORAL_CLI, else the copy `scripts/ensure-tools.mjs` installs under .tools/, else PATH. */
export function resolveTemporalCli(rootDir: string, configured?: string): string {
  if (configured) return configured;
  const local = path.join(rootDir, '.tools', 'bin', 'temporal');
  if (fs.existsSync(local)) return local;
  return 'temporal';
}

/**
 * Server settings that differ from the dev server's defaults (docs/performance.md has the figures).
 * - The dev server has one history shard, and each shard reads its transfer queue (the hand-off of every
 *   new workflow or activity task to matching) at most `transferProcessorMaxPollRPS` times a second, 20
 *   by default: a chain of steps then waits ~45 ms per hop. At 200 a hop costs a few ms.
 * - Task queues have 4 partitions by default, which spread a queue over several matching hosts. With
 *   one host they only add forwarding between partitions, and a task stuck on a partition without a
 *   poller waited 4–6 s under load. One partition keeps each queue first-in, first-out.
 */
const DYNAMIC_CONFIG: Record<string, unknown> = {
  'history.transferProcessorMaxPollRPS': 200,
  'matching.numTaskqueueReadPartitions': 1,
  'matching.numTaskqueueWritePartitions': 1,
};

/**
 * The Go runtime's garbage collector, for the server's process (docs/performance.md, "The embedded
 * Temporal server"). With Go's default (`GOGC=100`) the server spends about a ninth of its CPU collecting
 * a live heap of about 75 MB; collecting at five times the live heap instead of twice takes a fifth of
 * the collections, for about 230 MB more heap at its peak. The soft limit keeps a heap that grows from
 * growing fivefold. A value set in the environment wins.
 */
const GO_RUNTIME_ENV: Record<string, string> = { GOGC: '400', GOMEMLIMIT: '768MiB' };

/**
 * Runs the real Temporal dev server (`temporal server start-dev`) with its state in `dir` (SQLite file)
 * and its Web UI. The frontend takes `preferredPort` when free and any free port otherwise, so that
 * several stacks can share one machine. The UI stays where a user looks for it, `uiPort`; only when that
 * port is taken does it serve on another, with a warning (and the handle says so, for the banner).
 */
type TemporalOptions = {
  cli: string;
  dir: string;
  namespace: string;
  logger: Logger;
  preferredPort?: number;
  ui?: boolean;
  /** The UI's port (0: any free port); `ui: false` runs the server without it. */
  uiPort?: number;
};

export async function startEmbeddedTemporal(options: TemporalOptions): Promise<EmbeddedTemporalHandle> {
  // Two stacks starting at the same moment can both find a port free; the loser retries on others.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(attempt === 1 ? options : { ...options, preferredPort: undefined });
    } catch (error) {
      if (attempt >= 3 || !/address already in use/.test(String((error as Error).message))) throw error;
      options.logger.debug({ attempt }, 'temporal port taken meanwhile; retrying on other ports');
    }
  }
}

async function startOnce(options: TemporalOptions): Promise<EmbeddedTemporalHandle> {
  fs.mkdirSync(options.dir, { recursive: true });
  const port = await pickPort(options.preferredPort);
  const uiPort = options.ui === false ? 0 : await pickPort(options.uiPort || undefined);
  const uiPortTaken = options.ui !== false && options.uiPort && uiPort !== options.uiPort ? options.uiPort : undefined;
  const httpPort = await pickPort(undefined);
  const metricsPort = await pickPort(undefined);
  const args = [
    'server',
    'start-dev',
    '--ip',
    '127.0.0.1',
    '--port',
    String(port),
    '--http-port',
    String(httpPort),
    '--metrics-port',
    String(metricsPort),
    '--db-filename',
    path.join(options.dir, 'temporal.sqlite'),
    // WAL with NORMAL sync: durable across process crashes, far fewer fsyncs per workflow step.
    '--sqlite-pragma',
    'journal_mode=wal',
    '--sqlite-pragma',
    'synchronous=1',
    // A page cache of up to 128 MiB (SQLite's default is 2 MiB): once the store outgrew the default, every
    // workflow cost the server about half again as much CPU, reading pages back through the OS.
    '--sqlite-pragma',
    'cache_size=-131072',
    ...Object.entries(DYNAMIC_CONFIG).flatMap(([key, value]) => [
      '--dynamic-config-value',
      `${key}=${JSON.stringify(value)}`,
    ]),
    '--namespace',
    options.namespace,
    '--log-level',
    'warn',
    '--ui-disable-news-fetch',
    ...(options.ui === false ? ['--headless'] : ['--ui-port', String(uiPort)]),
    ...Object.entries(SEARCH_ATTRIBUTES).flatMap(([name, type]) => ['--search-attribute', `${name}=${type}`]),
  ];
  const server = spawnServer(options.cli, args, {
    stopSignal: 'SIGTERM',
    spawn: { env: { ...GO_RUNTIME_ENV, ...processEnvironment() } },
  });
  const exited = server.exited.catch((error: NodeJS.ErrnoException) => {
    if (error.code)
      throw new Error(
        `Could not run the Temporal CLI "${options.cli}" (${error.message}). Run \`node ` +
          `scripts/ensure-tools.mjs\` or set TEMPORAL_CLI.`,
      );
    const output = server.output();
    throw new Error(
      `Temporal dev server exited before it was ready${output.includes('address already in use') ? ' (address already in use)' : ''}:\n${output}`,
    );
  });
  exited.catch(() => undefined);
  const address = `127.0.0.1:${port}`;
  try {
    await Promise.race([waitForFrontend(address, options.namespace), exited]);
  } catch (error) {
    await server.stop();
    throw error;
  }
  options.logger.debug({ address }, 'temporal dev server ready');
  const uiUrl = options.ui === false ? '' : `http://127.0.0.1:${uiPort}`;
  if (uiPortTaken) {
    options.logger.warn(
      { wanted_port: uiPortTaken, ui_url: uiUrl },
      `Temporal UI port ${uiPortTaken} is taken (another stack or program); the UI is at ${uiUrl} ` +
        `for this run: set TEMPORAL_UI_PORT to keep it on a port of your choice`,
    );
  }
  return { address, uiUrl, ...(uiPortTaken ? { uiPortTaken } : {}), stop: server.stop };
}

async function waitForFrontend(address: string, namespace: string, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const connection = await Connection.connect({ address, connectTimeout: 1000 });
      try {
        await connection.workflowService.describeNamespace({ namespace });
        return;
      } finally {
        await connection.close();
      }
    } catch (error) {
      lastError = error;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
  throw new Error(`Temporal dev server at ${address} was not ready within ${timeoutMs} ms: ${String(lastError)}`);
}
