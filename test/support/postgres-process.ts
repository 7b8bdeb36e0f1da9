import pino from 'pino';
import { startEmbeddedPostgres } from '../../src/embedded/postgres';

/**
 * A PostgreSQL of a test's own, run in this child process (`node --import tsx`): jest cannot load the
 * binaries package, an ES module. Prints {"url"} once it serves; stops it on SIGTERM, then exits.
 * Usage: node --import tsx test/support/postgres-process.ts <dir>
 */
async function main() {
  const postgres = await startEmbeddedPostgres(process.argv[2], pino({ level: 'warn' }), process.env);
  process.stdout.write(`${JSON.stringify({ url: postgres.url })}\n`);
  process.once('SIGTERM', () => {
    postgres.stop().finally(() => process.exit(0));
  });
}

main().catch((error) => {
  process.stderr.write(`${String((error as Error).stack ?? error)}\n`);
  process.exit(1);
});
