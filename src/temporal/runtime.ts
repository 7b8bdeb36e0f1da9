import { DefaultLogger, Runtime, type LogLevel } from '@temporalio/worker';
import type { Logger } from '../logger';

let installed = false;

const LEVELS: Record<LogLevel, 'trace' | 'debug' | 'info' | 'warn' | 'error'> = {
  TRACE: 'trace',
  DEBUG: 'debug',
  INFO: 'debug',
  WARN: 'warn',
  ERROR: 'error',
};

// Warnings of the SDK that describe how this service works, not a fault.
const EXPECTED = [
  // API nodes' workers run activities only.
  /^No workflows registered/,
  // An activity finishing after its workflow closed: a chat whose client left, or a task an admin completed.
  /^Activity not found on completion/,
];

/** The level at which one of the SDK's log messages is logged here. */
export function sdkLogLevel(level: LogLevel, message: string) {
  return EXPECTED.some((pattern) => pattern.test(message)) ? 'debug' : LEVELS[level];
}

/**
 * Routes the Temporal SDK's own logs, its native core's included, into our JSON logger (once per
 * process, before any worker exists).
 */
export function installTemporalRuntime(logger: Logger) {
  if (installed) return;
  installed = true;
  const target = logger.child({ component: 'temporal-sdk' });
  Runtime.install({
    // Our entry points handle SIGINT/SIGTERM and stop the workers in order themselves.
    shutdownSignals: [],
    logger: new DefaultLogger('WARN', (entry) =>
      target[sdkLogLevel(entry.level, entry.message)]({ ...entry.meta }, entry.message),
    ),
    // Without `forward`, the core would print its own lines to the console, outside our log format.
    telemetryOptions: { logging: { filter: { core: 'WARN', other: 'ERROR' }, forward: {} } },
  });
}
