import { sql, type CommonQueryMethods, type DatabasePool } from 'slonik';
import type { TaskPurpose } from '../contract/lifecycle';
import { canaryStillDue } from './canaries';
import { PLATFORM_ACCOUNT_ID } from './ledger';
import { awaitingThird } from './redundant';
import { canaryDueAfter, type TrustPolicy } from './reputation';
import { createTaskWithHold } from './tasks/create';

/**
 * The platform's own tasks (docs/trust.md): canaries and verification runs, created by the one task
 * insert (createTaskWithHold) with their hold on the platform account, together with the row that
 * claims them (a canary; a run's task id), only while they are still due. Their workflow creates them,
 * so they are marked started. Trust decides when to create them; these return what happened.
 */

type Runner = CommonQueryMethods;
type Fragment = ReturnType<typeof sql.fragment>;

/**
 * What creating a platform task did: created, claimed by nothing (no longer due, or claimed before), or the
 * platform cannot pay its hold.
 */
export type PlatformTaskOutcome = 'created' | 'not_claimed' | 'platform_balance';

interface PlatformTask {
  taskId: string;
  taskType: string;
  payload: Record<string, unknown>;
  maxPricePoints: string;
  timeoutSeconds: number;
  workflowId: string;
  country?: string;
}

async function createPlatformTask(
  db: Runner,
  policy: TrustPolicy,
  task: PlatformTask,
  purpose: TaskPurpose,
  claim: Fragment,
): Promise<PlatformTaskOutcome> {
  const { taskId, taskType, payload, maxPricePoints, timeoutSeconds, workflowId, country } = task;
  const outcome = await createTaskWithHold(db, policy, {
    taskId,
    taskType,
    payload,
    maxPricePoints,
    timeoutSeconds,
    workflowId,
    country,
    accountId: PLATFORM_ACCOUNT_ID,
    purpose,
    claim,
  });
  if (outcome.kind === 'created') return 'created';
  if (outcome.kind === 'not_claimed') return 'not_claimed';
  return 'platform_balance';
}

export interface NewCanaryTask extends PlatformTask {
  solverId: string;
  canaryId: string;
  token: string;
  audit: Record<string, unknown> | null;
  page: string | null;
  /** Canaries of the type the solver was sent before this one, as it was found due (canaryStillDue). */
  sent: number;
}

/**
 * Creates a canary, its task and the platform's hold in one statement while the solver is still due it
 * (canaryStillDue), and draws the count of attempts before the solver's next canary of the type. The
 * solver's reputation row is locked first, in the order every settlement of its tasks takes it and the
 * platform's balance row: no deadlock between them.
 */
export async function createCanaryTask(
  db: DatabasePool,
  policy: TrustPolicy,
  canary: NewCanaryTask,
): Promise<PlatformTaskOutcome> {
  const created = db.transaction(async (tx) => {
    await tx.query(
      sql.unsafe`SELECT 1 FROM solver_reputation WHERE solver_id = ${canary.solverId} AND task_type = ${canary.taskType} FOR UPDATE`,
    );
    const claim = sql.fragment`claimed AS (
        INSERT INTO canaries (task_id, canary_id, solver_id, task_type, token, audit, page)
        SELECT
          ${canary.taskId}, ${canary.canaryId}, ${canary.solverId}, ${canary.taskType}, ${canary.token}, ${canary.audit ? sql.jsonb(canary.audit as never) : null}::jsonb, ${canary.page}::text
        WHERE ${canaryStillDue(policy, canary)}
        -- Two starts of one canary at once: the open canary's unique index lets one through.
        ON CONFLICT DO NOTHING
        RETURNING task_id
      ), drawn AS (
        -- A new solver's first canary makes its row: the count to the next one is drawn here too, or
        -- its first verdict would leave none and make it due again at once.
        INSERT INTO solver_reputation AS r (solver_id, task_type, since_canary, canary_due_after)
        SELECT ${canary.solverId}, ${canary.taskType}, 0, ${canaryDueAfter(policy)} WHERE EXISTS (SELECT 1 FROM claimed)
        ON CONFLICT (solver_id, task_type) DO UPDATE SET since_canary = 0, canary_due_after = EXCLUDED.canary_due_after
      )`;
    const outcome = await createPlatformTask(tx, policy, canary, 'canary', claim);
    // An overdraft failed the statement: the transaction is rolled back, nothing of the canary kept.
    if (outcome === 'platform_balance') throw PLATFORM_CANNOT_PAY;
    return outcome;
  });
  return created.catch((error) => {
    if (error === PLATFORM_CANNOT_PAY) return 'platform_balance';
    throw error;
  });
}

const PLATFORM_CANNOT_PAY = new Error('the platform account cannot pay the canary hold');

/** A client task's verification run (docs/trust.md, "Verified client tasks"): its task copies the client's. */
export interface NewRunTask extends PlatformTask {
  clientTaskId: string;
}

/**
 * Creates a verification run's task and its hold, claiming the run for it: the second while the run is
 * pending and has none (`byVerifier`: it goes to verifiers only), the third while its dispute is open
 * and has none.
 */
export async function createRunTask(
  db: Runner,
  policy: TrustPolicy,
  run: NewRunTask & ({ run: 'second'; byVerifier: boolean } | { run: 'third' }),
): Promise<PlatformTaskOutcome> {
  const { clientTaskId, taskId } = run;
  const claim =
    run.run === 'second'
      ? sql.fragment`claimed AS (
          UPDATE redundant_runs SET run_task_id = ${taskId}, by_verifier = ${run.byVerifier}
          WHERE task_id = ${clientTaskId} AND run_task_id IS NULL AND status = 'pending'
          RETURNING task_id)`
      : sql.fragment`claimed AS (
          UPDATE redundant_runs SET third_run_task_id = ${taskId}
          WHERE task_id = ${clientTaskId} AND third_run_task_id IS NULL AND ${awaitingThird(sql.fragment`redundant_runs`)}
          RETURNING task_id)`;
  return createPlatformTask(db, policy, run, 'verification', claim);
}
