import os from 'node:os';
import { Worker } from '@temporalio/worker';
import { createActivities } from '../../activities';
import type { Config } from '../config';
import { pruneAddressCounters } from '../db/address-limits';
import { createArtifactStore } from '../artifacts/store';
import { createDb } from '../db/pool';
import type { Logger } from '../logger';
import { startMetricsListener, type MetricsListener } from '../http/metrics';
import { addMetricsSource } from '../services/metrics-scrape';
import { postgresCheck, Readiness, temporalCheck, workerCheck } from '../services/readiness';
import { SlotHandoffs } from '../tasks/handoffs';
import { NotifyBus } from '../db/notify';
import { TaskEngine } from '../tasks/engine';
import { pgTaskStore } from '../tasks/store';
import { AttemptStops } from '../dispatch/attempt-stops';
import { purgeExpired, RETENTION_SWEEP_EVERY_MS } from '../tasks/retention';
import { vestEarnings, vestingSweepMs } from '../trust/escrow';
import { WebhookDeliveries } from '../webhooks/sender';
import { CrawlRunner } from '../crawl/runner';
import { DomainGuard } from '../guard/domain-guard';
import { TaskFinishedWatch } from '../tasks/finished';
import { NodeWatch } from '../tasks/node-watch';
import { workflowBundle } from '../temporal/bundle';
import { createTemporalClient, createWorkerConnection } from '../temporal/connection';
import { installTemporalRuntime } from '../temporal/runtime';
import { listenForDueCanaries, startDueCanaries } from '../tasks/canary-starter';
import { RedundantRunStarter } from '../tasks/redundant-starter';

export interface WorkerNode {
  /** GET /metrics of this worker, when WORKER_METRICS_PORT is set. */
  metricsUrl?: string;
  /** GET /ready of this worker, on the same listener. */
  readyUrl?: string;
  close(): Promise<void>;
}

// A task row whose workflow start was not confirmed this long after creation lost its API node mid-request.
const UNSTARTED_AFTER_SECONDS = 30;
const SWEEP_EVERY_MS = 15_000;
// A handoff not yet told to its workflow this long after it was recorded lost its sender mid-way.
const UNSENT_AFTER_SECONDS = 5;

/** A Temporal worker process: runs every workflow and the activities that need only Postgres. */
const isLoopbackHost = (host: string) => host === 'localhost' || host === '::1' || host.startsWith('127.');

