import path from 'node:path';
import pino from 'pino';
import { loadConfig, type Config } from '../../src/config';
import { createDb, type Db } from '../../src/db/pool';
import { pickPort } from '../../src/embedded/ports';
import { startApiNode, type ApiNode } from '../../src/runtime/api-node';
import { startWorkerNode, type WorkerNode } from '../../src/runtime/worker-node';

export const ADMIN_KEY = 'test-admin-key';

/** A port free now, for a stack whose configuration must name its own port (CANARY_HOSTS). */
export const freePort = (): Promise<number> => pickPort();

export function testEndpoints() {
  const databaseUrl = process.env.TEST_DATABASE_URL;
  const temporalAddress = process.env.TEST_TEMPORAL_ADDRESS;
  if (!databaseUrl || !temporalAddress) throw new Error('test servers are not running: run the tests with `npm test`');
  return { databaseUrl, temporalAddress };
}

/**
 * Scripted solvers return made-up pages and answers, which canaries and chat audits would catch: only
 * the trust tests send them. Nor is a new solver on probation (the service's default is one canary per
 * type): the other suites' fresh solvers get client work at once. Nor are client tasks run twice: only
 * the redundant-run tests do that.
 * Nor is a scrape that gives no maxAge answered from the page cache: the suites scrape the same URLs
 * from one database and count the tasks each scrape makes; the page cache's tests set the default back.
 * Every stack and every process a test starts takes these (the database, and so the platform account
 * that pays for both, is shared between suites).
 */
export const QUIET_TRUST_ENV = {
  CANARY_EVERY_TASKS: '0',
  TRUST_PROBATION_CANARIES: '0',
  REDUNDANT_RUN_FRACTION: '0',
  VERIFICATION_START_FRACTION: '0',
  EARNINGS_VESTING_SECONDS: '0',
  PAGE_CACHE_DEFAULT_MAX_AGE_SECONDS: '0',
} as const;

/**
 * The suites register many accounts, connect many solvers and probe with bad keys, all from 127.0.0.1:
 * every stack and every process a test starts lifts the per-address limits (src/http/address-limits.ts),
 * unless its test sets them itself.
 */
export const OPEN_ADDRESS_LIMITS_ENV = {
  REGISTER_LIMIT_PER_HOUR: '1000000000',
  UNAUTHENTICATED_LIMIT_PER_MINUTE: '1000000000',
  SOLVER_CONNECT_LIMIT_PER_MINUTE: '1000000000',
} as const;

/**
 * The service's files (results' artifacts, without a bucket) go with the test servers' directory, one
 * directory for every stack and process a test starts, as on one machine.
 */
export const serviceDataDirEnv = (): Record<string, string> => (process.env.TEST_DATA_DIR ? { DATA_DIR: path.join(process.env.TEST_DATA_DIR, 'service') } : {});

export function testConfig(overrides: Record<string, string> = {}): Config {
  return loadConfig({
    ...process.env,
    ...serviceDataDirEnv(),
    ADMIN_API_KEY: ADMIN_KEY,
    ALLOW_PRIVATE_NETWORKS: 'true',
    LOCAL_SOLVER: 'off',
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'warn',
    HOST: '127.0.0.1',
    ...QUIET_TRUST_ENV,
    ...OPEN_ADDRESS_LIMITS_ENV,
    ...overrides,
  });
}

export { capturingLogger } from './capturing-logger';

export interface TestStack {
  api: ApiNode[];
  worker?: WorkerNode;
  url: string;
  db: Db;
  config: Config;
  close(): Promise<void>;
}

/** Real API nodes on real ports and a real worker, against the servers globalSetup started. */
export async function startTestStack(
  options: {
    apiNodes?: number;
    worker?: boolean;
    env?: Record<string, string>;
    logger?: pino.Logger;
    /** The first API node's port (any free one by default). */
    port?: number;
    /** The worker's sweeps, where a test needs them sooner than a deployment's (startWorkerNode). */
    sweeps?: Parameters<typeof startWorkerNode>[0]['sweeps'];
  } = {},
): Promise<TestStack> {
  const endpoints = testEndpoints();
  const config = testConfig(options.env);
  const logger = options.logger ?? pino({ level: process.env.TEST_LOG_LEVEL ?? 'warn' });
  const api: ApiNode[] = [];
  for (let i = 0; i < (options.apiNodes ?? 1); i++) {
    api.push(await startApiNode({ config, logger, ...endpoints, port: i === 0 ? (options.port ?? 0) : 0 }));
  }
  const worker = options.worker === false ? undefined : await startWorkerNode({ config, logger, ...endpoints, sweeps: options.sweeps });
  const db = await createDb(endpoints.databaseUrl);
  return {
    api,
    worker,
    url: api[0].url,
    db,
    config,
    close: async () => {
      await worker?.close();
      for (const node of api) await node.close();
      await db.end();
    },
  };
}

export async function api(base: string, method: string, path: string, options: { body?: unknown; headers?: Record<string, string>; raw?: string } = {}) {
  const response = await fetch(`${base}${path}`, {
    method,
    headers: { ...(options.body !== undefined ? { 'content-type': 'application/json' } : {}), ...options.headers },
    body: options.raw ?? (options.body !== undefined ? JSON.stringify(options.body) : undefined),
  });
  const text = await response.text();
  let json: any;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: response.status, headers: response.headers, json, text };
}

export async function registerAccount(base: string, depositPoints?: string) {
  const registered = await api(base, 'POST', '/v1/register');
  const account = registered.json as { account_id: string; api_key: string };
  if (depositPoints) {
    const deposited = await api(base, 'POST', '/v1/admin/deposit', {
      body: { account_id: account.account_id, amount_points: depositPoints },
      headers: { 'X-Admin-API-Key': ADMIN_KEY },
    });
    if (deposited.status !== 200) throw new Error(`deposit failed: ${deposited.text}`);
  }
  return { ...account, auth: { Authorization: `Bearer ${account.api_key}` } };
}
