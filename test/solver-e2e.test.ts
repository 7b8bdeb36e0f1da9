import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { createLogger } from '../src/logger';
import { ensureLocalSolverAccount, localSolverFile, startLocalSolver, type LocalSolver } from '../src/runtime/local-solver';
import { pngSize } from '../src/solver/png';
import { startFakeUpstream, streamChunks, type FakeUpstream } from './solver/helpers/fake-upstream';
import { startFixtureServer, type FixtureServer } from './solver/helpers/fixture-server';
import { api, registerAccount, startTestStack, testConfig, type TestStack } from './support/stack';

/**
 * The reference solver agent, started the way `npm start` starts it, doing real work for the real
 * service: client → API → Temporal workflow → solver WebSocket → fixture site on 127.0.0.1 → back.
 * One agent (so one Chromium) for the whole file.
 */

const logger = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

let stack: TestStack;
let site: FixtureServer;
let upstream: FakeUpstream;
let solver: LocalSolver;
let client: Awaited<ReturnType<typeof registerAccount>>;
let dataDir: string;
let indexDir: string;
let solverEnv: Record<string, string>;

beforeAll(async () => {
  site = await startFixtureServer();
  upstream = await startFakeUpstream((_body, res) =>
    streamChunks(res, [
      { choices: [{ index: 0, delta: { role: 'assistant', content: 'Hello from ' }, finish_reason: null }] },
      { choices: [{ index: 0, delta: { content: 'upstream' }, finish_reason: 'stop' }] },
      { choices: [], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } },
    ]),
  );
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'solver-e2e-data-'));
  indexDir = fs.mkdtempSync(path.join(os.tmpdir(), 'solver-e2e-index-'));
  fs.writeFileSync(
    path.join(indexDir, 'lighthouse.html'),
    '<html><head><title>Lighthouse keeping</title><link rel="canonical" href="https://example.org/lighthouse"></head><body><p>The lighthouse keeper trims the lamp wick every evening.</p></body></html>',
  );
  fs.writeFileSync(path.join(indexDir, 'harbour.md'), '# Harbour notes\n\nThe harbour master logs every ship that enters.\n');
  stack = await startTestStack();
  // gpt-4o is on the shipped strong-tier allowlist; house-model is not.
  solverEnv = { DATA_DIR: dataDir, SEARCH_INDEX_DIR: indexDir, CHAT_UPSTREAM_URL: upstream.baseUrl, CHAT_MODELS: 'gpt-4o,house-model' };
  solver = await startLocalSolver({ config: testConfig(solverEnv), apiUrl: stack.url, logger });
  client = await registerAccount(stack.url, '1000');
});

afterAll(async () => {
  await solver?.stop();
  await stack?.close();
  await site?.close();
  await upstream?.close();
  for (const dir of [dataDir, indexDir]) if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const savedAccount = () => JSON.parse(fs.readFileSync(localSolverFile(testConfig(solverEnv)), 'utf8')) as { account_id: string; api_key: string };

test('the bundled solver registers its own account, kept owner-only in DATA_DIR, and offers web tasks and allowlisted chat models', async () => {
  const file = localSolverFile(testConfig(solverEnv));
  expect(file).toBe(path.join(dataDir, 'local-solver.json'));
  expect(fs.statSync(file).mode & 0o777).toBe(0o600);
  expect(savedAccount().account_id).toBe(solver.solverId);
  expect(solver.taskTypes).toEqual(expect.arrayContaining(['proxy_fetch', 'web_search', 'screenshot', 'page_snapshot', 'chat_completion']));

  const stats = await api(stack.url, 'GET', '/v1/solver/stats', { headers: { Authorization: `Bearer ${savedAccount().api_key}` } });
  expect(stats.json).toMatchObject({ solver_id: solver.solverId, connected: true });
  const offered = (stats.json.capabilities as Array<{ task_type: string; model_name: string; tier: string }>).map((c) => `${c.task_type}/${c.model_name}/${c.tier}`);
  expect(offered).toEqual(
    expect.arrayContaining(['proxy_fetch/http-fetch/standard', 'web_search/local-index/standard', 'screenshot/chromium/standard', 'page_snapshot/chromium/standard', 'chat_completion/gpt-4o/strong']),
  );
  expect(offered.some((entry) => entry.includes('house-model'))).toBe(false);
});

test('/v1/fetch returns the fixture page as markdown, done and paid through the bundled solver', async () => {
  const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: client.auth, body: { url: `${site.baseUrl}/article.html` } });
  expect(fetched.status).toBe(200);
  expect(fetched.json).toMatchObject({ url: `${site.baseUrl}/article.html`, final_url: `${site.baseUrl}/article.html`, status_code: 200, content_type: 'markdown', title: 'Fixture Article' });
  expect(fetched.json.content).toContain('# The Fixture Heading');
  expect(fetched.json.content).toContain(`[the relative guide](${site.baseUrl}/docs/guide.html)`);

  const task = await api(stack.url, 'GET', `/v1/tasks/${fetched.json.task_id}`, { headers: client.auth });
  expect(task.json).toMatchObject({ status: 'completed', solver_id: solver.solverId, price_points: '1' });
  expect(task.json.attempts).toEqual([expect.objectContaining({ solver_id: solver.solverId, outcome: 'completed' })]);
});

