import { Worker } from '@temporalio/worker';
import { createActivities } from '../../activities';
import type { Config } from '../config';
import { createDb } from '../db/pool';
import type { Logger } from '../logger';
import { workflowBundle } from '../temporal/bundle';
import { createWorkerConnection } from '../temporal/connection';
import { installTemporalRuntime } from '../temporal/runtime';

export interface WorkerNode {
  close(): Promise<void>;
}

/** A Temporal worker process: runs every workflow and the activities that need only Postgres. */
export async function startWorkerNode(options: { config: Config; logger: Logger; databaseUrl: string; temporalAddress: string }): Promise<WorkerNode> {
  const { config, logger } = options;
  installTemporalRuntime(logger);
  const db = await createDb(options.databaseUrl);
  const connection = await createWorkerConnection(options.temporalAddress);
  const worker = await Worker.create({
    connection,
    namespace: config.temporalNamespace,
    taskQueue: config.taskQueue,
    workflowBundle: await workflowBundle(logger, config.workflowBundlePath),
    activities: createActivities({ config, db, logger: logger.child({ component: 'activities' }) }),
  });
  const running = worker.run();
  running.catch((error) => logger.error({ err: error }, 'worker stopped with an error'));
  logger.info({ task_queue: config.taskQueue }, 'temporal worker started');
  return {
    close: async () => {
      if (worker.getState() === 'RUNNING') worker.shutdown();
      await running.catch(() => undefined);
      await connection.close();
      await db.end();
    },
  };
}
