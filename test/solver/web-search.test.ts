import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { DEFAULT_SEARCH_INDEX_DIR } from '../../src/solver/config';
import { createWebSearchHandler } from '../../src/solver/handlers/web-search';
import { createLocalSearchBackend } from '../../src/solver/search/local-index';
import { createSearxngBackend } from '../../src/solver/search/searxng';
import { createBraveBackend } from '../../src/solver/search/brave';
import { SearchResult } from '../../src/schemas/frames';

const signal = () => new AbortController().signal;
let indexDir: string;

beforeAll(() => {
  indexDir = fs.mkdtempSync(path.join(os.tmpdir(), 'search-index-'));
  for (let i = 1; i <= 8; i++) {
    fs.writeFileSync(path.join(indexDir, `zebra-${i}.md`), `# Zebra page ${i}\n\nZebras number ${i} graze on the savanna with stripes.\n`);
  }
  fs.writeFileSync(
    path.join(indexDir, 'lighthouse.html'),
    '<html><head><title>Lighthouse keeping</title><link rel="canonical" href="https://example.org/lighthouse"></head><body><h1>Keepers</h1><p>The lighthouse keeper trims the lamp wick every evening before the storm arrives.</p><script>var hidden = "zebra";</script></body></html>',
  );
  fs.writeFileSync(path.join(indexDir, 'notes.txt'), 'Harbour notes\nThe harbour master logs every ship.\n');
  fs.writeFileSync(path.join(indexDir, 'front.md'), '---\ntitle: Front matter title\nurl: https://example.org/front\n---\nBody about quasars.\n');
});
afterAll(() => fs.rmSync(indexDir, { recursive: true, force: true }));

test('the local index honours count', async () => {
  const search = createWebSearchHandler({ backend: createLocalSearchBackend(indexDir), timeoutMs: 5_000 });
  for (const count of [1, 3, 5]) {
    const result = await search({ query: 'zebra stripes', count }, { signal: signal() });
    expect(SearchResult.parse(result).results).toHaveLength(count);
  }
  const defaultCount = await search({ query: 'zebra' }, { signal: signal() });
  expect((defaultCount.results as unknown[]).length).toBe(5);
});

test('local results carry the title, URL and a snippet around the match', async () => {
  const backend = createLocalSearchBackend(indexDir);
  const [html] = await backend.search('lamp wick', 3, signal());
  expect(html).toEqual({ title: 'Lighthouse keeping', url: 'https://example.org/lighthouse', snippet: expect.stringContaining('trims the lamp wick') });
  const [markdown] = await backend.search('quasars', 3, signal());
  expect(markdown).toMatchObject({ title: 'Front matter title', url: 'https://example.org/front' });
  const [text] = await backend.search('harbour master', 3, signal());
  expect(text).toMatchObject({ title: 'Harbour notes', url: 'local-index:notes.txt' });
  expect(await backend.search('hidden', 3, signal())).toEqual([]);
});

test('the shipped index answers questions about the service', async () => {
  const backend = createLocalSearchBackend(DEFAULT_SEARCH_INDEX_DIR);
  const results = await backend.search('screenshot full page', 5, signal());
  expect(results.length).toBeGreaterThan(0);
  expect(results.map((result) => result.title)).toContain('Web tasks: fetch, search, screenshot and snapshot');
});

async function fakeApi(handler: http.RequestListener): Promise<{ url: string; close(): Promise<void> }> {
  const server = http.createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

test('SearXNG: queries the JSON API and honours count', async () => {
  const seen: string[] = [];
  const api = await fakeApi((req, res) => {
    seen.push(req.url!);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ results: Array.from({ length: 8 }, (_, i) => ({ title: `Result &amp; ${i}`, url: `https://r${i}.example`, content: `<b>snippet</b> ${i}` })) }));
  });
  try {
    const search = createWebSearchHandler({ backend: createSearxngBackend(api.url), timeoutMs: 5_000 });
    const result = await search({ query: 'cats & dogs', count: 3 }, { signal: signal() });
    expect(result.results).toEqual([
      { title: 'Result & 0', url: 'https://r0.example', snippet: 'snippet 0' },
      { title: 'Result & 1', url: 'https://r1.example', snippet: 'snippet 1' },
      { title: 'Result & 2', url: 'https://r2.example', snippet: 'snippet 2' },
    ]);
    expect(seen[0]).toBe('/search?q=cats+%26+dogs&format=json');
  } finally {
    await api.close();
  }
});

test('Brave: sends the subscription token and maps web results', async () => {
  let token: string | undefined;
  const api = await fakeApi((req, res) => {
    token = req.headers['x-subscription-token'] as string;
    const count = Number(new URL(req.url!, 'http://x').searchParams.get('count'));
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ web: { results: Array.from({ length: count }, (_, i) => ({ title: `B${i}`, url: `https://b${i}.example`, description: `about <strong>b</strong>${i}` })) } }));
  });
  try {
    const search = createWebSearchHandler({ backend: createBraveBackend('brave-key', `${api.url}/res/v1/web/search`), timeoutMs: 5_000 });
    const result = await search({ query: 'b', count: 2 }, { signal: signal() });
    expect(result.results).toEqual([
      { title: 'B0', url: 'https://b0.example', snippet: 'about b0' },
      { title: 'B1', url: 'https://b1.example', snippet: 'about b1' },
    ]);
    expect(token).toBe('brave-key');
  } finally {
    await api.close();
  }
});

test('a failing search API is a retryable upstream error', async () => {
  const api = await fakeApi((_req, res) => {
    res.writeHead(503);
    res.end('overloaded');
  });
  try {
    const search = createWebSearchHandler({ backend: createSearxngBackend(api.url), timeoutMs: 5_000 });
    await expect(search({ query: 'x' }, { signal: signal() })).rejects.toMatchObject({ type: 'upstream_error', retryable: true });
  } finally {
    await api.close();
  }
});
