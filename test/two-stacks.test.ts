import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..');

/** `npm start`'s entry point, twice at once on one machine, with different PORT and DATA_DIR. */
function startStack(port: number, dataDir: string) {
  const child = spawn(path.join(ROOT, 'node_modules', '.bin', 'tsx'), [path.join(ROOT, 'src', 'bin', 'stack.ts')], {
    cwd: ROOT,
    env: { ...process.env, PORT: String(port), DATA_DIR: dataDir, LOCAL_SOLVER: 'off', LOG_LEVEL: 'warn', DATABASE_URL: '', TEMPORAL_ADDRESS: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let output = '';
  const ready = new Promise<string>((resolve, reject) => {
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      if (output.includes('Ctrl-C stops everything')) resolve(output);
    });
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.once('exit', (code) => reject(new Error(`stack exited with ${code}:\n${output}`)));
  });
  return { child, ready };
}

const stop = (child: ChildProcess) =>
  new Promise<void>((resolve) => {
    if (child.exitCode !== null) return resolve();
    child.once('exit', () => resolve());
    process.kill(-child.pid!, 'SIGINT');
  });

test('two stacks with different PORT and DATA_DIR start side by side and stop on Ctrl-C', async () => {
  const dirs = [0, 1].map(() => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'marketplace-stack-'));
    fs.chmodSync(dir, 0o755);
    return dir;
  });
  const stacks = [startStack(3611, dirs[0]), startStack(3612, dirs[1])];
  try {
    const banners = await Promise.all(stacks.map((stack) => stack.ready));
    for (const [i, port] of [3611, 3612].entries()) {
      expect(banners[i]).toContain(`http://127.0.0.1:${port}`);
      const health = await fetch(`http://127.0.0.1:${port}/health`);
      expect(health.status).toBe(200);
    }
    const uiUrls = banners.map((banner) => /Temporal UI\s+(\S+)/.exec(banner)?.[1]);
    expect(new Set(uiUrls).size).toBe(2);
  } finally {
    await Promise.all(stacks.map((stack) => stop(stack.child)));
  }
  // Nothing of either stack is left running: no PostgreSQL, no Temporal dev server on their data dirs.
  const processes = execFileSync('ps', ['-eo', 'args']).toString();
  for (const dir of dirs) {
    expect(processes).not.toContain(dir);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}, 180_000);
