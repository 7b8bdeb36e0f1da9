import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Config } from '../config';
import { readStrongModels } from '../config';
import { migrate } from '../db/migrate';
import { createDb } from '../db/pool';
import { createApp } from '../http/app';
import type { AppDeps } from '../http/deps';
import type { Logger } from '../logger';
import { createTemporalClient } from '../temporal/connection';

export interface ApiNode {
  url: string;
  port: number;
  nodeId: string;
  close(): Promise<void>;
}

/** One API node: HTTP routes, and (with the dispatch service) the sockets of the solvers connected to it. */
export async function startApiNode(options: {
  config: Config;
  logger: Logger;
  databaseUrl: string;
  temporalAddress: string;
  port?: number;
}): Promise<ApiNode> {
  const { config } = options;
  const nodeId = config.nodeId ?? `api-${crypto.randomBytes(4).toString('hex')}`;
  const logger = options.logger.child({ node_id: nodeId });
  const db = await createDb(options.databaseUrl, { maximumPoolSize: 20 });
  const applied = await migrate(options.databaseUrl);
  if (applied.length) logger.info({ migrations: applied }, 'database migrated');
  const temporal = await createTemporalClient(options.temporalAddress, config.temporalNamespace);
  const deps: AppDeps = { config, db, logger, temporal, nodeId, strongModels: () => readStrongModels(config) };
  const app = createApp(deps);
  const server = http.createServer(app);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? config.port, config.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const url = `http://${config.host === '0.0.0.0' ? '127.0.0.1' : config.host}:${port}`;
  logger.info({ url }, 'api listening');
  return {
    url,
    port,
    nodeId,
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await temporal.connection.close();
      await db.end();
    },
  };
}
