import {
  createPool,
  createTypeParserPreset,
  SchemaValidationError,
  type DatabasePool,
  type Interceptor,
  type QueryResultRow,
} from 'slonik';
import { createPreparingDriverFactory } from './driver';

export type Db = DatabasePool;

/** Every row of a typed query (`sql.type(Schema)`) is validated against its zod schema. */
const resultParserInterceptor: Interceptor = {
  name: 'result-parser',
  transformRow: (context, query, row, fields) => {
    const parser = context.resultParser;
    if (!parser) return row;
    const parsed = parser.safeParse(row);
    if (!parsed.success) throw new SchemaValidationError(query, row as never, parsed.error.issues);
    return parsed.data as QueryResultRow;
  },
};

// Points are NUMERIC and must stay exact decimal strings; times are served as ISO 8601 UTC.
const typeParsers = [
  ...createTypeParserPreset().filter(
    (parser) => !['numeric', 'timestamptz', 'timestamp', 'int8'].includes(parser.name),
  ),
  { name: 'numeric', parse: (value: string) => value },
  { name: 'int8', parse: (value: string) => Number(value) },
  { name: 'timestamptz', parse: (value: string) => new Date(value).toISOString() },
];

/** The service issues a few dozen distinct statements (26 on a chat's path): the limit only bounds a surprise. */
const STATEMENTS_PER_CONNECTION = 200;

export async function createDb(
  connectionUri: string,
  options: { maximumPoolSize?: number; statementsPerConnection?: number } = {},
): Promise<Db> {
  const pool = await createPool(connectionUri, {
    driverFactory: createPreparingDriverFactory({
      statementsPerConnection: options.statementsPerConnection ?? STATEMENTS_PER_CONNECTION,
    }),
    interceptors: [resultParserInterceptor],
    typeParsers,
    maximumPoolSize: options.maximumPoolSize ?? 10,
    idleTimeout: 10_000,
    connectionTimeout: 10_000,
    captureStackTrace: false,
    // slonik sends DISCARD ALL after every statement by default, and the caller waits for it: a second
    // round trip per statement, and it would drop the connection's prepared statements. These connections
    // keep no other session state (LISTEN and the migration lock use their own connections; settings are
    // only ever transaction-local).
    resetConnection: async () => undefined,
  });
  // slonik also emits each query error on the pool. Unheard, Node would throw ERR_UNHANDLED_ERROR in place
  // of the error itself, and callers could not tell a constraint violation from any other failure.
  pool.on('error', () => undefined);
  return pool;
}
