import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'slonik';
import { z } from 'zod';
import { spawn, type ChildProcess } from 'node:child_process';
import { auditLedger } from '../src/db/ledger';
import { createDb } from '../src/db/pool';
import { pickPort } from '../src/embedded/ports';
import { waitFor } from './support/fake-solver';
import { spawnNode, type NodeProcess } from './support/processes';
import { ADMIN_KEY, api, QUIET_TRUST_ENV, registerAccount } from './support/stack';

const TASKS = 20;

/** A site whose pages are answered only once released: the solver holds every task it fetches until then. */
async function startHoldingSite() {
  const held: http.ServerResponse[] = [];
  const hits = new Map<string, number>();
  let holding = true;
  const answer = (res: http.ServerResponse) => {
    if (res.writableEnded || res.destroyed) return;
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
    res.end('<!doctype html><html><head><title>Drill</title></head><body><h1>Drill</h1></body></html>');
  };
  const server = http.createServer((req, res) => {
    hits.set(req.url ?? '/', (hits.get(req.url ?? '/') ?? 0) + 1);
    if (holding) held.push(res);
    else answer(res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    hits,
    release() {
      holding = false;
      for (const res of held.splice(0)) answer(res);
    },
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

/** The processes of the test's own servers (PostgreSQL, Temporal): every process whose command line names `dir`. */
function processGroupsUnder(dir: string): number[] {
  const groupOf = (stat: string) => Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]);
  // Never this test's own group (its runner's).
  const own = groupOf(fs.readFileSync('/proc/self/stat', 'utf8'));
  const groups = new Set<number>();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (!fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(dir)) continue;
      // Field 5 of stat is the process group (after the command in parentheses).
      const group = groupOf(fs.readFileSync(`/proc/${entry}/stat`, 'utf8'));
      if (group !== own && group > 1) groups.add(group);
    } catch {
      // Gone meanwhile.
    }
  }
  return [...groups];
}

/**
 * The crash drill (docs/decisions.md, "Platform faults"): the whole stack (PostgreSQL, Temporal, the API
 * node and the worker) SIGKILLed with tasks in flight on one honest solver, then started again. The
 * solver reconnects; every task completes, and the loss is counted against nobody.
 */
