import { closeAttempt, completeTask, finishTaskWithoutResult, reserveAttempt, type Completion, type ReserveAttemptInput } from '../src/db/tasks';
import type { AttemptOutcome } from '../src/schemas/domain';
import type { ActivityDeps } from './deps';

/**
 * Task bookkeeping in PostgreSQL, run as local activities by the workflow worker. Each is idempotent
 * (keyed by task and attempt ids, money moves keyed in the ledger), so a retry never double-counts.
 */
export function createTaskActivities({ db, config }: ActivityDeps) {
  return {
    async reserveAttempt(input: ReserveAttemptInput) {
      return reserveAttempt(db, input);
    },

    async closeAttempt(input: { attemptId: string; outcome: AttemptOutcome; error?: { type: string; message: string } }) {
      return closeAttempt(db, input);
    },

    async completeTask(input: { taskId: string; completion: Completion }) {
      return completeTask(db, { ...input, feePercent: config.platformFeePercent });
    },

    async finishTaskWithoutResult(input: { taskId: string; status: 'failed' | 'timed_out'; error: { type: string; message: string } }) {
      return finishTaskWithoutResult(db, input);
    },
  };
}
