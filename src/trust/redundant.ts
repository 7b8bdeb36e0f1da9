import { resolveArtifacts } from '../artifacts/results';
import type { ArtifactStore } from '../artifacts/store';
import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import { holdSteps, isOverdraft, PLATFORM_ACCOUNT_ID } from '../db/ledger';
import { WEB_TASK_TYPES, type WebTaskType } from '../schemas/domain';
import { recordRedundantRunStep, trustPolicy } from './reputation';
import { compareResults, disagrees } from './similarity';

/**
 * Sampled redundant execution (docs/trust.md, "Redundant runs"): a fraction of client web tasks is run
 * again, after the client has its answer, by a second solver for the platform's account, and the two
 * results are compared (src/trust/similarity.ts). A disagreement is recorded against both solvers.
 */

type Runner = CommonQueryMethods;

/** The states of a redundant run: waiting for its second result, judged, or ended without a verdict. */
export const REDUNDANT_RUN_STATES = Object.freeze(['pending', 'agreed', 'disagreed', 'incomparable', 'unanswered', 'skipped'] as const);
export type RedundantRunState = (typeof REDUNDANT_RUN_STATES)[number];

/** The workflow id of a client task's redundant run, and its TaskType search attribute value. */
export const redundantWorkflowId = (clientTaskId: string) => `redundant-${clientTaskId}`;
export const redundantSearchTaskType = (taskType: string) => `redundant_${taskType}`;

const isWebTaskType = (taskType: string): taskType is WebTaskType => (WEB_TASK_TYPES as readonly string[]).includes(taskType);

/**
 * NOTIFY channel on which a sampled run is announced as the transaction that drew it commits: every
 * worker listens, and starts its workflow (src/trust/redundant-starter.ts).
 */
export const REDUNDANT_RUN_DRAWN_CHANNEL = 'redundant_run_drawn';

/**
 * In the transaction that settles a client's web task with its solver's result: draws whether it is
 * run again, and if so records the run and announces it to the workers, delivered as this transaction
 * commits. Nothing else happens here, so the client's answer (announced at the same commit) waits for
 * nothing; the other 98% of tasks (at the default rate) do not even send a statement.
 */
export async function sampleRedundantRunIn(tx: Runner, task: { taskId: string; taskType: string; accountId: string; solverId: string }): Promise<boolean> {
  const { redundantRunFraction } = trustPolicy();
  if (redundantRunFraction <= 0 || task.accountId === PLATFORM_ACCOUNT_ID || !isWebTaskType(task.taskType)) return false;
  if (Math.random() >= redundantRunFraction) return false;
  await tx.query(sql.unsafe`
    WITH drawn AS (
      INSERT INTO redundant_runs (task_id, task_type, first_solver_id) VALUES (${task.taskId}, ${task.taskType}, ${task.solverId})
      ON CONFLICT DO NOTHING
      RETURNING task_id
    )
    SELECT pg_notify(${REDUNDANT_RUN_DRAWN_CHANNEL}, json_build_object('task_id', task_id)::text) FROM drawn`);
  return true;
}

const UnstartedRow = z.object({ task_id: z.string(), task_type: z.string(), first_solver_id: z.string(), timeout_seconds: z.number() });
export type UnstartedRedundantRun = z.infer<typeof UnstartedRow>;

/** Sampled runs whose workflow has not been started, oldest first (or the one of this client task). */
export async function unstartedRedundantRuns(db: Runner, options: { taskId?: string; limit?: number } = {}): Promise<readonly UnstartedRedundantRun[]> {
  return db.any(sql.type(UnstartedRow)`
    SELECT r.task_id, r.task_type, r.first_solver_id, t.timeout_seconds
    FROM redundant_runs r JOIN tasks t ON t.task_id = r.task_id
    WHERE r.workflow_started_at IS NULL AND (${options.taskId ?? null}::text IS NULL OR r.task_id = ${options.taskId ?? null})
    ORDER BY r.created_at LIMIT ${options.limit ?? 200}`);
}

export async function markRedundantRunStarted(db: Runner, clientTaskId: string): Promise<void> {
  await db.query(sql.unsafe`UPDATE redundant_runs SET workflow_started_at = now() WHERE task_id = ${clientTaskId} AND workflow_started_at IS NULL`);
}

