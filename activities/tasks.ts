import type { AttemptEnd } from '../src/db/tasks/attempts';
import type { ReserveAttemptInput } from '../src/db/matching';
import type { Completion } from '../src/tasks/finish';
import type { TargetFailureVerdict, TaskFailure } from '../src/contract/lifecycle';
import type { ActivityDeps } from './deps';

/**
 * Task bookkeeping in PostgreSQL, run as local activities by the workflow worker: adapters of the task
 * engine (src/tasks/engine.ts), which makes the effects due after each commit. Each is idempotent (keyed
 * by task and attempt ids, money moves keyed in the ledger), so a retry never double-counts. Their names
 * and results are in the histories of running workflows: they stay as they are.
 */
export function createTaskActivities({ engine }: ActivityDeps) {
  return {
    async reserveAttempt(input: ReserveAttemptInput) {
      return engine.reserveAttempt(input);
    },

    /**
     * Ends an attempt; a claim that the target failed is examined first (the service's own check, where
     * it has one). Returns whether it closed the attempt, and how such a claim was judged.
     */
    async closeAttempt(input: AttemptEnd): Promise<{ closed: boolean; targetVerdict: TargetFailureVerdict | null }> {
      return engine.failAttempt(input);
    },

    /** An admin's completion (a solver's result is stored by its dispatch activity). */
    async completeTask(input: {
      taskId: string;
      taskType: string;
      completion: Extract<Completion, { kind: 'admin' }>;
    }) {
      return engine.settleAdminCompletion(input);
    },

    async finishTaskWithoutResult(input: { taskId: string } & TaskFailure) {
      return engine.fail(input.taskId, input);
    },
  };
}
