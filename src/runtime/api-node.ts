import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Worker } from '@temporalio/worker';
import { createNodeActivities } from '../../activities';
import { nodeTaskQueue } from '../../workflows/contract';
import type { Config } from '../config';
import { readStrongModels } from '../config';
import { ChatRelay } from '../chat/relay';
import { migrate } from '../db/migrate';
import { NotifyBus } from '../db/notify';
import { createDb } from '../db/pool';
import { heartbeatNode, pruneDeadNodes, removeNode } from '../db/solvers';
import { SolverHub } from '../dispatch/hub';
import { attachSolverSockets } from '../dispatch/ws-server';
import { createApp } from '../http/app';
import type { AppDeps } from '../http/deps';
import type { Logger } from '../logger';
import { TaskService } from '../tasks/service';
import { createTemporalClient, createWorkerConnection } from '../temporal/connection';
import { installTemporalRuntime } from '../temporal/runtime';

export interface ApiNode {
  url: string;
  port: number;
  nodeId: string;
  hub: SolverHub;
  close(): Promise<void>;
}

// Liveness heartbeat of this node in api_nodes; matching ignores nodes silent for NODE_LIVENESS_SECONDS.
const NODE_HEARTBEAT_MS = 3000;

/**
 * One API node: the HTTP routes, the sockets of the solvers connected to it, and a Temporal worker on
 * the node's own task queue through which workflows reach those sockets.
 */
export async function startApiNode(options: {
  config: Config;
  logger: Logger;
  databaseUrl: string;
  temporalAddress: string;
  port?: number;
  nodeId?: string;
}): Promise<ApiNode> {
  const { config } = options;
  const nodeId = options.nodeId ?? config.nodeId ?? `api-${crypto.randomBytes(4).toString('hex')}`;
  const logger = options.logger.child({ node_id: nodeId });
  installTemporalRuntime(logger);
  const applied = await migrate(options.databaseUrl);
  if (applied.length) logger.info({ migrations: applied }, 'database migrated');
  const db = await createDb(options.databaseUrl, { maximumPoolSize: 20 });
  await heartbeatNode(db, nodeId);
  const nodeHeartbeat = setInterval(() => {
    heartbeatNode(db, nodeId).catch((error) => logger.warn({ err: error }, 'node heartbeat failed'));
  }, NODE_HEARTBEAT_MS);
  await pruneDeadNodes(db);

  const bus = new NotifyBus(options.databaseUrl, logger);
  await bus.start();
  const temporal = await createTemporalClient(options.temporalAddress, config.temporalNamespace);
  const relay = new ChatRelay({ bus, nodeId, logger });
  await relay.start();
  const hub = new SolverHub({ db, logger, nodeId, heartbeatIntervalMs: config.heartbeatIntervalMs });
  const workerConnection = await createWorkerConnection(options.temporalAddress);
  const worker = await Worker.create({
    connection: workerConnection,
    namespace: config.temporalNamespace,
    taskQueue: nodeTaskQueue(nodeId),
    activities: createNodeActivities({ config, db, logger, hub, relay }),
    // Dispatch activities mostly wait on sockets; many may be in flight at once.
    maxConcurrentActivityTaskExecutions: 1000,
  });
  const workerRun = worker.run();
  workerRun.catch((error) => logger.error({ err: error }, 'node worker stopped with an error'));

  const tasks = new TaskService({ config, db, temporal, logger });
  const deps: AppDeps = { config, db, logger, temporal, nodeId, strongModels: () => readStrongModels(config), tasks, bus, relay };
  const app = createApp(deps);
  const server = http.createServer(app);
  attachSolverSockets(server, { db, hub, logger });
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
    hub,
    close: async () => {
      clearInterval(nodeHeartbeat);
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      await hub.close();
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await workerRun.catch(() => undefined);
      await workerConnection.close();
      await removeNode(db, nodeId).catch(() => undefined);
      await bus.close();
      await temporal.connection.close();
      await db.end();
    },
  };
}
