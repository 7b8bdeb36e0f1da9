import { createRedundantRunTask, endRedundantRun, judgeRedundantRun, type RedundantRunCreated, type RedundantRunState } from '../src/trust/redundant';
import type { ActivityDeps } from './deps';

/** A redundant run's bookkeeping in PostgreSQL (docs/trust.md), run as local activities by its workflow. */
export function createRedundantRunActivities({ db, artifacts }: ActivityDeps) {
  return {
    async createRedundantRunTask(input: { clientTaskId: string; runTaskId: string; workflowId: string }): Promise<RedundantRunCreated> {
      return createRedundantRunTask(db, input);
    },
    async judgeRedundantRun(input: { clientTaskId: string }): Promise<RedundantRunState> {
      return judgeRedundantRun(db, artifacts, input.clientTaskId);
    },
    async endRedundantRun(input: { clientTaskId: string; status: 'unanswered' | 'skipped'; reason: string }): Promise<void> {
      await endRedundantRun(db, input.clientTaskId, input.status, input.reason);
    },
  };
}
