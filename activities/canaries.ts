import { markCanaryUnanswered } from '../src/db/canaries';
import { canaryHold, createCanary, type CanaryCreated, type CanaryTaskType } from '../src/trust/canaries';
import { createSearchOracle } from '../src/trust/search-oracle';
import type { ActivityDeps } from './deps';

/** A canary's bookkeeping in PostgreSQL (docs/trust.md), run as local activities by the canary workflow. */
export function createCanaryActivities({ db, config }: ActivityDeps) {
  // Built once per worker: the bundled index is read on the first web_search canary.
  const searchOracle = config.canarySearchOracle ? createSearchOracle(config.canarySearchOracle) : null;
  return {
    async createCanary(input: {
      taskId: string;
      solverId: string;
      taskType: CanaryTaskType;
      sent: number;
      workflowId: string;
      timeoutSeconds: number;
      /**
       * Its hold, as its starter found it (a probation check's is lower); workflows started before it was passed
       * hold the ceiling.
       */
      pricePoints?: string;
    }): Promise<CanaryCreated> {
      return createCanary(db, config.trust, {
        ...input,
        canaryHosts: config.canaryHosts,
        pricePoints: input.pricePoints ?? canaryHold(config),
        searchOracle,
      });
    },
    async markCanaryUnanswered(input: { taskId: string }): Promise<void> {
      await markCanaryUnanswered(db, input.taskId);
    },
  };
}
