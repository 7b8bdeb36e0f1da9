import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { npmScriptNodeArgs } from '../scripts/npm-script';
import { waitFor } from './support/fake-solver';

const ROOT = path.resolve(__dirname, '..');
/** Each stack's Temporal UI on a port of its own, as TEMPORAL_UI_PORT says (the default, 8233, would be the first's only). */
const uiPortOf = (port: number) => port + 1000;

/** `npm start`'s entry point, twice at once on one machine, with different PORT, TEMPORAL_UI_PORT and DATA_DIR. */
function startStack(port: number, dataDir: string, localSolver: 'on' | 'off') {
  const child = spawn(process.execPath, npmScriptNodeArgs('start'), {
    cwd: ROOT,
    env: { ...process.env, PORT: String(port), TEMPORAL_UI_PORT: String(uiPortOf(port)), DATA_DIR: dataDir, LOCAL_SOLVER: localSolver, LOG_LEVEL: 'warn', DATABASE_URL: '', TEMPORAL_ADDRESS: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let output = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const ready = new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('Ctrl-C stops everything')) resolve(output);
    });
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('exit', (code) => reject(new Error(`stack exited with ${code}:\n${output}`)));
  });
  return { child, ready, exited, output: () => output };
}

// As a terminal's Ctrl-C (SIGINT) or its closing (SIGHUP): the signal reaches the whole foreground process group.
const signalGroup = (child: ChildProcess, signal: NodeJS.Signals) => {
  if (child.exitCode === null) process.kill(-child.pid!, signal);
};

/** A fresh DATA_DIR that PostgreSQL's system user can enter when the tests run as root. */
function dataDir() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'marketplace-stack-'));
  fs.chmodSync(dir, 0o755);
  return dir;
}

/** Whether any process still runs on one of these data directories (the stacks' embedded servers name them). */
function runningOn(dirs: string[]) {
  const processes = execFileSync('ps', ['-eo', 'args']).toString();
  return dirs.some((dir) => processes.includes(dir));
}

/** Whatever a failed start or stop left behind must not outlive the test. */
function removeStacks(dirs: string[]) {
  for (const dir of dirs) {
    const file = path.join(dir, 'stack.json');
    const pid = fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, 'utf8')).pid as number) : undefined;
    if (pid && isAlive(pid)) process.kill(pid, 'SIGKILL');
    spawnSync('pkill', ['-KILL', '-f', dir]);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

test('two stacks with different PORT and DATA_DIR start side by side and stop cleanly on Ctrl-C or a closed terminal', async () => {
  const dirs = [dataDir(), dataDir()];
  try {
    // The second runs the bundled solver, whose Chromium must also stop with the stack, and quietly.
    const stacks = [startStack(3611, dirs[0], 'off'), startStack(3612, dirs[1], 'on')];
    try {
      const banners = await Promise.all(stacks.map((stack) => stack.ready));
      for (const [i, port] of [3611, 3612].entries()) {
        expect(banners[i]).toContain(`http://127.0.0.1:${port}`);
        const health = await fetch(`http://127.0.0.1:${port}/health`);
        expect(health.status).toBe(200);
        // The market console, beside the API (docs/console.md).
        const consoleUrl = /Console\s+(\S+)/.exec(banners[i])?.[1];
        expect(consoleUrl).toBe(`http://127.0.0.1:${port}/console`);
        const page = await fetch(consoleUrl!);
        expect([page.status, page.headers.get('content-security-policy')]).toEqual([200, expect.stringContaining("default-src 'self'")]);
      }
      const uiUrls = banners.map((banner) => /Temporal UI\s+(\S+)/.exec(banner)?.[1]);
      expect(uiUrls).toEqual([3611, 3612].map((port) => `http://127.0.0.1:${uiPortOf(port)}`));
    } finally {
      signalGroup(stacks[0].child, 'SIGINT');
      signalGroup(stacks[1].child, 'SIGHUP');
    }
    // Either way the stack, and everything it runs, stops in order (API, worker, then its servers) and exits 0,
    // with nothing logged at warn or above and nothing left running.
    expect(await Promise.all(stacks.map((stack) => stack.exited))).toEqual([0, 0]);
    await waitFor(() => !runningOn(dirs), 60_000, 250);
    // The one without a solver of its own says, once, that its platform account cannot pay the checks
    // (README, "Deployment"); the one with it funds the account. Nothing else.
    const logged = stacks.map((stack) => stack.output().split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line) as { msg: string }));
    expect(logged[0]!.map((entry) => entry.msg)).toEqual([expect.stringMatching(/^the platform account has 0 points available/)]);
    expect(logged[1]).toEqual([]);
  } finally {
    removeStacks(dirs);
  }
}, 180_000);

test('Ctrl-C while the stack is still starting stops what has already started', async () => {
  const dir = dataDir();
  try {
    const stack = startStack(3613, dir, 'off');
    stack.ready.catch(() => undefined);
    // Its Temporal dev server is starting (PostgreSQL already runs), long before the stack is ready.
    await waitFor(() => execFileSync('ps', ['-eo', 'args']).toString().split('\n').some((line) => line.includes('start-dev') && line.includes(dir)), 60_000, 50);
    signalGroup(stack.child, 'SIGINT');
    expect(await stack.exited).toBe(0);
    // The embedded servers run in their own process groups, so the terminal's signal does not reach them.
    await waitFor(() => !runningOn([dir]), 30_000, 250);
  } finally {
    removeStacks([dir]);
  }
}, 120_000);

function isAlive(pid: number) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
