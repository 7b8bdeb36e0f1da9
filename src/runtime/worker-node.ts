import { Worker } from '@temporalio/worker';
import { createActivities } from '../../activities';
import type { Config } from '../config';
import { createDb } from '../db/pool';
import type { Logger } from '../logger';
import { TaskService } from '../tasks/service';
import { sweepUnstartedTasks } from '../tasks/sweep';
import { workflowBundle } from '../temporal/bundle';
import { createTemporalClient, createWorkerConnection } from '../temporal/connection';
import { installTemporalRuntime } from '../temporal/runtime';

export interface WorkerNode {
  close(): Promise<void>;
}

// A task row whose workflow start was not confirmed this long after creation lost its API node mid-request.
const UNSTARTED_AFTER_SECONDS = 30;
const SWEEP_EVERY_MS = 15_000;

/** A Temporal worker process: runs every workflow and the activities that need only Postgres. */
export async function startWorkerNode(options: { config: Config; logger: Logger; databaseUrl: string; temporalAddress: string }): Promise<WorkerNode> {
  const { config, logger } = options;
  installTemporalRuntime(logger);
  // Local activities of many concurrent workflows share this pool.
  const db = await createDb(options.databaseUrl, { maximumPoolSize: 20 });
  const connection = await createWorkerConnection(options.temporalAddress);
  const temporal = await createTemporalClient(options.temporalAddress, config.temporalNamespace);
  const worker = await Worker.create({
    connection,
    namespace: config.temporalNamespace,
    taskQueue: config.taskQueue,
    workflowBundle: await workflowBundle(logger, config.workflowBundlePath),
    activities: createActivities({ config, db, logger: logger.child({ component: 'activities' }) }),
  });
  const running = worker.run();
  running.catch((error) => logger.error({ err: error }, 'worker stopped with an error'));

  const tasks = new TaskService({ config, db, temporal, logger });
  const sweep = setInterval(() => {
    sweepUnstartedTasks({ db, tasks, logger }, UNSTARTED_AFTER_SECONDS).catch((error) => logger.warn({ err: error }, 'stranded-task sweep failed'));
  }, SWEEP_EVERY_MS);
  sweep.unref();

  logger.info({ task_queue: config.taskQueue }, 'temporal worker started');
  return {
    close: async () => {
      clearInterval(sweep);
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running.catch(() => undefined);
      await connection.close();
      await temporal.connection.close();
      await db.end();
    },
  };
}
