import { loadConfig } from '../../src/config';
import { localSolverConfig } from '../../src/runtime/local-solver';
import { buildCapabilities } from '../../src/solver/capabilities';
import { DEFAULT_SEARCH_INDEX_DIR } from '../../src/solver/config';

/** How `npm start` turns the service configuration into the bundled solver's configuration. */

const API_URL = 'http://127.0.0.1:3000';
const build = (env: Record<string, string>) => localSolverConfig(loadConfig({ STRONG_MODELS: 'gpt-4o', ...env }), API_URL, 'tmk_key');

test('the bundled solver talks to the local API with its own key and searches the shipped pages', () => {
  const config = build({});
  expect(config).toMatchObject({ url: API_URL, apiKey: 'tmk_key', taskTypes: null, allowPrivateNetworks: false, chat: null });
  expect(config.search).toEqual({ backend: 'local', indexDir: DEFAULT_SEARCH_INDEX_DIR });
});

test('ALLOW_PRIVATE_NETWORKS, CHROMIUM_PATH and SEARCH_INDEX_DIR reach the solver', () => {
  const config = build({ ALLOW_PRIVATE_NETWORKS: 'true', CHROMIUM_PATH: '/opt/chromium', SEARCH_INDEX_DIR: '/srv/pages' });
  expect(config).toMatchObject({ allowPrivateNetworks: true, chromiumPath: '/opt/chromium', search: { backend: 'local', indexDir: '/srv/pages' } });
});

test('a configured search service replaces the shipped pages', () => {
  expect(build({ SEARXNG_URL: 'http://127.0.0.1:8888' }).search).toEqual({ backend: 'searxng', searxngUrl: 'http://127.0.0.1:8888' });
  expect(build({ BRAVE_API_KEY: 'brave-token' }).search).toMatchObject({ backend: 'brave', apiKey: 'brave-token' });
});

test('chat is offered with an upstream, for the allowlisted models only', () => {
  const chat = build({ CHAT_UPSTREAM_URL: 'http://127.0.0.1:8000/v1', CHAT_UPSTREAM_API_KEY: 'up-key', CHAT_MODELS: 'gpt-4o, house-model' }).chat;
  expect(chat).toMatchObject({ upstreamUrl: 'http://127.0.0.1:8000/v1', apiKey: 'up-key', models: ['gpt-4o'], tier: 'strong' });
  expect(build({ CHAT_UPSTREAM_URL: 'http://127.0.0.1:8000/v1', CHAT_MODELS: 'house-model' }).chat).toBeNull();
});

test('incomplete or malformed chat settings are refused, naming the variable', () => {
  expect(() => build({ CHAT_UPSTREAM_URL: 'http://127.0.0.1:8000/v1' })).toThrow(/CHAT_MODELS/);
  expect(() => build({ CHAT_MODELS: 'gpt-4o' })).toThrow(/CHAT_UPSTREAM_URL/);
  expect(() => build({ CHAT_UPSTREAM_URL: 'ftp://models', CHAT_MODELS: 'gpt-4o' })).toThrow(/CHAT_UPSTREAM_URL/);
});

test('the bundled solver is sized by SOLVER_MAX_CONCURRENT, SOLVER_CHAT_MAX_CONCURRENT and BROWSER_PAGES; chat defaults to 32 at once', () => {
  const chat = { CHAT_UPSTREAM_URL: 'http://127.0.0.1:8000/v1', CHAT_MODELS: 'gpt-4o' };
  const capacity = (config: ReturnType<typeof build>) =>
    Object.fromEntries(buildCapabilities(config, ['proxy_fetch', 'screenshot', 'chat_completion']).map((c) => [c.task_type, c.max_concurrent]));
  expect(capacity(build(chat))).toEqual({ proxy_fetch: 4, screenshot: 2, chat_completion: 32 });
  const sized = build({ ...chat, SOLVER_MAX_CONCURRENT: '16', SOLVER_CHAT_MAX_CONCURRENT: '200', BROWSER_PAGES: '3' });
  expect(capacity(sized)).toEqual({ proxy_fetch: 16, screenshot: 3, chat_completion: 200 });
  expect(() => build({ SOLVER_CHAT_MAX_CONCURRENT: 'many' })).toThrow(/SOLVER_CHAT_MAX_CONCURRENT/);
});
