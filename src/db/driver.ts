import { Transform } from 'node:stream';
import {
  createDriverFactory,
  type DriverConfiguration,
  type DriverFactory,
  type DriverStream,
  type DriverStreamResult,
  type DriverTypeParser,
} from '@slonik/driver';
import { parseDsn } from '@slonik/utilities';
import pg from 'pg';
import QueryStream from 'pg-query-stream';
import {
  BackendTerminatedError,
  BackendTerminatedUnexpectedlyError,
  CheckExclusionConstraintViolationError,
  CheckIntegrityConstraintViolationError,
  ForeignKeyIntegrityConstraintViolationError,
  IdleTransactionTimeoutError,
  InputSyntaxError,
  InvalidInputError,
  NotNullIntegrityConstraintViolationError,
  StatementCancelledError,
  StatementTimeoutError,
  UniqueIntegrityConstraintViolationError,
} from 'slonik';
import { StatementCache } from './statement-cache';

/**
 * slonik's PostgreSQL driver, with each connection keeping its parameterised statements prepared (named).
 * PostgreSQL then parses and analyses a statement once per connection instead of on every call, and plans it
 * once as well when it judges a generic plan as good as the custom ones. The creating statement of a task
 * (insert, matching and hold) is large: parsing and planning it was about half of its PostgreSQL time.
 * Everything else (configuration, the configured type parsers, error classes, streams) is what slonik's own
 * driver does; types without a configured parser are read by pg's own parsers.
 */
export function createPreparingDriverFactory(options: { statementsPerConnection: number }): DriverFactory {
  return createDriverFactory(async ({ driverConfiguration }) => {
    const clientConfiguration = clientConfigurationFor(driverConfiguration);
    clientConfiguration.types = {
      getTypeParser: await typeParserLookup(clientConfiguration, driverConfiguration.typeParsers),
    };
    return {
      createPoolClient: async ({ clientEventEmitter }) => {
        const client = new pg.Client(clientConfiguration);
        const statements = new StatementCache(options.statementsPerConnection);
        const onError = (error: Error) => clientEventEmitter.emit('error', wrapError(error, null));
        const onNotice = (notice: { message?: string }) => {
          if (notice.message) clientEventEmitter.emit('notice', { message: notice.message });
        };
        client.on('error', onError);
        client.on('notice', onNotice);
        const run = async (sql: string, values: unknown[] | undefined): Promise<pg.QueryResult> => {
          if (!values || values.length === 0) return client.query(sql, values);
          const { name, evicted } = statements.nameFor(sql);
          if (evicted) await deallocate(client, evicted);
          try {
            return await client.query({ name, text: sql, values });
          } catch (error) {
            if (isStalePreparedStatement(error)) {
              statements.forget(sql);
              await deallocate(client, name);
            }
            throw error;
          }
        };
        return {
          connect: async () => {
            await client.connect();
          },
          end: async () => {
            await client.end();
            client.removeListener('error', onError);
            client.removeListener('notice', onNotice);
          },
          query: async (sql, values) => {
            // Outside a transaction, a statement whose preparation went stale can simply run again.
            const retryable = client.getTransactionStatus() === 'I';
            let result: pg.QueryResult;
            try {
              try {
                result = await run(sql, values);
              } catch (error) {
                if (!(retryable && isStalePreparedStatement(error))) throw error;
                result = await run(sql, values);
              }
            } catch (error) {
              throw wrapError(error as Error, { sql, values: values ?? [] });
            }
            if (Array.isArray(result))
              throw new InvalidInputError('Must not use multiple statements in a single query.');
            return {
              command: result.command as never,
              fields: result.fields.map((field) => ({ dataTypeId: field.dataTypeID, name: field.name })),
              rowCount: result.rowCount,
              rows: result.rows,
            };
          },
          stream: (sql, values) => streamQuery(client, sql, values),
        };
      },
    };
  });
}

/**
 * Dropped from this connection, on the server and from pg's own record of what is parsed. In a failed
 * transaction the server keeps it until the connection closes; its name is never used again.
 */
async function deallocate(client: pg.Client, name: string): Promise<void> {
  const connection = (client as unknown as { connection: { parsedStatements: Record<string, string> } }).connection;
  delete connection.parsedStatements[name];
  await client.query(`DEALLOCATE ${name}`).catch(() => undefined);
}

/**
 * A prepared statement that PostgreSQL no longer has (after a `DISCARD ALL`), or whose result's columns a
 * migration changed since: it is prepared anew, on the next call or, outside a transaction, on this one.
 */
function isStalePreparedStatement(error: unknown): boolean {
  const code = (error as { code?: string }).code;
  const message = (error as Error).message ?? '';
  return code === '26000' || (code === '0A000' && message.includes('cached plan must not change result type'));
}

