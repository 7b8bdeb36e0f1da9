import { loadConfig, readStrongModels } from '../src/config';

describe('configuration', () => {
  test('defaults apply when nothing is configured', () => {
    const config = loadConfig({});
    expect(config.port).toBe(3000);
    expect(config.allowPrivateNetworks).toBe(false);
    expect(config.localSolver).toBe(true);
    expect(config.databaseUrl).toBeUndefined();
    expect(config.temporalNamespace).toBe('default');
  });

  test('invalid values are refused with a message naming the variable', () => {
    expect(() => loadConfig({ PORT: 'abc' })).toThrow(/PORT/);
    expect(() => loadConfig({ ALLOW_PRIVATE_NETWORKS: 'maybe' })).toThrow(/ALLOW_PRIVATE_NETWORKS/);
    expect(() => loadConfig({ LOCAL_SOLVER: 'sometimes' })).toThrow(/LOCAL_SOLVER/);
    expect(() => loadConfig({ MAX_TASK_ATTEMPTS: '0' })).toThrow(/MAX_TASK_ATTEMPTS/);
  });

  test('LOCAL_SOLVER=off turns the bundled solver off', () => {
    expect(loadConfig({ LOCAL_SOLVER: 'off' }).localSolver).toBe(false);
  });

  test('STRONG_MODELS overrides the shipped allowlist file', () => {
    expect(readStrongModels(loadConfig({}))).toContain('gpt-4o');
    expect(readStrongModels(loadConfig({ STRONG_MODELS: 'model-a, model-b' }))).toEqual(['model-a', 'model-b']);
  });
});
