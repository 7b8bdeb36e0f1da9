import pino from 'pino';
import pretty from 'pino-pretty';

export const LOG_FORMATS = ['json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/** LOG_FORMAT when set; otherwise readable lines on a terminal and JSON everywhere else (files, pipes, collectors). */
export const logFormatOf = (configured: LogFormat | undefined, isTTY = Boolean(process.stdout.isTTY)): LogFormat =>
  configured ?? (isTTY ? 'pretty' : 'json');

/** Logs as JSON or readable lines. Credentials are redacted wherever they appear in a logged object. */
export function createLogger(level = 'info', name = 'marketplace', format: LogFormat = 'json') {
  const options: pino.LoggerOptions = {
    name,
    level,
    redact: {
      paths: [
        'api_key',
        '*.api_key',
        'authorization',
        '*.authorization',
        'req.headers.authorization',
        'req.headers["x-admin-api-key"]',
        'req.headers["admin_api_key"]',
        'headers.authorization',
        'databaseUrl',
        'adminApiKey',
      ],
      censor: '[redacted]',
    },
  };
  if (format === 'json') return pino(options);
  // In this thread and synchronous, so the last lines before an exit (a start-up error) are printed.
  return pino(
    options,
    pretty({
      sync: true,
      colorize: Boolean(process.stdout.isTTY),
      translateTime: 'SYS:HH:MM:ss.l',
      ignore: 'pid,hostname',
      singleLine: true,
    }),
  );
}

export type Logger = pino.Logger;
