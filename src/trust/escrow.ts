import type { CommonQueryMethods } from 'slonik';
import {
  dueToVest,
  earningsOf as storedEarningsOf,
  holdEarningsIn as holdIn,
  vestHold,
  type Earnings,
} from '../db/escrow';
import type { Db } from '../db/pool';
import type { TrustPolicy } from '../db/reputation';

/**
 * Escrowed earnings (docs/trust.md, "Escrow and refunds"): a solver's pay for each task is held as
 * `held:<task id>` when the task settles, and vests (is released to its available points) once
 * EARNINGS_VESTING_SECONDS have passed, or sooner once the solver has passed EARNINGS_VESTING_CHECKS
 * checks since, failed none, and its sequential test has accepted it for the task's type. Nothing vests
 * while the solver is quarantined. The statements: src/db/escrow.ts.
 */

export type { Earnings } from '../db/escrow';

/** Whether a solver's pay is held until it vests (EARNINGS_VESTING_SECONDS above 0). */
export const escrowed = (policy: TrustPolicy) => policy.vestingSeconds > 0;

/**
 * Holds a solver's pay for a task settled in this transaction: it moves from available to held on the
 * solver's account as `held:<task id>`, until it vests (`vestEarnings`), or a quarantine is cleared
 * or confirmed. Without escrow, only a quarantined solver's pay is held.
 */
export async function holdEarningsIn(
  tx: CommonQueryMethods,
  policy: TrustPolicy,
  taskId: string,
  solverId: string,
  earned: string,
): Promise<void> {
  await holdIn(tx, taskId, solverId, earned, { quarantinedOnly: !escrowed(policy) });
}

/**
 * How often a worker vests what is due: often enough that pay vests within a minute of its time, or of a short
 * test period.
 */
export const vestingSweepMs = (policy: TrustPolicy) => Math.max(1, Math.min(60, policy.vestingSeconds)) * 1000;

/** Vests what is due, each hold in its own transaction. Returns how many vested. */
export async function vestEarnings(db: Db, policy: TrustPolicy): Promise<number> {
  if (policy.vestingSeconds === 0) return 0;
  let vested = 0;
  for (const { hold_id: holdId } of await dueToVest(db, policy)) {
    if (await vestHold(db, holdId)) vested += 1;
  }
  return vested;
}

/** An account's pay not vested yet, whether a quarantine freezes it, and when the oldest of it vests by time. */
export async function earningsOf(db: CommonQueryMethods, policy: TrustPolicy, accountId: string): Promise<Earnings> {
  return storedEarningsOf(db, accountId, policy.vestingSeconds);
}
