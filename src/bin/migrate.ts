import { loadConfig } from '../config';
import { migrate } from '../db/migrate';
import { createLogger, logFormatOf } from '../logger';
import { externalEndpoints } from '../runtime/infrastructure';
import { exitOnStartupError } from './shutdown';

async function main() {
  const config = loadConfig();
  const logger = createLogger(config.logLevel, 'migrate', config.logFormat);
  const applied = await migrate(externalEndpoints(config).databaseUrl);
  logger.info({ applied }, applied.length ? 'migrations applied' : 'database is up to date');
}

main().catch(exitOnStartupError(createLogger('info', 'migrate', logFormatOf(undefined))));