describe('the whole stack SIGKILLed with tasks in flight on one solver', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'crash-drill-'));
  // Run by root, PostgreSQL runs as another user, who must reach its directory.
  fs.chmodSync(dir, 0o755);
  let infra: { databaseUrl: string; temporalAddress: string; stop(): Promise<void> };
  let port: number;
  let apiNode: NodeProcess | undefined;
  let worker: NodeProcess | undefined;
  let solver: NodeProcess | undefined;
  let site: Awaited<ReturnType<typeof startHoldingSite>>;
  const base = () => `http://127.0.0.1:${port}`;

  /** This test's own PostgreSQL and Temporal, their data kept under `dir` across a kill (test/support/own-servers.ts). */
  async function startServers() {
    const child: ChildProcess = spawn(process.execPath, ['--import', 'tsx', path.join(__dirname, 'support/own-servers.ts'), dir], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    const output: string[] = [];
    child.stderr?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
    const endpoints = await new Promise<{ databaseUrl: string; temporalAddress: string }>((resolve, reject) => {
      let text = '';
      child.stdout?.on('data', (chunk: Buffer) => {
        text += chunk.toString();
        const line = text.split('\n').find((entry) => entry.startsWith('{'));
        if (line && text.includes('\n')) resolve(JSON.parse(line));
      });
      child.once('exit', (code) => reject(new Error(`the servers exited (${code}): ${output.join('')}`)));
    });
    return {
      ...endpoints,
      stop: () =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once('exit', () => resolve());
          child.kill('SIGTERM');
        }),
    };
  }

  const stackEnv = () => ({
    DATABASE_URL: infra.databaseUrl,
    TEMPORAL_ADDRESS: infra.temporalAddress,
    ADMIN_API_KEY: ADMIN_KEY,
    HOST: '127.0.0.1',
    PORT: String(port),
    LOCAL_SOLVER: 'off',
    ALLOW_PRIVATE_NETWORKS: 'true',
    ...QUIET_TRUST_ENV,
    WORKFLOW_BUNDLE_PATH: process.env.WORKFLOW_BUNDLE_PATH ?? '',
    API_RUNS_WORKFLOWS: 'false',
  });
  // Each start a new node id, as `npm start` gives its node.
  const startStack = async () => {
    [apiNode, worker] = await Promise.all([spawnNode('api', stackEnv(), /api listening/, 120_000), spawnNode('worker', stackEnv(), /temporal worker started/, 120_000)]);
  };

  beforeAll(async () => {
    site = await startHoldingSite();
    port = await pickPort(undefined);
    infra = await startServers();
    await startStack();
  }, 240_000);

  afterAll(async () => {
    await Promise.all([solver?.kill(), apiNode?.kill(), worker?.kill()]);
    await infra?.stop().catch(() => undefined);
    await site?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test(`${TASKS} tasks in flight, everything killed and started again: the solver reconnects and all ${TASKS} complete, none held against it`, async () => {
    const solverAccount = await registerAccount(base());
    solver = await spawnNode(
      'solver',
      {
        ...stackEnv(),
        SOLVER_URL: base(),
        SOLVER_API_KEY: solverAccount.api_key,
        SOLVER_TASK_TYPES: 'proxy_fetch',
        SOLVER_MAX_CONCURRENT: String(TASKS),
        SOLVER_RECONNECT_MAX_MS: '1000',
      },
      /connected to the marketplace/,
    );
    const client = await registerAccount(base(), '1000');
    const taskIds: string[] = [];
    for (let i = 0; i < TASKS; i++) {
      const created = await api(base(), 'POST', '/v1/tasks', { headers: client.auth, body: { task_type: 'proxy_fetch', payload: { url: `${site.baseUrl}/page/${i}` }, timeout_seconds: 600 } });
      expect(created.status).toBe(200);
      taskIds.push(created.json.task_id);
    }
    // Every task is in flight: its solver is fetching its page.
    await waitFor(() => site.hits.size === TASKS, 60_000);

    const groups = processGroupsUnder(dir);
    expect(groups.length).toBeGreaterThanOrEqual(2);
    await Promise.all([apiNode!.kill('SIGKILL'), worker!.kill('SIGKILL')]);
    for (const group of groups) {
      try {
        process.kill(-group, 'SIGKILL');
      } catch {
        // Gone already.
      }
    }
    // Gone, and reaped: PostgreSQL will not start while the pid its cluster names still exists.
    const postmaster = Number(fs.readFileSync(path.join(dir, 'postgres/cluster/postmaster.pid'), 'utf8').split('\n')[0]);
    const exists = (pid: number) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    await waitFor(() => processGroupsUnder(dir).length === 0 && !exists(postmaster), 60_000);
    site.release();

    infra = await startServers();
    await startStack();
    const ended = await waitFor(async () => {
      const records = await Promise.all(taskIds.map(async (taskId) => (await api(base(), 'GET', `/v1/tasks/${taskId}`, { headers: client.auth }).catch(() => null))?.json));
      return records.every((record) => record && ['completed', 'failed', 'timed_out', 'cancelled'].includes(record.status)) ? records : undefined;
    }, 240_000, 1000);
    const statuses = ended.map((record) => [record.status, record.error?.message ?? null]);
    expect(statuses).toEqual(taskIds.map(() => ['completed', null]));
    for (const record of ended) {
      expect(record.solver_id).toBe(solverAccount.account_id);
      // The attempt lost in the crash, then the one that completed, both on the one solver.
      expect(record.attempts.map((attempt: { outcome: string }) => attempt.outcome).at(-1)).toBe('completed');
      expect(record.attempts.filter((attempt: { outcome: string }) => attempt.outcome !== 'lost' && attempt.outcome !== 'completed')).toEqual([]);
    }

    // Nothing of the crash is counted against the solver: no failed attempt, its success rate whole.
    const stats = await api(base(), 'GET', '/v1/solver/stats', { headers: { Authorization: `Bearer ${solverAccount.api_key}` } });
    expect(stats.json).toMatchObject({ completed: TASKS, failed: 0, attempts: TASKS, success_rate: 1 });
    expect(stats.json.trust.reputation).toEqual([expect.objectContaining({ task_type: 'proxy_fetch', failures: 0 })]);
    const db = await createDb(infra.databaseUrl);
    try {
      const lost = await db.oneFirst(sql.type(z.object({ n: z.number() }))`SELECT count(*)::int AS n FROM task_attempts WHERE outcome = 'lost'`);
      expect(lost).toBeGreaterThanOrEqual(TASKS);
      expect(await auditLedger(db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
    } finally {
      await db.end();
    }
  }, 600_000);
});
