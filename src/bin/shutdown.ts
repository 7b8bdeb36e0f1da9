import type { Logger } from '../logger';

/**
 * Runs `stop` once on SIGINT/SIGTERM (and any other `signals`). npm relays the signal the terminal already
 * sent, so a repeat within a few seconds is the same request; a later one forces the exit.
 */
export function onShutdown(
  logger: Logger,
  stop: () => Promise<void>,
  signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'],
) {
  let stopping = 0;
  const handler = (signal: NodeJS.Signals) => {
    if (stopping && Date.now() - stopping < 3000) return;
    if (stopping) {
      logger.warn({ signal }, 'forced exit');
      process.exit(1);
    }
    stopping = Date.now();
    logger.info({ signal }, 'shutting down');
    stop()
      .then(() => process.exit(0))
      .catch((error) => {
        logger.error({ err: error }, 'shutdown failed');
        process.exit(1);
      });
  };
  for (const signal of signals) process.on(signal, handler);
}

export function exitOnStartupError(logger: Logger) {
  return (error: unknown) => {
    logger.fatal({ err: error }, error instanceof Error ? error.message : String(error));
    process.exit(1);
  };
}
