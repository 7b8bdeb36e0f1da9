import { DefaultLogger, Runtime, type LogLevel } from '@temporalio/worker';
import type { Logger } from '../logger';

let installed = false;

/** Routes the Temporal SDK's own logs into our JSON logger (once per process, before any worker exists). */
export function installTemporalRuntime(logger: Logger) {
  if (installed) return;
  installed = true;
  const target = logger.child({ component: 'temporal-sdk' });
  const levels: Record<LogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = {
    TRACE: 'trace',
    DEBUG: 'debug',
    INFO: 'debug',
    WARN: 'warn',
    ERROR: 'error',
  };
  Runtime.install({
    // Our entry points handle SIGINT/SIGTERM and stop the workers in order themselves.
    shutdownSignals: [],
    logger: new DefaultLogger('WARN', (entry) => {
      // API nodes' workers run activities only; that is by design, not a warning.
      const level = entry.message.startsWith('No workflows registered') ? 'debug' : levels[entry.level];
      target[level]({ ...entry.meta }, entry.message);
    }),
  });
}
