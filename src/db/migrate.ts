import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';

export const MIGRATIONS_DIR = path.resolve(__dirname, '../../migrations');

// Any constant works; it only has to be the same for every process migrating this database.
const MIGRATION_LOCK_ID = 727_001;

export function listMigrations(dir = MIGRATIONS_DIR) {
  return fs
    .readdirSync(dir)
    .filter((file) => /^\d{4}_.+\.sql$/.test(file))
    .sort()
    .map((file) => ({
      version: Number(file.slice(0, 4)),
      name: file,
      text: fs.readFileSync(path.join(dir, file), 'utf8'),
    }));
}

/**
 * Applies pending numbered migrations, each in its own transaction. Migration files are multi-statement
 * scripts (functions, triggers), which slonik refuses by design, so they run on a plain pg client.
 * An advisory lock makes concurrent starts of several API processes safe: one migrates, the others
 * wait and find nothing to do.
 */
export async function migrate(databaseUrl: string, dir = MIGRATIONS_DIR): Promise<string[]> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_ID]);
    await client.query(`
      CREATE TABLE IF NOT EXISTS schema_migrations (
        version integer PRIMARY KEY,
        name text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
      )`);
    const applied = new Set(
      (await client.query('SELECT version FROM schema_migrations')).rows.map((row) => Number(row.version)),
    );
    const done: string[] = [];
    for (const migration of listMigrations(dir)) {
      if (applied.has(migration.version)) continue;
      await client.query('BEGIN');
      try {
        await client.query(migration.text);
        await client.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [
          migration.version,
          migration.name,
        ]);
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK');
        throw new Error(`migration ${migration.name} failed: ${(error as Error).message}`);
      }
      done.push(migration.name);
    }
    return done;
  } finally {
    await client.end();
  }
}

/**
 * Creates the database `name` unless the server already has it, connected as `connection` says (to a
 * database that exists: `postgres`). A fresh embedded cluster has only its default databases.
 */
export async function ensureDatabase(
  connection: { host: string; port: number; user: string; password: string; database: string },
  name: string,
): Promise<void> {
  const client = new pg.Client(connection);
  await client.connect();
  try {
    const found = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (found.rowCount === 0) await client.query(`CREATE DATABASE ${client.escapeIdentifier(name)}`);
  } finally {
    await client.end();
  }
}
