import { parseSolverConfig, type SolverConfig } from '../../../src/solver/config';

/** A solver configuration for tests: local fixtures are on 127.0.0.1, so private networks are allowed. */
export function testSolverConfig(env: Record<string, string> = {}, overrides: Partial<SolverConfig> = {}): SolverConfig {
  const config = parseSolverConfig([], {
    SOLVER_URL: 'http://127.0.0.1:9',
    SOLVER_API_KEY: 'test-key',
    ALLOW_PRIVATE_NETWORKS: 'true',
    LOG_LEVEL: 'silent',
    ...env,
  });
  if (!config) throw new Error('unexpected --help');
  return { ...config, ...overrides };
}
