import { processEnvironment } from '../config';
import { createLogger } from '../logger';
import { parseSolverConfig, SOLVER_USAGE, SolverConfigError } from '../solver/config';
import { startSolverAgent } from '../solver/agent';

/** The reference solver as a standalone program: `npm run solver -- --url ... --api-key ...`. */
async function main(): Promise<void> {
  let config;
  try {
    config = parseSolverConfig(process.argv.slice(2), processEnvironment());
  } catch (error) {
    if (error instanceof SolverConfigError) {
      process.stderr.write(`${error.message}\n\n${SOLVER_USAGE}\n`);
      process.exit(2);
    }
    throw error;
  }
  if (config === null) {
    process.stdout.write(`${SOLVER_USAGE}\n`);
    return;
  }

  const logger = createLogger(config.logLevel, 'solver', config.logFormat);
  const agent = await startSolverAgent(config, { logger });

  let stopping = false;
  const shutdown = (signal: NodeJS.Signals) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    stopping = true;
    logger.info({ signal }, 'stopping the solver (a second signal exits at once)');
    agent.stop().then(
      () => process.exit(0),
      (error) => {
        logger.error({ err: String(error) }, 'graceful stop failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', shutdown);
  process.on('SIGTERM', shutdown);

  agent.connected.catch((error: Error) => {
    if (stopping) return;
    logger.fatal({ err: error.message }, 'the marketplace refused this solver');
    process.exit(1);
  });
}

main().catch((error) => {
  process.stderr.write(`${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
