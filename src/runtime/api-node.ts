import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as delay } from 'node:timers/promises';
import { Client } from '@temporalio/client';
import { Worker } from '@temporalio/worker';
import { createActivities, createNodeActivities } from '../../activities';
import { PageAttempts } from '../../activities/page-dispatch';
import { nodeTaskQueue } from '../contract/workflows';
import type { Config } from '../config';
import { readStrongModels } from '../config';
import { ChatRelay } from '../chat/relay';
import { migrate } from '../db/migrate';
import { NODE_STARTED_CHANNEL, PRESENCE_START_WAIT_MS, withNodeSessionName } from '../db/node-presence';
import { NotifyBus } from '../db/notify';
import { createDb } from '../db/pool';
import { heartbeatNode, pruneDeadNodes, recordNodeUrl, removeNode } from '../db/solvers';
import { AttemptStops } from '../dispatch/attempt-stops';
import { EarlyAttempts } from '../dispatch/early-attempts';
import { KeyRevocations } from '../dispatch/key-revocations';
import { SolverHub } from '../dispatch/hub';
import { attachSolverSockets } from '../http/ws-server';
import { AddressLimits } from '../http/address-limits';
import { createArtifactStore } from '../artifacts/store';
import { createApp } from '../http/app';
import { InFlightRequests } from '../http/in-flight-requests';
import { MarketEvents } from '../services/market-events';
import { createServices } from '../services';
import { postgresCheck, Readiness, temporalCheck, workerCheck, workersCheck } from '../services/readiness';
import type { AppDeps } from '../http/deps';
import type { Logger } from '../logger';
import { addMetricsSource } from '../services/metrics-scrape';
import { DomainGuard } from '../guard/domain-guard';
import { TaskFinishedWatch } from '../tasks/finished';
import { RecentPayloads } from '../tasks/recent-payloads';
import { TaskEngine } from '../tasks/engine';
import { pgTaskStore } from '../tasks/store';
import { createWorkerConnection } from '../temporal/connection';
import { SlotHandoffs } from '../tasks/handoffs';
import { WebhookDeliveries } from '../webhooks/sender';
import { CrawlRunner } from '../crawl/runner';
import { workflowBundle } from '../temporal/bundle';
import { installTemporalRuntime } from '../temporal/runtime';
import { warnIfChecksUnfunded } from '../trust/check-funding';

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
  /** Warn at start when the platform account cannot pay the checks (false: the caller funds it, and says so itself). */
  warnUnfundedChecks?: boolean;
}): Promise<ApiNode> {
  const { config } = options;
  const nodeId = options.nodeId ?? config.nodeId ?? `api-${crypto.randomBytes(4).toString('hex')}`;
  const logger = options.logger.child({ node_id: nodeId });
  installTemporalRuntime(logger);
  // Read first: a broken policy file stops the node before it touches anything else.
  const domainPolicy = new DomainGuard({
    file: config.domainPolicyFile,
    allowPrivateNetworks: config.allowPrivateNetworks,
    logger,
    nodeId,
  });
  const applied = await migrate(options.databaseUrl);
  if (applied.length) logger.info({ migrations: applied }, 'database migrated');
  // Every session of the node carries its name, and one holds its presence from before the node is
  // listed: a worker sees the node's process go as its sessions end (src/tasks/node-watch.ts).
  const databaseUrl = withNodeSessionName(options.databaseUrl, nodeId);
  const presence = new NotifyBus(databaseUrl, logger, nodeId);
  const presenceHeld = presence.start();
  presenceHeld.catch(() => undefined);
  await Promise.race([presenceHeld, delay(PRESENCE_START_WAIT_MS, undefined, { ref: false })]);
  const db = await createDb(databaseUrl, { maximumPoolSize: 20 });
  const bus = new NotifyBus(databaseUrl, logger);
  await bus.start();
  await heartbeatNode(db, nodeId);
  const nodeHeartbeat = setInterval(() => {
    heartbeatNode(db, nodeId).catch((error) => logger.warn({ err: error }, 'node heartbeat failed'));
  }, NODE_HEARTBEAT_MS);
  await pruneDeadNodes(db);
  await bus.publish(NODE_STARTED_CHANNEL, { nodeId });
  await domainPolicy.listen(bus);
  // One native connection for this node's workers and its client: a client sharing a worker's
  // connection can start workflows eagerly (the first workflow task comes back with the start call).
  const workerConnection = await createWorkerConnection(options.temporalAddress);
  const temporal = new Client({ connection: workerConnection, namespace: config.temporalNamespace });
  const relay = new ChatRelay({ bus, nodeId, logger });
  await relay.start();
  const stops = new AttemptStops(bus);
  await stops.start();
  const handoffs = new SlotHandoffs({ db, temporal, logger, trust: config.trust });
  const artifacts = createArtifactStore(config);
  const webhooks = new WebhookDeliveries({
    config,
    db,
    artifacts,
    temporal,
    logger: logger.child({ component: 'webhooks' }),
    claimant: `api:${nodeId}`,
  });
  const hub = new SolverHub({
    db,
    logger,
    nodeId,
    trust: config.trust,
    heartbeatIntervalMs: config.heartbeatIntervalMs,
    acceptTimeoutMs: config.acceptTimeoutMs,
    attemptTimeoutMs: config.attemptTimeoutSeconds * 1000,
    // Called only once solvers connect, after the engine below is built (it needs the hub's early attempts).
    handedOn: (handoffs): void => void engine.afterCommit({ handoffs }),
    accepted: (attemptId): Promise<void> => engine.markAccepted(attemptId),
  });
  const revocations = new KeyRevocations({ bus, db, hub, logger });
  await revocations.start();
  const removeMetricsSource = addMetricsSource({ db, trust: config.trust, connectedSolvers: () => hub.connectedCount });
  const payloads = new RecentPayloads();
  const earlyAttempts = new EarlyAttempts({
    hub,
    relay,
    logger,
    nodeId,
    stops,
    acceptTimeoutMs: config.acceptTimeoutMs,
    attemptTimeoutMs: config.attemptTimeoutSeconds * 1000,
    // Called only once an attempt is abandoned, after the engine below is built.
    keepDelivered: (attemptId, usage) => engine.recordDelivered(attemptId, usage),
  });
  handoffs.sendEarlyWith(earlyAttempts);
  const finished = await TaskFinishedWatch.start(bus);
  const engine: TaskEngine = new TaskEngine({
    config,
    store: pgTaskStore({ db, trust: config.trust, artifacts }),
    temporal,
    logger,
    eagerStart: config.apiRunsWorkflows,
    handoffs,
    webhooks,
    artifacts,
    finished,
    stops,
    payloads,
    earlyAttempts,
  });
  const nodeDeps = { config, db, logger, engine, artifacts, hub, relay, stops, payloads, earlyAttempts };
  await new PageAttempts({ ...nodeDeps, temporal, bus, nodeId }).start();
  const worker = await Worker.create({
    connection: workerConnection,
    namespace: config.temporalNamespace,
    taskQueue: nodeTaskQueue(nodeId),
    activities: createNodeActivities(nodeDeps),
    // Dispatch activities mostly wait on sockets; many may be in flight at once, with room to spare above
    // the benchmark's 1,000 held streams. The rare activity task lost under a burst is the Temporal
    // server's (docs/performance.md), not a matter of slots; the workflow reassigns such an attempt.
    maxConcurrentActivityTaskExecutions: 2000,
  });
  const workerRun = worker.run();
  workerRun.catch((error) => logger.error({ err: error }, 'node worker stopped with an error'));
  // Optionally this node also runs workflows, so that the workflows it starts begin here at once.
  const workflowWorker = config.apiRunsWorkflows
    ? await Worker.create({
        connection: workerConnection,
        namespace: config.temporalNamespace,
        taskQueue: config.taskQueue,
        workflowBundle: await workflowBundle(logger, config.workflowBundlePath),
        activities: createActivities({
          config,
          db,
          logger: logger.child({ component: 'activities' }),
          engine,
          artifacts,
          crawls: new CrawlRunner({
            config,
            db,
            logger: logger.child({ component: 'crawls' }),
            temporal,
            bus,
            domainPolicy,
            finished,
            engine,
            artifacts,
          }),
        }),
      })
    : undefined;
  const workflowRun = workflowWorker?.run();
  workflowRun?.catch((error) => logger.error({ err: error }, 'workflow worker stopped with an error'));

  const market = new MarketEvents({ db, bus, logger });
  const services = createServices({ config, db, temporal, engine, artifacts });
  const readiness = new Readiness(
    {
      postgres: postgresCheck(db),
      temporal: temporalCheck(workerConnection),
      // The node's dispatch worker, and its workflow worker when it runs one.
      worker: workersCheck([worker, ...(workflowWorker ? [workflowWorker] : [])].map(workerCheck)),
    },
    { logger: logger.child({ component: 'readiness' }), extra: { node_id: nodeId } },
  );
  const deps: AppDeps = {
    ...services,
    config,
    logger,
    nodeId,
    strongModels: () => readStrongModels(config),
    tasks: engine,
    webhooks,
    relay,
    domainPolicy,
    market,
    artifacts,
    readiness,
  };
  const app = createApp(deps);
  const server = http.createServer(app);
  const requests = new InFlightRequests(server);
  attachSolverSockets(server, {
    findAccountByApiKey: services.accounts.findAccountByApiKey,
    hub,
    revocations,
    addresses: new AddressLimits({ count: services.limits.countAddressRequest, config }),
    logger,
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? config.port, config.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const url = `http://${config.host === '0.0.0.0' ? '127.0.0.1' : config.host}:${port}`;
  logger.info({ url }, 'api listening');
  // Without CANARY_HOSTS, canary pages for the solvers this node holds are served on its port (names under localhost).
  await recordNodeUrl(db, nodeId, url);
  // A deployment whose platform account cannot pay the checks serves no new solver: said at start.
  if (options.warnUnfundedChecks !== false)
    await warnIfChecksUnfunded(db, config.trust, logger).catch((error) =>
      logger.warn({ err: error }, 'could not read the platform account'),
    );
  return {
    url,
    port,
    nodeId,
    hub,
    close: async () => {
      // A balancer probing on a kept-alive connection sees the node go while it drains.
      readiness.drain();
      clearInterval(nodeHeartbeat);
      // Drain: take no new connections and no new attempts (matching forgets this node's solvers), and let
      // the requests in flight finish while their solvers' sockets and this node's dispatch worker stay up.
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      // Consoles' live feeds would otherwise hold the drain for its whole grace.
      market.close();
      const drained = requests.drained(config.shutdownGraceMs);
      await removeNode(db, nodeId).catch((error) => logger.warn({ err: error }, 'could not leave matching'));
      const left = await drained;
      if (left > 0)
        logger.warn(
          { requests: left, grace_ms: config.shutdownGraceMs },
          'requests still in flight after the shutdown grace; closing them',
        );
      server.closeAllConnections();
      // The listener's close waits for the solvers' upgraded sockets too, which the hub closes.
      await hub.close();
      await closed;
      removeMetricsSource();
      if (worker.getState() === 'RUNNING') worker.shutdown();
      if (workflowWorker?.getState() === 'RUNNING') workflowWorker.shutdown();
      await workerRun.catch(() => undefined);
      await workflowRun?.catch(() => undefined);
      // First attempts in flight finish (each is bounded by WEBHOOK_TIMEOUT_MS) and hand a failure on.
      await webhooks.drain();
      await bus.close();
      await workerConnection.close();
      await db.end();
      await presence.close();
    },
  };
}
