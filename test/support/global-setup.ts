import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { loadConfig } from '../../src/config';
import { migrate } from '../../src/db/migrate';
import { startEmbeddedPostgres } from '../../src/embedded/postgres';
import { resolveTemporalCli, startEmbeddedTemporal } from '../../src/embedded/temporal';
import { createLogger } from '../../src/logger';
import { writeWorkflowBundle } from '../../src/temporal/bundle';

/**
 * Starts the real servers the tests run against: an embedded PostgreSQL and the Temporal dev server,
 * in a fresh temporary directory, and bundles the workflows once for every worker the tests start.
 */
export default async function globalSetup() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'marketplace-test-'));
  fs.chmodSync(dir, 0o755);
  const logger = createLogger('warn', 'test-setup');
  const config = loadConfig();
  const postgres = await startEmbeddedPostgres(path.join(dir, 'postgres'), logger, process.env);
  const temporal = await startEmbeddedTemporal({
    cli: resolveTemporalCli(config.rootDir, config.temporalCli),
    dir: path.join(dir, 'temporal'),
    namespace: 'default',
    logger,
    ui: false,
  });
  await migrate(postgres.url);
  // Each test file gets a copy of this migrated database (test/support/isolate-file.ts); nothing connects to the template.
  await createTemplate(postgres.url);
  const bundlePath = path.join(dir, 'workflow-bundle.js');
  await writeWorkflowBundle(bundlePath, logger);
  process.env.TEST_DATABASE_URL = postgres.url;
  process.env.TEST_DATABASE_BASE_URL = postgres.url;
  process.env.TEST_TEMPORAL_ADDRESS = temporal.address;
  process.env.TEST_DATA_DIR = dir;
  process.env.WORKFLOW_BUNDLE_PATH = bundlePath;
  (globalThis as Record<string, unknown>).__MARKETPLACE_TEST__ = { dir, postgres, temporal };
}

async function createTemplate(databaseUrl: string) {
  const server = new URL(databaseUrl);
  const name = server.pathname.slice(1);
  server.pathname = '/postgres';
  const client = new pg.Client({ connectionString: server.toString() });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE "${name}_template" TEMPLATE "${name}"`);
  } finally {
    await client.end();
  }
}