/** Ends a run without a verdict: no second result came (`unanswered`), or none was asked for (`skipped`). */
export async function endRedundantRun(db: Runner, clientTaskId: string, status: 'unanswered' | 'skipped', reason: string): Promise<void> {
  await db.query(sql.unsafe`
    UPDATE redundant_runs SET status = ${status}, evidence = ${sql.jsonb({ reason })}, judged_at = now(), workflow_started_at = COALESCE(workflow_started_at, now())
    WHERE task_id = ${clientTaskId} AND status = 'pending'`);
}

/** Skips these sampled runs not started yet (the platform cannot pay for them): no workflow is started for them. */
export async function skipUnstartedRedundantRuns(db: Runner, clientTaskIds: readonly string[], reason: string): Promise<number> {
  const skipped = await db.anyFirst(sql.type(z.object({ task_id: z.string() }))`
    UPDATE redundant_runs SET status = 'skipped', evidence = ${sql.jsonb({ reason })}, judged_at = now(), workflow_started_at = now()
    WHERE task_id = ANY(${sql.array([...clientTaskIds], 'text')}) AND workflow_started_at IS NULL AND status = 'pending'
    RETURNING task_id`);
  return skipped.length;
}

/** What creating a run's task did: the task to run (its cap and the solver to leave out), or why there is none. */
export type RedundantRunCreated =
  | { created: true; runTaskId: string; maxPricePoints: string; firstSolverId: string }
  | { created: false; reason: 'not_found' | 'judged' | 'platform_balance' };

const RunRow = z.object({ run_task_id: z.string().nullable(), status: z.string(), first_solver_id: z.string(), max_price_points: z.string() });

/**
 * Creates the platform's task that runs a client's task again (its payload as stored, its timeout, the
 * country it must be fetched from) and the platform's hold for its price cap, in one statement. The cap
 * is what the client was charged, not the client's cap: a client and a solver priced above the first one
 * could otherwise farm the platform (the client pays 1, the platform pays the colluding solver up to the
 * client's cap). The client's account is not touched. Its workflow is already running (it calls this),
 * so the task is marked started. Idempotent by client task: a second call finds the task the first created.
 */
export async function createRedundantRunTask(db: Runner, input: { clientTaskId: string; runTaskId: string; workflowId: string }): Promise<RedundantRunCreated> {
  const run = await db.maybeOne(sql.type(RunRow)`
    SELECT r.run_task_id, r.status, r.first_solver_id, trim_scale(COALESCE(t.price_points, 0))::text AS max_price_points
    FROM redundant_runs r JOIN tasks t ON t.task_id = r.task_id WHERE r.task_id = ${input.clientTaskId}`);
  if (!run) return { created: false, reason: 'not_found' };
  // Ended already: nothing is sent again, whoever asks.
  if (run.status !== 'pending') return { created: false, reason: 'judged' };
  if (run.run_task_id) return { created: true, runTaskId: run.run_task_id, maxPricePoints: run.max_price_points, firstSolverId: run.first_solver_id };
  const row = await db
    .maybeOne(sql.type(z.object({ task_id: z.string() }))`
      WITH claimed AS (
        UPDATE redundant_runs SET run_task_id = ${input.runTaskId}
        WHERE task_id = ${input.clientTaskId} AND run_task_id IS NULL AND status = 'pending'
        RETURNING task_id
      ), inserted AS (
        INSERT INTO tasks (task_id, account_id, task_type, payload, max_price_points, timeout_seconds, workflow_id, status, workflow_started_at, country)
        SELECT ${input.runTaskId}, ${PLATFORM_ACCOUNT_ID}, t.task_type, t.payload, ${run.max_price_points}::numeric, t.timeout_seconds, ${input.workflowId}, 'queued', now(), t.country
        FROM tasks t JOIN claimed c ON c.task_id = t.task_id
        RETURNING task_id
      ), ${holdSteps(sql.fragment`SELECT task_id AS hold_id FROM inserted`, PLATFORM_ACCOUNT_ID, run.max_price_points)}
      SELECT task_id FROM inserted`)
    .catch((error) => {
      if (isOverdraft(error)) return 'overdraft' as const;
      throw error;
    });
  if (row === 'overdraft') {
    await endRedundantRun(db, input.clientTaskId, 'skipped', 'platform_balance');
    return { created: false, reason: 'platform_balance' };
  }
  // Another call claimed it meanwhile: its task is the one.
  if (!row) return createRedundantRunTask(db, input);
  return { created: true, runTaskId: row.task_id, maxPricePoints: run.max_price_points, firstSolverId: run.first_solver_id };
}

