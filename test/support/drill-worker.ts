import { loadConfig } from '../../src/config';
import { exitOnStartupError, onShutdown } from '../../src/bin/shutdown';
import { createLogger, logFormatOf } from '../../src/logger';
import { externalEndpoints } from '../../src/runtime/infrastructure';
import { startWorkerNode } from '../../src/runtime/worker-node';

/**
 * `npm run worker` (src/bin/worker.ts) with its recovery sweeps shortened: a crash drill's stranded tasks
 * are found within seconds instead of the half minute a deployment waits, and nothing else differs.
 */
export const DRILL_SWEEPS = { everyMs: 2000, unstartedAfterSeconds: 5 };

async function main() {
  const config = loadConfig();
  const logger = createLogger(config.logLevel, 'worker', config.logFormat);
  const worker = await startWorkerNode({ config, logger, ...externalEndpoints(config), sweeps: DRILL_SWEEPS });
  onShutdown(logger, worker.close);
}

main().catch(exitOnStartupError(createLogger('info', 'worker', logFormatOf(undefined))));
