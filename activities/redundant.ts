import type { RedundantRunState } from '../src/contract/lifecycle';
import { concludeDispute, endRedundantRun } from '../src/db/redundant';
import {
  createRedundantRunTask,
  createThirdRunTask,
  judgeRedundantRun,
  judgeThirdRun,
  type RedundantRunCreated,
} from '../src/trust/redundant';
import type { ActivityDeps } from './deps';

/** A redundant run's bookkeeping in PostgreSQL (docs/trust.md), run as local activities by its workflow. */
export function createRedundantRunActivities({ db, config, engine, artifacts }: ActivityDeps) {
  const policy = config.trust;
  return {
    async createRedundantRunTask(input: {
      clientTaskId: string;
      runTaskId: string;
      workflowId: string;
    }): Promise<RedundantRunCreated> {
      return createRedundantRunTask(db, policy, input);
    },
    async judgeRedundantRun(input: { clientTaskId: string }): Promise<RedundantRunState> {
      return engine.afterCommit(await judgeRedundantRun(db, policy, artifacts, input.clientTaskId)).status;
    },
    async endRedundantRun(input: {
      clientTaskId: string;
      status: 'unanswered' | 'skipped';
      reason: string;
    }): Promise<void> {
      await endRedundantRun(db, input.clientTaskId, input.status, input.reason);
    },
    async createThirdRunTask(input: {
      clientTaskId: string;
      runTaskId: string;
      workflowId: string;
    }): Promise<RedundantRunCreated> {
      return createThirdRunTask(db, policy, input);
    },
    async judgeThirdRun(input: { clientTaskId: string }): Promise<RedundantRunState> {
      return engine.afterCommit(await judgeThirdRun(db, policy, artifacts, input.clientTaskId)).status;
    },
    async concludeDispute(input: { clientTaskId: string; reason: string }): Promise<void> {
      await concludeDispute(db, input.clientTaskId, input.reason);
    },
  };
}
