import { loadConfig, readStrongModels } from '../../src/config';
import { logFormatOf } from '../../src/logger';

describe('configuration', () => {
  test('defaults apply when nothing is configured', () => {
    const config = loadConfig({});
    expect(config.port).toBe(3000);
    expect(config.allowPrivateNetworks).toBe(false);
    expect(config.localSolver).toBe(true);
    expect(config.databaseUrl).toBeUndefined();
    expect(config.temporalNamespace).toBe('default');
    expect(config.trust.redundantRunFraction).toBe(0.02);
    // Safe for an open deployment: a new solver passes a canary of a type before client work of it.
    expect(config.trust.probationCanaries).toBe(1);
  });

  test('canary pages are served under CANARY_HOSTS, under localhost names where private networks are allowed, or not at all', () => {
    const configured = loadConfig({ CANARY_HOSTS: '*.pages.example,http://shop.localhost:8080' });
    expect(configured.canaryHosts).toEqual({
      configured: [
        { scheme: 'https', host: '*.pages.example', port: null },
        { scheme: 'http', host: 'shop.localhost', port: 8080 },
      ],
      local: false,
    });
    expect(configured.trust.pageCanaries).toBe(true);
    expect(loadConfig({ ALLOW_PRIVATE_NETWORKS: 'true' }).canaryHosts).toEqual({ configured: [], local: true });
    expect(loadConfig({ ALLOW_PRIVATE_NETWORKS: 'true' }).trust.pageCanaries).toBe(true);
    expect(loadConfig({}).trust.pageCanaries).toBe(false);
    expect(() => loadConfig({ CANARY_HOSTS: 'localhost' })).toThrow(/CANARY_HOSTS/);
    // The old setting served pages on the API's own origin: refused with what replaces it.
    expect(() => loadConfig({ PUBLIC_BASE_URL: 'https://api.example' })).toThrow(/CANARY_HOSTS/);
  });

  test('invalid values are refused with a message naming the variable', () => {
    expect(() => loadConfig({ PORT: 'abc' })).toThrow(/PORT/);
    expect(() => loadConfig({ ALLOW_PRIVATE_NETWORKS: 'maybe' })).toThrow(/ALLOW_PRIVATE_NETWORKS/);
    expect(() => loadConfig({ LOCAL_SOLVER: 'sometimes' })).toThrow(/LOCAL_SOLVER/);
    expect(() => loadConfig({ MAX_TASK_ATTEMPTS: '0' })).toThrow(/MAX_TASK_ATTEMPTS/);
    expect(() => loadConfig({ REDUNDANT_RUN_FRACTION: '1.5' })).toThrow(/REDUNDANT_RUN_FRACTION/);
    expect(() => loadConfig({ REDUNDANT_RUN_FRACTION: '-0.1' })).toThrow(/REDUNDANT_RUN_FRACTION/);
    expect(loadConfig({ REDUNDANT_RUN_FRACTION: '0' }).trust.redundantRunFraction).toBe(0);
  });

  test('LOCAL_SOLVER=off turns the bundled solver off', () => {
    expect(loadConfig({ LOCAL_SOLVER: 'off' }).localSolver).toBe(false);
  });

  test('logs are readable lines on a terminal and JSON elsewhere, unless LOG_FORMAT says which', () => {
    expect(logFormatOf(undefined, true)).toBe('pretty');
    expect(logFormatOf(undefined, false)).toBe('json');
    expect(logFormatOf('json', true)).toBe('json');
    expect(logFormatOf('pretty', false)).toBe('pretty');
    expect(loadConfig({ LOG_FORMAT: 'json' }).logFormat).toBe('json');
    expect(() => loadConfig({ LOG_FORMAT: 'xml' })).toThrow(/LOG_FORMAT/);
  });

  test('STRONG_MODELS overrides the shipped allowlist file', () => {
    expect(readStrongModels(loadConfig({}))).toContain('gpt-4o');
    expect(readStrongModels(loadConfig({ STRONG_MODELS: 'model-a, model-b' }))).toEqual(['model-a', 'model-b']);
  });
});
