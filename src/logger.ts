import pino from 'pino';

/** Structured JSON logs. Credentials are redacted wherever they appear in a logged object. */
export function createLogger(level = 'info', name = 'marketplace') {
  return pino({
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
  });
}

export type Logger = pino.Logger;
