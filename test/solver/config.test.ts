import { DEFAULT_SEARCH_INDEX_DIR, parseSolverConfig, SolverConfigError } from '../../src/solver/config';
import { buildCapabilities } from '../../src/solver/capabilities';

const required = { SOLVER_URL: 'http://127.0.0.1:3000', SOLVER_API_KEY: 'key' };

function problems(argv: string[], env: Record<string, string>): string[] {
  try {
    parseSolverConfig(argv, env);
  } catch (error) {
    if (error instanceof SolverConfigError) return error.problems;
    throw error;
  }
  throw new Error('expected a configuration error');
}

test('reads the environment with defaults', () => {
  const config = parseSolverConfig([], required)!;
  expect(config).toMatchObject({
    url: 'http://127.0.0.1:3000',
    apiKey: 'key',
    taskTypes: null,
    maxConcurrent: 4,
    allowPrivateNetworks: false,
    search: { backend: 'none' },
    chat: null,
    chromiumPath: '/usr/bin/chromium',
    browserPages: 2,
    fetchMaxBytes: 5 * 1024 * 1024,
    shutdownGraceMs: 10_000,
  });
  expect(config.pricePoints.proxy_fetch).toBe('1');
});

test('command-line options win over the environment', () => {
  const config = parseSolverConfig(
    ['--url', 'https://market.example/', '--api-key', 'cli-key', '--tasks', 'proxy_fetch,screenshot', '--max-concurrent', '8'],
    { ...required, SOLVER_MAX_CONCURRENT: '2' },
  )!;
  expect(config).toMatchObject({ url: 'https://market.example', apiKey: 'cli-key', taskTypes: ['proxy_fetch', 'screenshot'], maxConcurrent: 8 });
});

test('--help returns null', () => {
  expect(parseSolverConfig(['--help'], {})).toBeNull();
});

test('error messages name the variable', () => {
  const found = problems([], { SOLVER_URL: 'ftp://x', SOLVER_MAX_CONCURRENT: '0', ALLOW_PRIVATE_NETWORKS: 'maybe', BROWSER_PAGES: 'two' });
  expect(found.join('\n')).toMatch(/SOLVER_URL/);
  expect(found.join('\n')).toMatch(/SOLVER_MAX_CONCURRENT/);
  expect(found.join('\n')).toMatch(/ALLOW_PRIVATE_NETWORKS/);
  expect(found.join('\n')).toMatch(/BROWSER_PAGES/);
  expect(problems([], {}).join('\n')).toMatch(/SOLVER_API_KEY/);
  expect(problems(['--tasks', 'proxy_fetch,teleport'], required).join('\n')).toMatch(/teleport/);
  expect(problems([], { ...required, SOLVER_MAX_CONCURRENT: '10001' })).toEqual(['SOLVER_MAX_CONCURRENT (--max-concurrent) must be at most 10000, got "10001"']);
});

test('picks the search backend: local index, then SearXNG, then Brave', () => {
  expect(parseSolverConfig([], { ...required, SEARCH_INDEX_DIR: DEFAULT_SEARCH_INDEX_DIR, SEARXNG_URL: 'http://s:8888' })!.search).toEqual({
    backend: 'local',
    indexDir: DEFAULT_SEARCH_INDEX_DIR,
  });
  expect(parseSolverConfig([], { ...required, SEARXNG_URL: 'http://s:8888/', BRAVE_API_KEY: 'b' })!.search).toEqual({
    backend: 'searxng',
    searxngUrl: 'http://s:8888',
  });
  expect(parseSolverConfig([], { ...required, BRAVE_API_KEY: 'b' })!.search).toMatchObject({ backend: 'brave', apiKey: 'b' });
  expect(problems([], { ...required, SEARCH_BACKEND: 'searxng' }).join()).toMatch(/SEARXNG_URL/);
  expect(problems([], { ...required, SOLVER_TASK_TYPES: 'web_search' }).join()).toMatch(/web_search/);
});

test('chat needs an upstream and model names', () => {
  const config = parseSolverConfig([], { ...required, CHAT_UPSTREAM_URL: 'http://127.0.0.1:8000/v1', CHAT_MODELS: 'model-a, model-b' })!;
  expect(config.chat).toMatchObject({ upstreamUrl: 'http://127.0.0.1:8000/v1', models: ['model-a', 'model-b'], tier: 'strong' });
  expect(problems([], { ...required, CHAT_UPSTREAM_URL: 'http://127.0.0.1:8000/v1' }).join()).toMatch(/CHAT_MODELS/);
});

test('prices can be set for all task types or one by one', () => {
  expect(parseSolverConfig([], { ...required, SOLVER_PRICE_POINTS: '2.5' })!.pricePoints.screenshot).toBe('2.5');
  const prices = parseSolverConfig([], { ...required, SOLVER_PRICE_POINTS: 'screenshot=3,chat_completion=0.5' })!.pricePoints;
  expect(prices).toMatchObject({ screenshot: '3', chat_completion: '0.5', proxy_fetch: '1' });
  expect(problems([], { ...required, SOLVER_PRICE_POINTS: 'screenshot=cheap' }).join()).toMatch(/SOLVER_PRICE_POINTS/);
});

test('SOLVER_COUNTRY is declared on the web capabilities only, upper case; anything but two letters is refused', () => {
  const config = parseSolverConfig([], { ...required, SOLVER_COUNTRY: 'de', CHAT_UPSTREAM_URL: 'http://127.0.0.1:8000/v1', CHAT_MODELS: 'm' })!;
  expect(config.country).toBe('DE');
  const records = buildCapabilities(config, ['proxy_fetch', 'page_snapshot', 'chat_completion']);
  expect(Object.fromEntries(records.map((record) => [record.task_type, record.country]))).toEqual({ proxy_fetch: 'DE', page_snapshot: 'DE', chat_completion: undefined });
  expect(parseSolverConfig([], required)!.country).toBeNull();
  expect(problems([], { ...required, SOLVER_COUNTRY: 'Germany' }).join('\n')).toMatch(/SOLVER_COUNTRY/);
});
