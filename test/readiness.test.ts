import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { startApiNode, type ApiNode } from '../src/runtime/api-node';
import { startWorkerNode, type WorkerNode } from '../src/runtime/worker-node';
import { waitFor } from './support/fake-solver';
import { api, testConfig, testEndpoints } from './support/stack';

/**
 * GET /ready against a PostgreSQL of this file's own (the shared test server is never paused): an API
 * node and a worker on it, the PostgreSQL paused (every process of it stopped, as a hung host looks to
 * its clients), resumed, then stopped.
 */
describe('readiness: /ready follows PostgreSQL, /health does not', () => {
  const logger = pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });
  let dir: string;
  let postgres: { url: string; stop(): Promise<void> } | undefined;
  let apiNode: ApiNode | undefined;
  let worker: WorkerNode | undefined;
  let postmaster: number;
  let paused = false;

  const probe = async (url: string) => {
    const started = Date.now();
    const response = await fetch(url, { signal: AbortSignal.timeout(15_000) });
    return { status: response.status, body: (await response.json()) as Record<string, string>, ms: Date.now() - started };
  };
  const ready = () => probe(`${apiNode!.url}/ready`);
  const workerReady = () => probe(worker!.readyUrl!);
  // The postmaster and every process it forked (each backend is a session of its own, so no one group holds them).
  const signalPostgres = (signal: NodeJS.Signals) => {
    const children = execFileSync('ps', ['-o', 'pid=', '--ppid', String(postmaster)]).toString().split('\n').map(Number).filter(Boolean);
    for (const pid of [postmaster, ...children]) process.kill(pid, signal);
  };

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(process.env.TEST_DATA_DIR ?? os.tmpdir(), 'readiness-'));
    fs.chmodSync(dir, 0o755);
    postgres = await startOwnPostgres(path.join(dir, 'postgres'));
    postmaster = Number(fs.readFileSync(path.join(dir, 'postgres', 'cluster', 'postmaster.pid'), 'utf8').split('\n')[0]);
    const config = testConfig({ WORKER_METRICS_PORT: '0', METRICS_TOKEN: 'readiness-metrics-token' });
    const { temporalAddress } = testEndpoints();
    apiNode = await startApiNode({ config, logger, databaseUrl: postgres.url, temporalAddress, port: 0 });
    worker = await startWorkerNode({ config, logger, databaseUrl: postgres.url, temporalAddress });
  }, 120_000);

  afterAll(async () => {
    if (paused) signalPostgres('SIGCONT');
    await worker?.close();
    await apiNode?.close();
    await postgres?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }, 120_000);

  test('ready while every part answers: each part named, on the API node (and /readyz) and on the worker listener', async () => {
    const answer = await ready();
    expect(answer).toMatchObject({ status: 200, body: { status: 'ready', postgres: 'ok', temporal: 'ok', worker: 'polling', node_id: apiNode!.nodeId } });
    for (const value of Object.values(answer.body)) expect(typeof value).toBe('string');
    expect((await probe(`${apiNode!.url}/readyz`)).body.status).toBe('ready');
    expect(await workerReady()).toMatchObject({ status: 200, body: { status: 'ready', postgres: 'ok', temporal: 'ok', worker: 'polling' } });
    // The worker's listener answers liveness too, without the metrics token that /metrics needs.
    expect((await probe(worker!.readyUrl!.replace(/\/ready$/, '/health'))).status).toBe(200);
    expect((await fetch(worker!.metricsUrl!)).status).toBe(401);
  });

  test('a paused PostgreSQL makes /ready 503 within seconds, /health stays 200, and /ready is 200 again once it resumes', async () => {
    signalPostgres('SIGSTOP');
    paused = true;
    try {
      const first = await ready();
      expect(first).toMatchObject({ status: 503, body: { status: 'not_ready', postgres: 'timed_out', temporal: 'ok', worker: 'polling' } });
      expect(first.ms).toBeLessThan(5000);
      // A second probe while the first check still hangs joins it: as quick, as unready.
      const second = await ready();
      expect(second).toMatchObject({ status: 503, body: { postgres: 'timed_out' } });
      expect(second.ms).toBeLessThan(5000);
      const fromWorker = await workerReady();
      expect(fromWorker).toMatchObject({ status: 503, body: { status: 'not_ready', postgres: 'timed_out', temporal: 'ok', worker: 'polling' } });
      expect(fromWorker.ms).toBeLessThan(5000);
      const health = await probe(`${apiNode!.url}/health`);
      expect(health).toMatchObject({ status: 200, body: { status: 'ok' } });
      expect(health.ms).toBeLessThan(1000);
    } finally {
      signalPostgres('SIGCONT');
      paused = false;
    }
    const resumed = Date.now();
    await waitFor(async () => (await ready()).status === 200, 15_000, 200);
    await waitFor(async () => (await workerReady()).status === 200, 15_000, 200);
    expect(Date.now() - resumed).toBeLessThan(15_000);
    expect((await ready()).body).toMatchObject({ status: 'ready', postgres: 'ok' });
  }, 60_000);

  test('a stopped PostgreSQL makes /ready 503 within seconds while /health stays 200', async () => {
    await postgres!.stop();
    postgres = undefined;
    const answer = await waitFor(async () => {
      const probed = await ready();
      return probed.status === 503 ? probed : undefined;
    }, 10_000, 200);
    expect(answer.body).toMatchObject({ status: 'not_ready', temporal: 'ok', worker: 'polling' });
    expect(['failed', 'timed_out']).toContain(answer.body.postgres);
    expect(answer.ms).toBeLessThan(5000);
    expect((await probe(`${apiNode!.url}/health`)).status).toBe(200);
  }, 60_000);
});

/** Runs test/support/postgres-process.ts: a PostgreSQL under `dir`, stopped by stop(). */
async function startOwnPostgres(dir: string): Promise<{ url: string; stop(): Promise<void> }> {
  const root = path.resolve(__dirname, '..');
  const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', path.join(root, 'test', 'support', 'postgres-process.ts'), dir], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let output = '';
  const url = await new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const line = output.split('\n').find((entry) => entry.startsWith('{"url"'));
      if (line) resolve((JSON.parse(line) as { url: string }).url);
    });
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('exit', (code) => reject(new Error(`PostgreSQL process exited with ${code}:\n${output}`)));
  });
  return {
    url,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
    },
  };
}
