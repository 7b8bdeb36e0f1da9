import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { npmScriptNodeArgs } from '../scripts/npm-script';
import { waitFor } from './support/fake-solver';
import { freePort } from './support/stack';

/**
 * The README's quick start as a newcomer runs it, offline: `npm start`'s entry point started with the
 * variables the README's start line sets, the toy model beside it, then the "Try it" blocks run by bash
 * as written (in a folder of their own holding the `.env` they read), and the own-solver block with the
 * Python SDK in a fresh venv. Only the ports are changed, to free ones.
 */

const ROOT = path.resolve(__dirname, '..');
const README = fs.readFileSync(path.join(ROOT, 'README.md'), 'utf8');

/** The shell block under the marker `<!-- readme-test: NAME -->`. */
function block(name: string): string {
  const found = new RegExp(`<!-- readme-test: ${name} -->\\n\`\`\`sh\\n([\\s\\S]*?)\\n\`\`\``).exec(README);
  if (!found) throw new Error(`README.md has no block marked readme-test: ${name}`);
  return found[1]!;
}

/** The README's line that starts the stack for chat, as `VAR=value … npm start`. */
function chatStartLine(): Record<string, string> {
  const line = /^((?:[A-Z_]+=\S+ )+)npm start$/m.exec(README.slice(README.indexOf('**Chat.**')));
  if (!line) throw new Error('README.md has no `VAR=value npm start` line for chat');
  return Object.fromEntries(line[1]!.trim().split(' ').map((word) => word.split('=') as [string, string]));
}

let ports: { api: number; site: number; model: number };
const onPorts = (text: string) =>
  text
    .replaceAll('127.0.0.1:3000', `127.0.0.1:${ports.api}`)
    .replaceAll('127.0.0.1:8001', `127.0.0.1:${ports.model}`)
    .replaceAll('127.0.0.1:8000', `127.0.0.1:${ports.site}`)
    .replaceAll('http.server 8000', `http.server ${ports.site}`);

const groups: ChildProcess[] = [];
/** A process in a group of its own, so that it and whatever it leaves running stop together. */
function spawnGroup(command: string, args: string[], options: { cwd: string; env?: Record<string, string> }) {
  const child = spawn(command, args, { cwd: options.cwd, env: { ...process.env, ...options.env }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  groups.push(child);
  let output = '';
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, exited, output: () => output };
}
const stopGroup = (child: ChildProcess, signal: NodeJS.Signals = 'SIGINT') => {
  try {
    process.kill(-child.pid!, signal);
  } catch {
    // Already gone.
  }
};

let workDir: string;
let dataDir: string;
let stack: ReturnType<typeof spawnGroup>;

beforeAll(async () => {
  ports = { api: await freePort(), site: await freePort(), model: await freePort() };
  workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'readme-'));
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'readme-data-'));
  // PostgreSQL's system user enters DATA_DIR when the tests run as root.
  fs.chmodSync(dataDir, 0o755);
  const adminKey = crypto.randomBytes(24).toString('hex');
  // The second terminal is "in the same folder": its .env and the SDK's sources, not this checkout's .env.
  fs.writeFileSync(path.join(workDir, '.env'), `ADMIN_API_KEY=${adminKey}\n`);
  fs.mkdirSync(path.join(workDir, 'sdk'));
  fs.symlinkSync(path.join(ROOT, 'sdk', 'python'), path.join(workDir, 'sdk', 'python'));

  const model = spawnGroup(process.execPath, [...npmScriptNodeArgs('toy-model'), String(ports.model)], { cwd: ROOT });
  await waitFor(() => model.output().includes('/v1'), 30_000);
  const env = Object.fromEntries(Object.entries(chatStartLine()).map(([name, value]) => [name, onPorts(value)]));
  expect(env).toMatchObject({ ALLOW_PRIVATE_NETWORKS: 'true', CHAT_MODELS: 'gpt-4o' });
  stack = spawnGroup(process.execPath, npmScriptNodeArgs('start'), {
    cwd: ROOT,
    env: { ...env, ADMIN_API_KEY: adminKey, PORT: String(ports.api), DATA_DIR: dataDir, LOG_LEVEL: 'warn', DATABASE_URL: '', TEMPORAL_ADDRESS: '', LOCAL_SOLVER: 'on' },
  });
  await Promise.race([
    waitFor(() => stack.output().includes('Ctrl-C stops everything'), 170_000, 200),
    stack.exited.then((code) => {
      throw new Error(`npm start exited with ${code}:\n${stack.output()}`);
    }),
  ]);
  expect(stack.output()).toContain(`http://127.0.0.1:${ports.api}`);
}, 200_000);

afterAll(async () => {
  for (const child of groups.reverse()) stopGroup(child);
  await stack?.exited;
  for (const child of groups) if (child.exitCode === null) stopGroup(child, 'SIGKILL');
  spawnSync('pkill', ['-KILL', '-f', dataDir]);
  // The quick start leaves its page server running in the reader's terminal, a background job that
  // SIGINT does not reach: stopped here by its port.
  if (ports) spawnSync('pkill', ['-f', `http.server ${ports.site} `]);
  for (const dir of [workDir, dataDir]) if (dir) fs.rmSync(dir, { recursive: true, force: true });
}, 60_000);

test('"Try it" runs offline as written: a local page fetched and screenshotted, a search, a chat, the balance in strings', async () => {
  const script = `set -eo pipefail\n${onPorts(block('try-web'))}\necho\n${onPorts(block('try-chat'))}\n`;
  const run = spawnGroup('bash', ['-c', script], { cwd: workDir });
  const code = await run.exited;
  const output = run.output();
  expect({ code, output }).toEqual({ code: 0, output: expect.any(String) });
  expect(output).toContain('"api_key":"tmk_');
  expect(output).toContain('"deposited_points":"100"');
  expect(output).toContain('Hello from this machine');
  expect(output).toMatch(/"results":\[\{"url":"local-index:/);
  // The toy model multiplied, through the bundled solver and the service.
  expect(output).toContain('408');
  expect(output).toContain('"object":"chat.completion"');
  const shot = fs.readFileSync(path.join(workDir, 'shot.png'));
  expect(shot.subarray(1, 4).toString('latin1')).toBe('PNG');
  // The balance is the last object with the four amounts (the deposit's answer has them too).
  const balance = JSON.parse([...output.matchAll(/\{"account_id":[^{}]*"lifetime_spent_points":[^{}]*\}/g)].pop()![0]) as Record<string, unknown>;
  expect(Object.values(balance).every((value) => typeof value === 'string')).toBe(true);
  expect(Number(balance.lifetime_spent_points)).toBeGreaterThan(0);
}, 120_000);

test('"Your own solver in five minutes" runs as written: the Python SDK in a venv passes its self-test on the local page', async () => {
  const run = spawnGroup('bash', ['-c', `set -eo pipefail\n${onPorts(block('own-solver'))}\n`], { cwd: workDir });
  const results = () =>
    run
      .output()
      .split('\n')
      .filter((line) => line.startsWith('{'))
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .filter((event) => event.event === 'test_result');
  await Promise.race([
    waitFor(() => results().length === 2, 170_000, 250),
    run.exited.then((code) => {
      throw new Error(`the own-solver block exited with ${code}:\n${run.output()}`);
    }),
  ]);
  expect(results().map((event) => [event.task_type, event.passed])).toEqual([
    ['proxy_fetch', true],
    ['web_search', true],
  ]);
  stopGroup(run.child);
  expect(await run.exited).toBe(0);
}, 200_000);
