import { loadConfig } from '../config';
import { createLogger, logFormatOf } from '../logger';
import { externalEndpoints } from '../runtime/infrastructure';
import { startWorkerNode } from '../runtime/worker-node';
import { exitOnStartupError, onShutdown } from './shutdown';

/** `npm run worker`: a Temporal worker for workflows and database activities. Run as many as you like. */
async function main() {
  const config = loadConfig();
  const logger = createLogger(config.logLevel, 'worker', config.logFormat);
  const worker = await startWorkerNode({ config, logger, ...externalEndpoints(config) });
  onShutdown(logger, worker.close);
}

main().catch(exitOnStartupError(createLogger('info', 'worker', logFormatOf(undefined))));