export async function startWorkerNode(options: {
  config: Config;
  logger: Logger;
  databaseUrl: string;
  temporalAddress: string;
  /**
   * The recovery sweeps' period (also when the first canary and redundant-run sweeps run) and the
   * stranded-task threshold; the defaults suit a deployment. Crash drills shorten them.
   */
  sweeps?: { everyMs: number; unstartedAfterSeconds: number };
}): Promise<WorkerNode> {
  const { config, logger } = options;
  const sweeps = options.sweeps ?? { everyMs: SWEEP_EVERY_MS, unstartedAfterSeconds: UNSTARTED_AFTER_SECONDS };
  installTemporalRuntime(logger);
  // Said where others can reach the service (a local stack's banner says it instead).
  if (config.trust.probationCanaries > 0 && !config.trust.pageCanaries && !isLoopbackHost(config.host)) {
    logger.warn(
      'no canary page can be served (CANARY_HOSTS is unset and ALLOW_PRIVATE_NETWORKS false): ' +
        'proxy_fetch, page_snapshot and screenshot have no canaries and no probation; set ' +
        'CANARY_HOSTS (docs/trust.md, "Canary pages")',
    );
  }
  // Local activities of many concurrent workflows share this pool.
  const db = await createDb(options.databaseUrl, { maximumPoolSize: 20 });
  const connection = await createWorkerConnection(options.temporalAddress);
  const temporal = await createTemporalClient(options.temporalAddress, config.temporalNamespace);
  const handoffs = new SlotHandoffs({ db, temporal, logger, trust: config.trust });
  const artifacts = createArtifactStore(config);
  const webhooks = new WebhookDeliveries({
    config,
    db,
    artifacts,
    temporal,
    logger: logger.child({ component: 'webhooks' }),
    claimant: `worker:${os.hostname()}:${process.pid}`,
  });
  const bus = new NotifyBus(options.databaseUrl, logger);
  await bus.start();
  // Crawls judge every discovered URL by the domain policy, as the API nodes judge a task's target.
  const domainPolicy = new DomainGuard({
    file: config.domainPolicyFile,
    allowPrivateNetworks: config.allowPrivateNetworks,
    logger,
    nodeId: `worker-${os.hostname()}-${process.pid}`,
  });
  await domainPolicy.listen(bus);
  // Only publishes: this process runs no attempts of its own.
  const stops = new AttemptStops(bus);
  const finished = await TaskFinishedWatch.start(bus);
  const engine = new TaskEngine({
    config,
    store: pgTaskStore({ db, trust: config.trust, artifacts }),
    temporal,
    logger,
    eagerStart: false,
    handoffs,
    webhooks,
    artifacts,
    finished,
    stops,
  });
  const crawls = new CrawlRunner({
    config,
    db,
    logger: logger.child({ component: 'crawls' }),
    temporal,
    bus,
    domainPolicy,
    finished,
    engine,
    artifacts,
  });
  const worker = await Worker.create({
    connection,
    namespace: config.temporalNamespace,
    taskQueue: config.taskQueue,
    workflowBundle: await workflowBundle(logger, config.workflowBundlePath),
    activities: createActivities({
      config,
      db,
      logger: logger.child({ component: 'activities' }),
      engine,
      artifacts,
      crawls,
    }),
  });
  const running = worker.run();
  running.catch((error) => logger.error({ err: error }, 'worker stopped with an error'));

  const sweep = setInterval(() => {
    engine
      .sweepUnstarted(sweeps.unstartedAfterSeconds)
      .catch((error) => logger.warn({ err: error }, 'stranded-task sweep failed'));
    handoffs.sweep(UNSENT_AFTER_SECONDS).catch((error) => logger.warn({ err: error }, 'slot handoff sweep failed'));
    // Webhook deliveries whose first attempt's process died, or that could not be handed to their workflow.
    webhooks.sweep().catch((error) => logger.warn({ err: error }, 'webhook sweep failed'));
    pruneAddressCounters(db).catch((error) => logger.warn({ err: error }, 'address counter prune failed'));
  }, sweeps.everyMs);
  sweep.unref();
  // Canaries start as the transactions that make them due commit, announced to every worker. The
  // sweeps (with the first regular sweep, and every CANARY_SWEEP_SECONDS) start those no worker heard
  // of: announced while none listened, or due since the platform account was funded. The first waits
  // for that tick because a worker may start before an API process has migrated the database.
  const canaryDeps = { config, db, temporal, logger: logger.child({ component: 'canaries' }) };
  await listenForDueCanaries(canaryDeps, bus);
  const sweepCanaries = () => {
    startDueCanaries(canaryDeps).catch((error) => logger.warn({ err: error }, 'canary sweep failed'));
  };
  const firstCanarySweep = setTimeout(sweepCanaries, sweeps.everyMs);
  firstCanarySweep.unref();
  const canaries = setInterval(sweepCanaries, config.canarySweepSeconds * 1000);
  canaries.unref();
  // Redundant runs start as the transactions that draw them commit, announced to every worker; the
  // sweeps (with the first regular sweep, and every REDUNDANT_RUN_SWEEP_SECONDS) start those no worker heard of.
  const redundant = new RedundantRunStarter({
    config,
    db,
    temporal,
    logger: logger.child({ component: 'redundant_runs' }),
  });
  await redundant.listen(bus);
  const sweepRedundant = () => {
    redundant.sweep().catch((error) => logger.warn({ err: error }, 'redundant run sweep failed'));
  };
  const firstRedundantSweep = setTimeout(sweepRedundant, sweeps.everyMs);
  firstRedundantSweep.unref();
  const redundantRuns = setInterval(sweepRedundant, config.redundantRunSweepSeconds * 1000);
  redundantRuns.unref();

  // Escrowed earnings vest by time or by passed checks; none while their solver is quarantined.
  const vesting =
    config.trust.vestingSeconds > 0
      ? setInterval(() => {
          vestEarnings(db, config.trust).catch((error) => logger.warn({ err: error }, 'earnings vesting sweep failed'));
        }, vestingSweepMs(config.trust))
      : undefined;
  vesting?.unref();

  // Results past RESULT_RETENTION_SECONDS and idempotency keys past their window (docs/decisions.md, "Retention").
  const retention = setInterval(() => {
    purgeExpired({ db, artifacts }, config.resultRetentionSeconds).catch((error) =>
      logger.warn({ err: error }, 'retention purge failed'),
    );
  }, RETENTION_SWEEP_EVERY_MS);
  retention.unref();

  // An API node's process that dies takes its attempts with it: their workflows are told at once.
  const nodeWatch = new NodeWatch({
    databaseUrl: options.databaseUrl,
    db,
    temporal,
    bus,
    logger: logger.child({ component: 'node_watch' }),
  });
  await nodeWatch.start();

  const removeMetricsSource = addMetricsSource({ db, trust: config.trust });
  const readiness = new Readiness(
    { postgres: postgresCheck(db), temporal: temporalCheck(connection), worker: workerCheck(worker) },
    { logger: logger.child({ component: 'readiness' }) },
  );
  let metrics: MetricsListener | undefined;
  if (config.workerMetricsPort !== undefined) {
    metrics = await startMetricsListener({
      host: config.host,
      port: config.workerMetricsPort,
      keys: { metricsToken: config.metricsToken, adminApiKey: config.adminApiKey },
      logger,
      readiness,
    });
  }

  logger.info({ task_queue: config.taskQueue }, 'temporal worker started');
  return {
    metricsUrl: metrics?.url,
    readyUrl: metrics?.url.replace(/\/metrics$/, '/ready'),
    close: async () => {
      readiness.drain();
      clearInterval(sweep);
      clearTimeout(firstCanarySweep);
      clearInterval(canaries);
      clearTimeout(firstRedundantSweep);
      clearInterval(redundantRuns);
      clearInterval(vesting);
      clearInterval(retention);
      await metrics?.close();
      removeMetricsSource();
      nodeWatch.close();
      await bus.close();
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running.catch(() => undefined);
      await webhooks.drain();
      await connection.close();
      await temporal.connection.close();
      await db.end();
    },
  };
}
