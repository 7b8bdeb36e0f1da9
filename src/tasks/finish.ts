import type { DatabaseTransactionConnection } from 'slonik';
import type { TaskFailure } from '../contract/lifecycle';
import type { MeteredUsage } from '../chat/usage';
import type { Db } from '../db/pool';
import type { TrustPolicy } from '../db/reputation';
import {
  afterFinishing,
  completeTaskIn,
  failTaskIn,
  settleCompletedIn,
  startFinishing,
  type Completed,
  type Finishing,
  type Completion as StoredCompletion,
  type FinishOutcome,
  type Finished,
  type StoredParts,
} from '../db/tasks/finish';
import { judgeCanaryIn } from '../trust/canaries';
import { escrowed, holdEarningsIn } from '../trust/escrow';
import { sampleRedundantRunIn } from '../trust/redundant';
import { contradictTargetClaimsIn } from '../db/target-claims';
import { recordUsageInflationIn } from '../trust/usage-inflation';

/**
 * How tasks end (docs/decisions.md, "Layers"): the statements of src/db/tasks/finish.ts close the attempt,
 * finish the row and settle, and return the facts of what they did; the trust reactions to those facts
 * (canary judgement, target-failure claims, usage inflation, escrow, redundant runs) are called here, in
 * the same transaction, so the money moved and the evidence kept commit together or not at all.
 */

export type Completion =
  /**
   * A solver's validated result for its (still open) attempt; a chat's with its metered usage, whose
   * billed tokens are what a per_token offer charges (src/chat/usage.ts); a client chat's with the answer
   * its client was streamed, kept only if the chat is sampled for verification.
   */
  | {
      kind: 'attempt';
      attemptId: string;
      result: Record<string, unknown>;
      usage?: MeteredUsage;
      answer?: Record<string, unknown>;
      stored?: StoredParts;
    }
  | Extract<StoredCompletion, { kind: 'admin' }>;

/**
 * How a task ends: with a result (settled at its price), or without one (its hold released, or settled at
 * what a chat delivered before its client ended it: src/db/tasks/finish.ts, failTaskIn).
 */
export type TaskEnding = { completion: Completion; feePercent: string } | { failure: TaskFailure; feePercent: string };

/**
 * Finishes a task once, whoever ends it (its solver's result, an admin, its workflow's verdict, a start
 * that failed): the task row moves to its terminal state and its hold is settled or released, in one
 * transaction that first locks the task row, so concurrent endings of one task take turns.
 */
export function finishTask(
  db: Db,
  policy: TrustPolicy,
  taskId: string,
  ending: { failure: TaskFailure; feePercent: string },
): Promise<Finished>;
export function finishTask(db: Db, policy: TrustPolicy, taskId: string, ending: TaskEnding): Promise<FinishOutcome>;
export async function finishTask(
  db: Db,
  policy: TrustPolicy,
  taskId: string,
  ending: TaskEnding,
): Promise<FinishOutcome> {
  const finishing = startFinishing(policy);
  const outcome = await db.transaction((tx): Promise<FinishOutcome> => {
    if ('failure' in ending) return failIn(tx, taskId, ending, finishing);
    return completeIn(tx, taskId, ending, finishing);
  });
  return afterFinishing(db, outcome, finishing);
}

async function failIn(
  tx: DatabaseTransactionConnection,
  taskId: string,
  { failure, feePercent }: { failure: TaskFailure; feePercent: string },
  finishing: Finishing,
): Promise<Finished> {
  const { delivered, ...finished } = await failTaskIn(tx, taskId, failure, finishing);
  // Ended by its client after its chat delivered content: paid as a completed chat's solver is paid.
  if (delivered) {
    const settled = await settleCompletedIn(tx, delivered, feePercent);
    if (settled.applied)
      await reactToSettlement(tx, finishing.policy, delivered, {
        verdict: null,
        metered: undefined,
        solverEarned: settled.solverEarned,
      });
  }
  return finished;
}

async function completeIn(
  tx: DatabaseTransactionConnection,
  taskId: string,
  { completion, feePercent }: { completion: Completion; feePercent: string },
  finishing: Finishing,
): Promise<FinishOutcome> {
  const metered = completion.kind === 'attempt' ? completion.usage : undefined;
  const stored: StoredCompletion =
    completion.kind === 'attempt'
      ? {
          kind: 'attempt',
          attemptId: completion.attemptId,
          result: completion.result,
          ...(metered ? { billed: metered.billed } : {}),
          ...(completion.stored ? { stored: completion.stored } : {}),
        }
      : completion;
  const completing = await completeTaskIn(tx, taskId, stored, finishing);
  if (completing.kind === 'finished_already') return { applied: false, status: completing.status };
  if (completing.kind === 'attempt_closed') return { applied: false, status: completing.status, attemptClosed: true };
  const { completed } = completing;
  const byAttempt = completed.attemptId !== null;
  // Answered after a failed attempt: a claim that its target failed is contradicted.
  if (completed.afterFailedAttempt) await contradictTargetClaimsIn(tx, finishing.policy, taskId, completed.solverId);
  // A canary (a platform task) is judged before it is paid: a failure quarantines its solver now.
  const verdict =
    byAttempt && completed.platform ? await judgeCanaryIn(tx, taskId, completed.solverId, completion.result) : null;
  const settled = await settleCompletedIn(tx, completed, feePercent);
  if (settled.applied)
    await reactToSettlement(tx, finishing.policy, completed, {
      verdict,
      metered,
      solverEarned: settled.solverEarned,
      answer: completion.kind === 'attempt' ? completion.answer : undefined,
    });
  return { applied: true, status: 'completed' };
}

/** The trust reactions to a solver's pay, once the settlement applied. */
async function reactToSettlement(
  tx: DatabaseTransactionConnection,
  policy: TrustPolicy,
  completed: Completed,
  {
    verdict,
    metered,
    solverEarned,
    answer,
  }: {
    verdict: string | null;
    metered: MeteredUsage | undefined;
    solverEarned: string;
    answer?: Record<string, unknown>;
  },
): Promise<void> {
  const { taskId, taskType, accountId, solverId } = completed;
  // A usage report above its bound is evidence against the solver, and may quarantine it (docs/trust.md).
  const inflation = metered?.inflated
    ? await recordUsageInflationIn(tx, policy, { taskId, solverId, taskType, usage: metered })
    : null;
  // Only a solver's own answer is held and sampled, not an admin's completion.
  if (completed.attemptId === null) return;
  // The solver's pay is held until it vests; a quarantined solver's, until an admin decides (docs/trust.md).
  if (escrowed(policy) || completed.quarantined || verdict === 'failed' || inflation?.quarantined)
    await holdEarningsIn(tx, policy, taskId, solverId, solverEarned);
  // A fraction of client web tasks and chats is run again by another solver once this commits (docs/trust.md).
  await sampleRedundantRunIn(tx, policy, { taskId, taskType, accountId, solverId, answer });
}