function clientConfigurationFor(configuration: DriverConfiguration): pg.ClientConfig {
  const dsn = parseDsn(configuration.connectionUri);
  const client: pg.ClientConfig & Record<string, unknown> = {
    application_name: dsn.applicationName,
    database: dsn.databaseName,
    host: dsn.host,
    options: dsn.options,
    password: dsn.password,
    port: dsn.port,
    user: dsn.username,
    // Statements without values go through the extended protocol too, as with slonik's own driver.
    queryMode: 'extended',
    ssl:
      configuration.ssl ??
      (dsn.sslMode === 'require' ? true : dsn.sslMode === 'no-verify' ? { rejectUnauthorized: false } : false),
  };
  // slonik's convention: 0 means "as short as possible", which pg spells 1.
  const timeout = (value: 'DISABLE_TIMEOUT' | number) =>
    value === 'DISABLE_TIMEOUT' ? undefined : value === 0 ? 1 : value;
  client.connectionTimeoutMillis = timeout(configuration.connectionTimeout);
  client.statement_timeout = timeout(configuration.statementTimeout);
  client.idle_in_transaction_session_timeout = timeout(configuration.idleInTransactionSessionTimeout);
  return client;
}

// pg-types' array parser; its published typing describes an older shape.
const arrayParser = pg.types.arrayParser as unknown as {
  create(source: string, transform: (item: string) => unknown): { parse(): unknown[] };
};

/** The configured parsers by type oid (arrays of those types too), pg's own for every other type. */
async function typeParserLookup(configuration: pg.ClientConfig, parsers: readonly DriverTypeParser[]) {
  const client = new pg.Client(configuration);
  await client.connect();
  let types: Array<{ oid: number; typarray: number; typname: string }>;
  try {
    types = (
      await client.query('SELECT oid, typarray, typname FROM pg_type WHERE typname = ANY($1::text[])', [
        parsers.map((parser) => parser.name),
      ])
    ).rows;
  } finally {
    await client.end();
  }
  const byOid = new Map<number, (value: string) => unknown>();
  for (const parser of parsers) {
    const type = types.find((candidate) => candidate.typname === parser.name);
    if (!type) throw new Error(`Database type "${parser.name}" not found.`);
    byOid.set(type.oid, (value) => parser.parse(value));
    if (type.typarray)
      byOid.set(type.typarray, (value) => arrayParser.create(value, (item) => parser.parse(item)).parse());
  }
  return ((oid: number) => byOid.get(oid) ?? pg.types.getTypeParser(oid)) as pg.CustomTypesConfig['getTypeParser'];
}

/** The error classes slonik's own driver maps PostgreSQL's codes to (callers catch them). */
function wrapError(error: Error, query: { sql: string; values: readonly unknown[] } | null): Error {
  const message = error.message.toLowerCase();
  if (message.includes('connection terminated unexpectedly')) return new BackendTerminatedUnexpectedlyError(error);
  if (message.includes('connection terminated')) return new BackendTerminatedError(error);
  const code = (error as { code?: string }).code;
  const cause = error as never;
  switch (code) {
    case '22P02':
      return new InvalidInputError(error.message);
    case '25P03':
      return new IdleTransactionTimeoutError(cause);
    case '57P01':
      return new BackendTerminatedError(cause);
    case '57014':
      return error.message.includes('canceling statement due to user request')
        ? new StatementCancelledError(cause)
        : new StatementTimeoutError(cause);
    case '23502':
      return new NotNullIntegrityConstraintViolationError(cause);
    case '23503':
      return new ForeignKeyIntegrityConstraintViolationError(cause);
    case '23505':
      return new UniqueIntegrityConstraintViolationError(cause);
    case '23P01':
      return new CheckExclusionConstraintViolationError(cause);
    case '23514':
      return new CheckIntegrityConstraintViolationError(cause);
    case '42601':
      return query ? new InputSyntaxError(cause, query as never) : error;
    default:
      return error;
  }
}

function streamQuery(client: pg.Client, sql: string, values: unknown[] | undefined): DriverStream<DriverStreamResult> {
  const stream = client.query(new QueryStream(sql, values));
  let fields: Array<{ dataTypeId: number; name: string }> = [];
  // pg announces the row's fields on its connection only, before the first row.
  (client as unknown as { connection: NodeJS.EventEmitter }).connection.once(
    'rowDescription',
    (description: { fields: Array<{ dataTypeID: number; name: string }> }) => {
      fields = description.fields.map((field) => ({ dataTypeId: field.dataTypeID, name: field.name }));
    },
  );
  const transform = new Transform({
    objectMode: true,
    transform(row, _encoding, callback) {
      this.push({ fields, row });
      callback();
    },
  });
  stream.on('error', (error: Error) => transform.emit('error', wrapError(error, { sql, values: values ?? [] })));
  return stream.pipe(transform) as unknown as DriverStream<DriverStreamResult>;
}
