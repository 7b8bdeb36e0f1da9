/**
 * Starts a PostgreSQL and a Temporal dev server of their own, their data under `<dir>` (kept across a
 * kill: a second start finds it again), prints their endpoints as one JSON line, and runs until asked to
 * stop (SIGTERM stops both). Run as its own program (`node --import tsx test/support/own-servers.ts
 * <dir>`): a test that kills a whole stack, servers included, starts them with it (test/crash-drill.test.ts).
 */
import path from 'node:path';
import { loadConfig } from '../../src/config';
import { startEmbeddedPostgres } from '../../src/embedded/postgres';
import { resolveTemporalCli, startEmbeddedTemporal } from '../../src/embedded/temporal';
import { createLogger } from '../../src/logger';

async function main() {
  const dir = process.argv[2];
  if (!dir) throw new Error('usage: own-servers.ts <dir>');
  const config = loadConfig();
  const logger = createLogger('warn', 'own-servers');
  const postgres = await startEmbeddedPostgres(path.join(dir, 'postgres'), logger, process.env);
  const temporal = await startEmbeddedTemporal({ cli: resolveTemporalCli(config.rootDir, config.temporalCli), dir: path.join(dir, 'temporal'), namespace: config.temporalNamespace, logger, ui: false });
  process.stdout.write(`${JSON.stringify({ databaseUrl: postgres.url, temporalAddress: temporal.address })}\n`);
  process.once('SIGTERM', () => {
    void (async () => {
      await temporal.stop();
      await postgres.stop();
      process.exit(0);
    })();
  });
  setInterval(() => undefined, 1 << 30);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
