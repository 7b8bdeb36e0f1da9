import { loadConfig } from '../config';
import { createLogger, logFormatOf } from '../logger';
import { startApiNode } from '../runtime/api-node';
import { externalEndpoints } from '../runtime/infrastructure';
import { exitOnStartupError, onShutdown } from './shutdown';

/** `npm run api`: one API node against DATABASE_URL / TEMPORAL_ADDRESS (or a running `npm start` stack). */
async function main() {
  const config = loadConfig();
  const logger = createLogger(config.logLevel, 'api', config.logFormat);
  const node = await startApiNode({ config, logger, ...externalEndpoints(config) });
  onShutdown(logger, node.close);
}

main().catch(exitOnStartupError(createLogger('info', 'api', logFormatOf(undefined))));
