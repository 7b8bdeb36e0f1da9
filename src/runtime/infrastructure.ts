import fs from 'node:fs';
import path from 'node:path';
import { processEnvironment, type Config } from '../config';
import { startEmbeddedPostgres } from '../embedded/postgres';
import { resolveTemporalCli, startEmbeddedTemporal } from '../embedded/temporal';
import type { Logger } from '../logger';

export interface Infrastructure {
  databaseUrl: string;
  temporalAddress: string;
  temporalUiUrl?: string;
  /** TEMPORAL_UI_PORT when it was taken and the embedded UI serves on another port. */
  temporalUiPortTaken?: number;
  stop(): Promise<void>;
}

/** External servers when DATABASE_URL / TEMPORAL_ADDRESS are set, embedded ones (under DATA_DIR) otherwise. */
export async function startInfrastructure(config: Config, logger: Logger): Promise<Infrastructure> {
  const stops: (() => Promise<void>)[] = [];
  try {
    let databaseUrl = config.databaseUrl;
    if (!databaseUrl) {
      const postgres = await startEmbeddedPostgres(
        path.join(config.dataDir, 'postgres'),
        logger.child({ component: 'postgres' }),
        processEnvironment(),
      );
      stops.push(postgres.stop);
      databaseUrl = postgres.url;
    }
    let temporalAddress = config.temporalAddress;
    let temporalUiUrl: string | undefined;
    let temporalUiPortTaken: number | undefined;
    if (!temporalAddress) {
      const temporal = await startEmbeddedTemporal({
        cli: resolveTemporalCli(config.rootDir, config.temporalCli),
        dir: path.join(config.dataDir, 'temporal'),
        namespace: config.temporalNamespace,
        logger: logger.child({ component: 'temporal' }),
        preferredPort: 7233,
        uiPort: config.temporalUiPort,
      });
      stops.push(temporal.stop);
      temporalAddress = temporal.address;
      temporalUiUrl = temporal.uiUrl;
      temporalUiPortTaken = temporal.uiPortTaken;
    }
    return {
      databaseUrl,
      temporalAddress,
      temporalUiUrl,
      temporalUiPortTaken,
      stop: async () => {
        for (const stop of stops.reverse()) await stop().catch((error) => logger.warn({ err: error }, 'stop failed'));
      },
    };
  } catch (error) {
    for (const stop of stops.reverse()) await stop().catch(() => undefined);
    throw error;
  }
}

/** Where `npm start` records its embedded endpoints, so `npm run api` / `npm run worker` can join that stack. */
export const stackFile = (config: Config) => path.join(config.dataDir, 'stack.json');

export function writeStackFile(config: Config, endpoints: { databaseUrl: string; temporalAddress: string }) {
  fs.mkdirSync(config.dataDir, { recursive: true });
  fs.writeFileSync(stackFile(config), JSON.stringify({ ...endpoints, pid: process.pid }, null, 2), { mode: 0o600 });
}

export function readStackFile(config: Config): { databaseUrl: string; temporalAddress: string } | undefined {
  try {
    const parsed = JSON.parse(fs.readFileSync(stackFile(config), 'utf8'));
    process.kill(parsed.pid, 0);
    return parsed;
  } catch {
    return undefined;
  }
}

/** The endpoints a standalone api/worker process uses: environment first, then a running `npm start` stack. */
export function externalEndpoints(config: Config): { databaseUrl: string; temporalAddress: string } {
  const stack = readStackFile(config);
  const databaseUrl = config.databaseUrl ?? stack?.databaseUrl;
  const temporalAddress = config.temporalAddress ?? stack?.temporalAddress;
  if (!databaseUrl || !temporalAddress) {
    throw new Error(
      'No database or Temporal to join: set DATABASE_URL and TEMPORAL_ADDRESS, or run `npm start` ' +
        'first (with the same DATA_DIR) so its embedded servers can be shared.',
    );
  }
  return { databaseUrl, temporalAddress };
}
