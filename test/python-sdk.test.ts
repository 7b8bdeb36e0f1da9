import { execFileSync, spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import WebSocket from 'ws';
import { startHoldingProxy, type HoldingProxy } from './support/holding-proxy';
import { waitFor } from './support/fake-solver';
import { api, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * The Python solver SDK (sdk/python): its own pytest suite, then its example solver against the real
 * stack: it registers, passes test mode, takes fetch and search tasks, reports an error with its own
 * type, reconnects after a dropped connection, drains on SIGTERM, and stops for good on 4001.
 */

const ROOT = path.resolve(__dirname, '..');
const PYTHON = path.join(ROOT, '.tools', 'bin', 'python');
const EXAMPLE = path.join(ROOT, 'sdk', 'python', 'examples', 'example_solver.py');

let stack: TestStack;
let site: { url: string; release: () => void; slowRequested: Promise<void>; close: () => Promise<void> };
let proxy: HoldingProxy;

/** Pages the example solver fetches: an article, and one that answers only when the test says so. */
async function startSite() {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let requested!: () => void;
  const slowRequested = new Promise<void>((resolve) => (requested = resolve));
  const server = http.createServer((req, res) => {
    if (req.url === '/slow') {
      requested();
      void released.then(() => res.end('<html><head><title>Slow</title></head><body><p>At last.</p></body></html>'));
      return;
    }
    res.setHeader('content-type', 'text/html; charset=utf-8');
    res.end('<html><head><title>Harbour notes</title></head><body><h1>Harbour notes</h1><p>The harbour master logs every ship.</p></body></html>');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    release,
    slowRequested,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The example solver as a child process; its stdout is one JSON event per line. */
class Example {
  readonly events: Record<string, any>[] = [];
  readonly exited: Promise<number | null>;
  stderr = '';
  private readonly child: ChildProcessWithoutNullStreams;

  constructor(args: string[]) {
    this.child = spawn(PYTHON, [EXAMPLE, ...args], { cwd: ROOT, env: { ...process.env, LOG_LEVEL: 'INFO' } });
    let buffered = '';
    this.child.stdout.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      const lines = buffered.split('\n');
      buffered = lines.pop()!;
      for (const line of lines) if (line.trim()) this.events.push(JSON.parse(line));
    });
    this.child.stderr.on('data', (chunk: Buffer) => {
      this.stderr += chunk.toString();
    });
    this.exited = new Promise((resolve) => this.child.on('exit', (code) => resolve(code)));
  }

  event(name: string, match: (event: Record<string, any>) => boolean = () => true, timeoutMs = 30_000) {
    return waitFor(() => this.events.find((event) => event.event === name && match(event)), timeoutMs, 50).catch((error) => {
      throw new Error(`${error.message}: no "${name}" event; events ${JSON.stringify(this.events)}; stderr:\n${this.stderr.slice(-3000)}`);
    });
  }

  signal(name: NodeJS.Signals) {
    this.child.kill(name);
  }
}

beforeAll(async () => {
  // The SDK, websockets and pytest, from PyPI into .tools/ (skipped when already current).
  execFileSync('node', [path.join(ROOT, 'scripts', 'ensure-tools.mjs'), '--python-sdk'], { cwd: ROOT, stdio: 'inherit', timeout: 300_000 });
  // Default heartbeat and acceptance times: a busy CI machine must not drop the example's connection.
  stack = await startTestStack({ env: { ATTEMPT_TIMEOUT_SECONDS: '20' } });
  site = await startSite();
  proxy = await startHoldingProxy(new URL(stack.url).host);
}, 320_000);

afterAll(async () => {
  site?.release();
  await proxy?.close();
  await site?.close();
  await stack?.close();
});

test('the SDK\'s own pytest suite passes', () => {
  let output: string;
  try {
    output = execFileSync(PYTHON, ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', path.join(ROOT, 'sdk', 'python', 'tests')], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
  } catch (error) {
    throw new Error(`pytest failed:\n${(error as { stdout?: string }).stdout ?? error}`);
  }
  expect(output).toMatch(/\d+ passed/);
  expect(output).not.toMatch(/failed|error/);
});

test('the SDK and its example type-check with mypy --strict', () => {
  try {
    execFileSync(PYTHON, ['-m', 'mypy', '--strict', '--no-incremental', 'src/marketplace_solver', 'examples/example_solver.py'], { cwd: path.join(ROOT, 'sdk', 'python'), encoding: 'utf8', timeout: 180_000 });
  } catch (error) {
    throw new Error(`mypy found problems:\n${(error as { stdout?: string }).stdout ?? error}`);
  }
});

test('the example solver registers, passes test mode, does fetch and search tasks, reports errors, reconnects, drains, and stops for good on 4001', async () => {
  const viaProxy = `http://${proxy.address}`;
  const example = new Example(['--url', viaProxy, '--register', '--price', '0.5', '--self-test', '--self-test-url', `${site.url}/`, '--allow-private-networks', '--grace', '20']);
  const registered = await example.event('registered');
  const solverAuth = { Authorization: `Bearer ${registered.api_key}` };
  const connected = await example.event('connected');
  expect(connected.solver_id).toBe(registered.account_id);

  // Test mode: both handlers' results pass their schemas; nothing is paid or counted.
  for (const taskType of ['proxy_fetch', 'web_search']) {
    expect(await example.event('test_result', (event) => event.task_type === taskType)).toMatchObject({ passed: true, outcome: 'passed' });
  }
  expect((await api(stack.url, 'GET', '/v1/solver/stats', { headers: solverAuth })).json).toMatchObject({ connected: true, attempts: 0 });

  const client = await registerAccount(stack.url, '100');
  const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: `${site.url}/article` } });
  expect(fetched.status).toBe(200);
  expect(fetched.json).toMatchObject({ status_code: 200, content_type: 'markdown', title: 'Harbour notes' });
  expect(fetched.json.content).toContain('The harbour master logs every ship.');
  const record = (await api(stack.url, 'GET', `/v1/tasks/${fetched.json.task_id}`, { headers: client.auth })).json;
  expect(record).toMatchObject({ solver_id: registered.account_id, price_points: '0.5' });

  const searched = await api(stack.url, 'POST', '/v1/search', { headers: client.auth, body: { query: 'lighthouse lamp', count: 2 } });
  expect(searched.status).toBe(200);
  expect(searched.json.results[0]).toMatchObject({ title: 'Lighthouse keeping', url: 'https://example.org/lighthouse' });

  // An error: nothing listens on the port; the client sees the solver's own error type.
  const closedPort = await new Promise<number>((resolve) => {
    const probe = http.createServer().listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as AddressInfo;
      probe.close(() => resolve(port));
    });
  });
  const failed = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: `http://127.0.0.1:${closedPort}/` } });
  expect(failed.status).toBe(502);
  expect(failed.json.error).toMatchObject({ type: 'solver_failed', solver_error_type: 'fetch_failed' });

  // A dropped connection: the SDK reconnects by itself and takes tasks again.
  proxy.redirect(new URL(stack.url).host);
  await example.event('connected', (event) => event.connections === 2);
  const again = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: `${site.url}/again` } });
  expect(again.status).toBe(200);

  // SIGTERM while a task runs: drain, so no new task is matched, and the running one still completes.
  const slow = api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: `${site.url}/slow` } });
  await site.slowRequested;
  example.signal('SIGTERM');
  await waitFor(async () => (await api(stack.url, 'GET', '/v1/solver/stats', { headers: solverAuth })).json.draining === true);
  const meanwhile = await api(stack.url, 'POST', '/v1/search', { headers: client.auth, body: { query: 'points' } });
  expect(meanwhile.status).toBe(503);
  site.release();
  const slowAnswer = await slow;
  expect(slowAnswer.status).toBe(200);
  expect(slowAnswer.json.title).toBe('Slow');
  expect(await example.exited).toBe(0);
  await example.event('stopped');
  // The node sees the socket close a moment after the process exits (later on a loaded machine).
  await waitFor(async () => (await api(stack.url, 'GET', '/v1/solver/stats', { headers: solverAuth })).json.connected === false);
  expect((await api(stack.url, 'GET', '/v1/solver/stats', { headers: solverAuth })).json).toMatchObject({ connected: false, completed: 4 });

  // Another connection with the same key takes over (4001): the SDK stops instead of evicting it back.
  const second = new Example(['--url', stack.url, '--api-key', registered.api_key, '--price', '0.5', '--allow-private-networks']);
  await second.event('connected');
  const usurper = new WebSocket(`${stack.url.replace(/^http/, 'ws')}/v1/solver/connect`, { headers: solverAuth });
  await new Promise((resolve) => usurper.once('message', resolve));
  expect(await second.exited).toBe(3);
  expect((await second.event('replaced')).message).toContain('4001');
  expect(second.events.filter((event) => event.event === 'connected')).toHaveLength(1);
  usurper.close();
});
