import { storeArtifacts } from '../src/artifacts/results';
import { deleteUntakenArtifacts } from '../src/tasks/records';
import type { Handoff, ReserveAttemptInput } from '../src/db/matching';
import { closeAttempt, reserveAttempt, type AttemptEnd } from '../src/db/tasks/attempts';
import type { Finished } from '../src/db/tasks/finish';
import { finishTask, type Completion } from '../src/tasks/finish';
import { claimsTargetFailure, type TargetFailureType, type TargetFailureVerdict, type TaskFailure } from '../src/contract/lifecycle';
import { examineTargetClaim } from '../src/trust/target-failures';
import type { DueDelivery } from '../src/db/webhooks';
import type { ActivityDeps } from './deps';

type Told<T> = T extends unknown ? Omit<T, 'handoffs' | 'webhooks'> : never;

/**
 * Task bookkeeping in PostgreSQL, run as local activities by the workflow worker. Each is idempotent
 * (keyed by task and attempt ids, money moves keyed in the ledger), so a retry never double-counts.
 * Their names are in the histories of running workflows: they stay as they are.
 */
export function createTaskActivities({ db, config, handoffs, webhooks, artifacts }: ActivityDeps) {
  // What the workflow is given leaves out the handoffs to other tasks, which are told here, and the
  // webhook deliveries, whose first attempts are made here.
  const told = <T extends { handoffs?: Handoff[]; webhooks?: DueDelivery[] }>(result: T): Told<T> => {
    const { handoffs: handed, webhooks: due, ...rest } = result;
    handoffs.deliver(handed);
    webhooks.send(due);
    return rest as Told<T>;
  };
  return {
    async reserveAttempt(input: ReserveAttemptInput) {
      return told(await reserveAttempt(db, input));
    },

    /**
     * Ends an attempt; a claim that the target failed is examined first (the service's own check, where
     * it has one). Returns whether it closed the attempt, and how such a claim was judged.
     */
    async closeAttempt(input: AttemptEnd): Promise<{ closed: boolean; targetVerdict: TargetFailureVerdict | null }> {
      const claim = claimsTargetFailure(input) ? await examineTargetClaim(db, input.attemptId, input.error!.type as TargetFailureType) : null;
      const { closed, targetVerdict, handoffs: handed } = await closeAttempt(db, { ...input, ...(claim ? { claim } : {}) });
      handoffs.deliver(handed);
      return { closed, targetVerdict };
    },

    /** An admin's completion (a solver's result is stored by its dispatch activity). */
    async completeTask(input: { taskId: string; taskType: string; completion: Extract<Completion, { kind: 'admin' }> }): Promise<Finished> {
      // Written first, as a solver's result is: a write that fails is retried by Temporal, and nothing is settled meanwhile.
      const stored = await storeArtifacts(artifacts, { taskId: input.taskId, scope: 'admin', taskType: input.taskType, result: input.completion.result });
      const completion = stored.keys.length > 0 ? { ...input.completion, stored: stored.parts } : input.completion;
      const outcome = told(await finishTask(db, input.taskId, { completion, feePercent: config.platformFeePercent }));
      if (!outcome.applied) await deleteUntakenArtifacts({ db, artifacts }, input.taskId, stored.keys);
      // An admin's completion takes no particular attempt, so it cannot find one closed.
      if (outcome.attemptClosed) throw new Error(`task ${input.taskId}: an admin completion found an attempt closed`);
      return outcome;
    },

    async finishTaskWithoutResult(input: { taskId: string } & TaskFailure) {
      return told(await finishTask(db, input.taskId, { failure: { status: input.status, error: input.error } }));
    },
  };
}