const ResultsRow = z.object({
  task_type: z.string(),
  status: z.string(),
  first_solver_id: z.string(),
  second_solver_id: z.string().nullable(),
  run_task_id: z.string().nullable(),
  first_result: z.record(z.unknown()).nullable(),
  second_result: z.record(z.unknown()).nullable(),
  run_status: z.string().nullable(),
});

/**
 * Compares a run's second result with the client's and records the verdict: the measure, the
 * similarity, the threshold and what each side looked like; both solvers' reputation counts the run,
 * and a disagreement counts against both. Once: a run already judged is left as it is.
 */
export async function judgeRedundantRun(db: Runner, artifacts: ArtifactStore, clientTaskId: string): Promise<RedundantRunState> {
  const run = await db.maybeOne(sql.type(ResultsRow)`
    SELECT r.task_type, r.status, r.first_solver_id, s.solver_id AS second_solver_id, r.run_task_id,
           c.result AS first_result, s.result AS second_result, s.status AS run_status
    FROM redundant_runs r JOIN tasks c ON c.task_id = r.task_id LEFT JOIN tasks s ON s.task_id = r.run_task_id
    WHERE r.task_id = ${clientTaskId}`);
  if (!run) return 'skipped';
  if (run.status !== 'pending') return run.status as RedundantRunState;
  if (run.run_status !== 'completed' || !run.first_result || !run.second_result || !run.second_solver_id || !isWebTaskType(run.task_type)) {
    await endRedundantRun(db, clientTaskId, 'unanswered', 'no second result');
    return 'unanswered';
  }
  const [first, second] = await Promise.all([resolveArtifacts(artifacts, run.first_result), resolveArtifacts(artifacts, run.second_result)]);
  const comparison = compareResults(run.task_type, first, second);
  const disagreed = disagrees(comparison);
  const status: RedundantRunState = comparison.similarity === null ? 'incomparable' : disagreed ? 'disagreed' : 'agreed';
  const evidence = {
    client_task_id: clientTaskId,
    run_task_id: run.run_task_id,
    first: { solver_id: run.first_solver_id, ...comparison.first },
    second: { solver_id: run.second_solver_id, ...comparison.second },
  };
  const judged = await db.oneFirst(sql.type(z.object({ judged: z.boolean() }))`
    WITH judged AS (
      UPDATE redundant_runs SET status = ${status}, second_solver_id = ${run.second_solver_id}, measure = ${comparison.measure},
        similarity = ${comparison.similarity}, threshold = ${comparison.threshold}, evidence = ${sql.jsonb(evidence)}, judged_at = now()
      WHERE task_id = ${clientTaskId} AND status = 'pending'
      RETURNING task_id
    ), pair AS (
      SELECT solver_id, ${run.task_type}::text AS task_type
      FROM unnest(${sql.array([run.first_solver_id, run.second_solver_id], 'text')}) AS solver_id
      WHERE EXISTS (SELECT 1 FROM judged) AND ${status !== 'incomparable'}
    ), ${recordRedundantRunStep(disagreed)}
    SELECT EXISTS (SELECT 1 FROM judged) AS judged`);
  return judged ? status : judgeRedundantRun(db, artifacts, clientTaskId);
}

const RedundantRunRow = z.object({
  task_id: z.string(),
  task_type: z.string(),
  status: z.string(),
  first_solver_id: z.string(),
  second_solver_id: z.string().nullable(),
  measure: z.string().nullable(),
  similarity: z.number().nullable(),
  threshold: z.number().nullable(),
  evidence: z.record(z.unknown()).nullable(),
  judged_at: z.string().nullable(),
});
export type RedundantRunRecord = z.infer<typeof RedundantRunRow>;

/** A solver's disagreements, on either side, newest first: what an admin reads (GET /v1/admin/solvers/{id}/trust). */
export async function disagreementsOf(db: Runner, solverId: string, limit = 50): Promise<readonly RedundantRunRecord[]> {
  return db.any(sql.type(RedundantRunRow)`
    SELECT task_id, task_type, status, first_solver_id, second_solver_id, measure, similarity, threshold, evidence,
           to_char(judged_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS judged_at
    FROM (
      SELECT * FROM redundant_runs WHERE first_solver_id = ${solverId} AND status = 'disagreed'
      UNION SELECT * FROM redundant_runs WHERE second_solver_id = ${solverId} AND status = 'disagreed'
    ) r
    ORDER BY created_at DESC LIMIT ${limit}`);
}
