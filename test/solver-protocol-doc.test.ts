import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { waitFor } from './support/fake-solver';
import { api, registerAccount, startTestStack, type TestStack } from './support/stack';

/** docs/solver-protocol.md is written for authors with nothing else: its examples must hold. */

const ROOT = path.resolve(__dirname, '..');
const DOC = fs.readFileSync(path.join(ROOT, 'docs', 'solver-protocol.md'), 'utf8');

const jsonBlockAfter = (heading: string) => {
  const section = DOC.slice(DOC.indexOf(heading));
  return JSON.parse(section.slice(section.indexOf('```json\n') + 8, section.indexOf('\n```', section.indexOf('```json\n'))));
};

let stack: TestStack;
beforeAll(async () => {
  // Canaries on, as a deployment has them (the market shows their price ceiling), but drawn so rarely
  // that the document's solver is sent none.
  stack = await startTestStack({ env: { CANARY_EVERY_TASKS: '1000000' } });
});
afterAll(async () => {
  await stack.close();
});

test('the market and stats examples have the fields the routes answer', async () => {
  const solver = await registerAccount(stack.url);
  const market = (await api(stack.url, 'GET', '/v1/solver/market', { headers: solver.auth })).json;
  const documented = jsonBlockAfter('### `GET /v1/solver/market`');
  expect(Object.keys(documented).sort()).toEqual(Object.keys(market).sort());
  expect({ ...documented, server_time: market.server_time }).toEqual(market);
  const stats = (await api(stack.url, 'GET', '/v1/solver/stats', { headers: solver.auth })).json;
  expect(Object.keys(jsonBlockAfter('### `GET /v1/solver/stats`')).sort()).toEqual(Object.keys(stats).sort());
});

test('the minimal solver of the document runs test mode, earns a fetch, and drains on Ctrl-C', async () => {
  const code = DOC.slice(DOC.indexOf('```js\n') + 6, DOC.indexOf('\n```', DOC.indexOf('```js\n')));
  // Inside the project, so that its `import 'ws'` resolves.
  const dir = path.join(ROOT, 'node_modules', '.cache', 'solver-protocol-doc');
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, 'minimal-solver.mjs');
  fs.writeFileSync(file, code);
  const site = http.createServer((_req, res) => res.end('<p>hello</p>'));
  await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
  try {
    const solver = await registerAccount(stack.url);
    let output = '';
    const child = spawn(process.execPath, [file], { env: { ...process.env, MARKETPLACE_URL: stack.url, SOLVER_API_KEY: solver.api_key } });
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    await waitFor(() => output.includes(`connected as ${solver.account_id}`) && output.includes("type: 'test_result'"));

    const client = await registerAccount(stack.url, '10');
    const url = `http://127.0.0.1:${(site.address() as AddressInfo).port}/`;
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url } });
    expect(fetched.status).toBe(200);
    expect(fetched.json).toMatchObject({ content_type: 'html', content: '<p>hello</p>', status_code: 200 });
    expect((await api(stack.url, 'GET', '/v1/balance', { headers: solver.auth })).json.lifetime_earned_points).toBe('0.45');

    child.kill('SIGINT');
    expect(await exited).toBe(0);
    expect(output).toContain('closed 1000');
  } finally {
    site.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