test('/v1/screenshot returns a PNG of the asked viewport, as JSON or raw with Accept: image/png', async () => {
  const body = { url: `${site.baseUrl}/article.html`, viewport: { width: 800, height: 600 } };
  const shot = await api(stack.url, 'POST', '/v1/screenshot', { headers: client.auth, body });
  expect(shot.status).toBe(200);
  expect(shot.json).toMatchObject({ url: body.url, mime_type: 'image/png', width: 800, height: 600, full_page: false });
  expect(pngSize(Buffer.from(shot.json.image_base64, 'base64'))).toEqual({ width: 800, height: 600 });

  const raw = await fetch(`${stack.url}/v1/screenshot`, {
    method: 'POST',
    headers: { ...client.auth, Accept: 'image/png', 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(raw.status).toBe(200);
  expect(raw.headers.get('content-type')).toBe('image/png');
  expect(pngSize(Buffer.from(await raw.arrayBuffer()))).toEqual({ width: 800, height: 600 });
});

test('/v1/snapshot in aria mode lists the headings and links of the rendered page', async () => {
  const snap = await api(stack.url, 'POST', '/v1/snapshot', { headers: client.auth, body: { url: `${site.baseUrl}/snapshot.html`, mode: 'aria' } });
  expect(snap.status).toBe(200);
  expect(snap.json).toMatchObject({ url: `${site.baseUrl}/snapshot.html`, snapshot_format: 'aria', title: 'Snapshot Fixture' });
  const yaml = snap.json.snapshot as string;
  expect(yaml).toContain('heading "Snapshot Heading" [level=1]');
  expect(yaml).toContain('heading "Inside Main" [level=2]');
  expect(yaml).toContain('link "First link"');
  expect(yaml).toContain('link "Side link"');
  expect(yaml).toContain('Rendered by script');
});

test('/v1/search answers from the local index', async () => {
  const searched = await api(stack.url, 'POST', '/v1/search', { headers: client.auth, body: { query: 'lighthouse keeper', count: 3 } });
  expect(searched.status).toBe(200);
  expect(searched.json).toMatchObject({ query: 'lighthouse keeper', task_id: expect.any(String) });
  expect(searched.json.results[0]).toEqual({ title: 'Lighthouse keeping', url: 'https://example.org/lighthouse', snippet: expect.stringContaining('lighthouse keeper') });
  expect(searched.json.results.every((result: { url: string }) => !result.url.includes('harbour'))).toBe(true);
});

test('a restart reuses the saved solver account; a saved key the database does not know is replaced', async () => {
  const config = testConfig(solverEnv);
  expect(await ensureLocalSolverAccount(config, stack.url, logger)).toEqual(savedAccount());

  fs.writeFileSync(localSolverFile(config), JSON.stringify({ account_id: 'acct_gone', api_key: 'tmk_unknown' }));
  const replaced = await ensureLocalSolverAccount(config, stack.url, logger);
  expect(replaced.account_id).not.toBe('acct_gone');
  expect(savedAccount()).toEqual(replaced);
  expect(fs.statSync(localSolverFile(config)).mode & 0o777).toBe(0o600);
  expect((await api(stack.url, 'GET', '/v1/balance', { headers: { Authorization: `Bearer ${replaced.api_key}` } })).status).toBe(200);
});

test('a chat completion goes through the service to the upstream the bundled solver forwards to, streamed', async () => {
  const openai = new OpenAI({ apiKey: client.api_key, baseURL: `${stack.url}/v1`, maxRetries: 0 });
  const stream = await openai.chat.completions.create({ model: 'service/strong', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } });
  let text = '';
  let usage: unknown;
  for await (const part of stream) {
    text += part.choices[0]?.delta.content ?? '';
    if (part.usage) usage = part.usage;
  }
  expect(text).toBe('Hello from upstream');
  expect(usage).toEqual({ prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 });
});
