import { sql, type CommonQueryMethods, type DatabaseTransactionConnection } from 'slonik';
import { z } from 'zod';
import type { RedundantRunState } from '../contract/lifecycle';
import { eligibleSolvers } from './matching';
import { isVerifier, recordRedundantRunStep, type TrustPolicy } from './reputation';

/**
 * The statements of redundant runs (docs/trust.md, "Verified client tasks" and "Redundant runs"): a
 * sampled client task's row, its second and third runs' claims, and the verdicts recorded on it. What
 * is sampled and how results are judged: src/trust/redundant.ts.
 */

type Runner = CommonQueryMethods;
type Fragment = ReturnType<typeof sql.fragment>;

/**
 * A run that waits for its third result: two solvers' (or a verifier's) disagreement, or a chat's first
 * check compared (`r` the run).
 */
export const awaitingThird = (r: Fragment) =>
  sql.fragment`${r}.status IN ('disagreed', 'compared') AND ${r}.concluded_at IS NULL`;

/** The client's result as a run compares it: a chat's with the answer its client was streamed. */
const CLIENT_RESULT = sql.fragment`CASE WHEN r.client_answer IS NULL THEN c.result ELSE COALESCE(c.result, '{}') || r.client_answer END`;

/**
 * NOTIFY channel on which a sampled run is announced as the transaction that drew it commits: every
 * worker listens, and starts its workflow (src/tasks/redundant-starter.ts).
 */
export const REDUNDANT_RUN_DRAWN_CHANNEL = 'redundant_run_drawn';

/**
 * Records a sampled run of a client task and announces it to the workers, delivered as the caller's
 * transaction commits; not when the task's solver is a verifier or the task was drawn before. A chat's
 * keeps the answer its client was streamed and the model of the capability its last attempt was matched
 * to. Returns whether it was recorded.
 */
export async function drawRedundantRunIn(
  tx: Runner,
  task: { taskId: string; taskType: string; solverId: string; answer?: Record<string, unknown> },
): Promise<boolean> {
  const answer = task.answer ? sql.jsonb(task.answer as never) : null;
  const drawn = await tx.query(sql.unsafe`
    WITH drawn AS (
      INSERT INTO redundant_runs (task_id, task_type, first_solver_id, client_answer, model_name)
      SELECT ${task.taskId}, ${task.taskType}, ${task.solverId}, ${answer}::jsonb,
        (SELECT a.model_name FROM task_attempts a WHERE a.task_id = ${task.taskId} ORDER BY a.attempt_number DESC LIMIT 1)
      WHERE NOT ${isVerifier(sql.fragment`${task.solverId}::text`)}
      ON CONFLICT DO NOTHING
      RETURNING task_id
    )
    SELECT pg_notify(${REDUNDANT_RUN_DRAWN_CHANNEL}, json_build_object('task_id', task_id)::text) FROM drawn`);
  return drawn.rowCount > 0;
}

const UnstartedRow = z.object({
  task_id: z.string(),
  task_type: z.string(),
  first_solver_id: z.string(),
  timeout_seconds: z.number(),
});
export type UnstartedRedundantRun = z.infer<typeof UnstartedRow>;

/** Sampled runs whose workflow has not been started, oldest first (or the one of this client task). */
export async function unstartedRedundantRuns(
  db: Runner,
  options: { taskId?: string; limit?: number } = {},
): Promise<readonly UnstartedRedundantRun[]> {
  return db.any(sql.type(UnstartedRow)`
    SELECT r.task_id, r.task_type, r.first_solver_id, t.timeout_seconds
    FROM redundant_runs r JOIN tasks t ON t.task_id = r.task_id
    WHERE r.workflow_started_at IS NULL AND (${options.taskId ?? null}::text IS NULL OR r.task_id = ${options.taskId ?? null})
    ORDER BY r.created_at LIMIT ${options.limit ?? 200}`);
}

export async function markRedundantRunStarted(db: Runner, clientTaskId: string): Promise<void> {
  await db.query(
    sql.unsafe`UPDATE redundant_runs SET workflow_started_at = now() WHERE task_id = ${clientTaskId} AND workflow_started_at IS NULL`,
  );
}

/** Ends a run without a verdict: no second result came (`unanswered`), or none was asked for (`skipped`). */
export async function endRedundantRun(
  db: Runner,
  clientTaskId: string,
  status: 'unanswered' | 'skipped',
  reason: string,
): Promise<void> {
  await db.query(sql.unsafe`
    UPDATE redundant_runs SET status = ${status}, evidence = ${sql.jsonb({ reason })}, judged_at = now(), concluded_at = now(),
      workflow_started_at = COALESCE(workflow_started_at, now())
    WHERE task_id = ${clientTaskId} AND status = 'pending'`);
}

/** Skips these sampled runs not started yet (the platform cannot pay for them): no workflow is started for them. */
export async function skipUnstartedRedundantRuns(
  db: Runner,
  clientTaskIds: readonly string[],
  reason: string,
): Promise<number> {
  const skipped = await db.anyFirst(sql.type(z.object({ task_id: z.string() }))`
    UPDATE redundant_runs SET status = 'skipped', evidence = ${sql.jsonb({ reason })}, judged_at = now(), concluded_at = now(), workflow_started_at = now()
    WHERE task_id = ANY(${sql.array([...clientTaskIds], 'text')}) AND workflow_started_at IS NULL AND status = 'pending'
    RETURNING task_id`);
  return skipped.length;
}

/**
 * What a run's task copies of the client's task: its type, payload as stored, timeout and the country it must be
 * fetched from.
 */
export const ClientTask = z.object({
  task_type: z.string(),
  payload: z.record(z.unknown()),
  timeout_seconds: z.number(),
  country: z.string().nullable(),
  /** A chat's: the model that served it, which its verifier must run. */
  model_name: z.string().nullable(),
});
export type ClientTask = z.infer<typeof ClientTask>;
const CLIENT_TASK_COLUMNS = sql.fragment`t.payload, t.timeout_seconds, t.country, r.model_name`;

/**
 * Whether a run's second result came from a verifier of another country than its client task asks for
 * (`r` the run, its client task's country set, its second run's not): with no verifier of that country
 * online, the run goes to a verifier of any (verifiersOnline). Pages differ by country, so its disagreement
 * proves nothing: it is settled like two other solvers' disagreement, by a third run of that country.
 */
const crossCountry = (r: Fragment) => sql.fragment`(
  (SELECT country FROM tasks WHERE task_id = ${r}.task_id) IS NOT NULL AND (SELECT country FROM tasks WHERE task_id = ${r}.run_task_id) IS NULL)`;

const RunRow = ClientTask.extend({
  run_task_id: z.string().nullable(),
  status: z.string(),
  first_solver_id: z.string(),
  by_verifier: z.boolean(),
  client_price_points: z.string(),
  run_max_price_points: z.string().nullable(),
});
export type RedundantRunRow = z.infer<typeof RunRow>;

/**
 * A sampled run with what its second run's task copies of the client task, and what the client was charged; null
 * when the task was not sampled.
 */
export async function redundantRunOf(db: Runner, clientTaskId: string): Promise<RedundantRunRow | null> {
  return db.maybeOne(sql.type(RunRow)`
    SELECT r.run_task_id, r.status, r.task_type, r.first_solver_id, r.by_verifier, trim_scale(COALESCE(t.price_points, 0))::text AS
      client_price_points, ${CLIENT_TASK_COLUMNS},
           (SELECT trim_scale(rt.max_price_points)::text FROM tasks rt WHERE rt.task_id = r.run_task_id) AS run_max_price_points
    FROM redundant_runs r JOIN tasks t ON t.task_id = r.task_id WHERE r.task_id = ${clientTaskId}`);
}

/**
 * Whether a verifier other than the excluded solvers is online that may take the client task's type:
 * one that declares the task's country (`online`: any when the task asks for none), and, for a task
 * that asks for a country, one of any country (`elsewhere`).
 */
export async function verifiersOnline(
  db: Runner,
  policy: TrustPolicy,
  run: { clientTaskId: string; taskType: string; excludedSolverIds: string[]; strongModels?: string[] },
): Promise<{ online: boolean; elsewhere: boolean }> {
  const { excludedSolverIds, strongModels } = run;
  const country = sql.fragment`(SELECT country FROM tasks WHERE task_id = ${run.clientTaskId})`;
  return db.one(sql.type(z.object({ online: z.boolean(), elsewhere: z.boolean() }))`
    SELECT EXISTS (SELECT 1 ${eligibleSolvers(run.taskType, { policy, excludedSolverIds, verifiersOnly: true, country, strongModels })}) AS online,
           ${country} IS NOT NULL AND EXISTS (SELECT 1 ${eligibleSolvers(run.taskType, { policy, excludedSolverIds, verifiersOnly: true, country: null, strongModels })}) AS elsewhere`);
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
  second_is_verifier: z.boolean(),
  payload: z.record(z.unknown()),
  cross_country: z.boolean(),
});
export type RedundantRunResults = z.infer<typeof ResultsRow>;

/**
 * A run with the client's result and its second run's (when there is one); `locked`: its row locked for the
 * caller's transaction.
 */
export async function redundantRunResults(
  db: Runner,
  clientTaskId: string,
  locked: boolean,
): Promise<RedundantRunResults | null> {
  return db.maybeOne(sql.type(ResultsRow)`
      SELECT r.task_type, r.status, r.first_solver_id, s.solver_id AS second_solver_id, r.run_task_id,
             ${CLIENT_RESULT} AS first_result, s.result AS second_result, s.status AS run_status, c.payload,
             r.by_verifier AND s.solver_id IS NOT NULL AND ${isVerifier(sql.fragment`s.solver_id`)} AS second_is_verifier,
             ${crossCountry(sql.fragment`r`)} AS cross_country
      FROM redundant_runs r JOIN tasks c ON c.task_id = r.task_id LEFT JOIN tasks s ON s.task_id = r.run_task_id
      WHERE r.task_id = ${clientTaskId}
      ${locked ? sql.fragment`FOR UPDATE OF r` : sql.fragment``}`);
}

/**
 * Records a pending run's verdict on its second result (the measure, the similarity, the threshold and
 * the evidence), concluded unless `disagreed` or `compared`, and counts the run for both solvers unless
 * `incomparable` (recordRedundantRunStep), in one statement.
 */
export async function recordSecondVerdictIn(
  tx: Runner,
  verdict: {
    clientTaskId: string;
    status: RedundantRunState;
    taskType: string;
    firstSolverId: string;
    secondSolverId: string;
    comparison: { measure: string | null; similarity: number | null; threshold: number | null };
    evidence: Record<string, unknown>;
    disagreed: boolean;
  },
): Promise<void> {
  const { clientTaskId, status, comparison, evidence } = verdict;
  await tx.query(sql.unsafe`
      WITH judged AS (
        UPDATE redundant_runs SET status = ${status}, second_solver_id = ${verdict.secondSolverId}, measure = ${comparison.measure},
          similarity = ${comparison.similarity}, threshold = ${comparison.threshold}, evidence = ${sql.jsonb(evidence as never)}, judged_at = now(),
          concluded_at = CASE WHEN ${status === 'disagreed' || status === 'compared'} THEN NULL ELSE now() END
        WHERE task_id = ${clientTaskId} AND status = 'pending'
        RETURNING task_id
      ), pair AS (
        SELECT solver_id, ${verdict.taskType}::text AS task_type
        FROM unnest(${sql.array([verdict.firstSolverId, verdict.secondSolverId], 'text')}) AS solver_id
        WHERE EXISTS (SELECT 1 FROM judged) AND ${status !== 'incomparable'}
      ), ${recordRedundantRunStep(verdict.disagreed)}
      SELECT 1`);
}

const ThirdRow = ClientTask.extend({
  status: z.string(),
  by_verifier: z.boolean(),
  cross_country: z.boolean(),
  concluded: z.boolean(),
  first_solver_id: z.string(),
  second_solver_id: z.string().nullable(),
  third_run_task_id: z.string().nullable(),
  client_price_points: z.string(),
});
export type DisputedRunRow = z.infer<typeof ThirdRow>;

/**
 * A run as its third run's task needs it (what it copies of the client task, the two solvers, what the client
 * was charged); null when the task was not sampled.
 */
export async function disputedRunOf(db: Runner, clientTaskId: string): Promise<DisputedRunRow | null> {
  return db.maybeOne(sql.type(ThirdRow)`
    SELECT r.status, r.by_verifier,
      ${crossCountry(sql.fragment`r`)} AS cross_country, r.task_type, r.concluded_at IS NOT NULL AS concluded, r.first_solver_id, r.second_solver_id, r.third_run_task_id, ${CLIENT_TASK_COLUMNS},
           trim_scale(COALESCE(t.price_points, 0))::text AS client_price_points
    FROM redundant_runs r JOIN tasks t ON t.task_id = r.task_id WHERE r.task_id = ${clientTaskId}`);
}

/**
 * Concludes a disputed run without a third verdict (no third solver, its attempt failed, nothing to pay
 * it with): the client task stays `disputed`, and neither solver takes a failure. A verifier's run whose
 * stability check gave no result is `incomparable` instead: its one disagreement proves nothing. (A
 * verifier of another country's run stays `disputed`, like two other solvers'.)
 */
export async function concludeDispute(db: Runner, clientTaskId: string, reason: string): Promise<void> {
  await db.query(sql.unsafe`
    UPDATE redundant_runs SET concluded_at = now(), evidence = evidence || ${sql.jsonb({ third: { reason } })},
      status = CASE WHEN by_verifier AND NOT ${crossCountry(sql.fragment`redundant_runs`)} THEN 'incomparable' ELSE status END
    WHERE task_id = ${clientTaskId} AND ${awaitingThird(sql.fragment`redundant_runs`)}`);
}

const ThirdResultsRow = z.object({
  task_type: z.string(),
  by_verifier: z.boolean(),
  cross_country: z.boolean(),
  first_solver_id: z.string(),
  second_solver_id: z.string(),
  third_solver_id: z.string().nullable(),
  first_result: z.record(z.unknown()).nullable(),
  second_result: z.record(z.unknown()).nullable(),
  third_result: z.record(z.unknown()).nullable(),
  third_status: z.string().nullable(),
  evidence: z.record(z.unknown()),
  payload: z.record(z.unknown()),
});
export type ThirdRunResults = z.infer<typeof ThirdResultsRow>;

/** A disputed run not concluded yet with its three results; `locked`: its row locked for the caller's transaction. */
export async function thirdRunResults(
  db: Runner,
  clientTaskId: string,
  locked: boolean,
): Promise<ThirdRunResults | null> {
  return db.maybeOne(sql.type(ThirdResultsRow)`
      SELECT r.task_type, r.by_verifier,
        ${crossCountry(sql.fragment`r`)} AS cross_country, r.first_solver_id, r.second_solver_id, x.solver_id AS third_solver_id, ${CLIENT_RESULT} AS first_result, s.result AS second_result,
             x.result AS third_result, x.status AS third_status, r.evidence, c.payload
      FROM redundant_runs r JOIN tasks c ON c.task_id = r.task_id JOIN tasks s ON s.task_id = r.run_task_id JOIN tasks x ON x.task_id = r.third_run_task_id
      WHERE r.task_id = ${clientTaskId} AND ${awaitingThird(sql.fragment`r`)}
      ${locked ? sql.fragment`FOR UPDATE OF r` : sql.fragment``}`);
}

/**
 * Concludes a disputed run with its third run's verdict: the third solver, the evidence and the solver proven
 * wrong (or none).
 */
export async function recordThirdVerdictIn(
  tx: DatabaseTransactionConnection,
  verdict: {
    clientTaskId: string;
    status: RedundantRunState;
    thirdSolverId: string | null;
    evidence: Record<string, unknown>;
    wrongSolverId: string | null;
  },
): Promise<void> {
  await tx.query(sql.unsafe`
    UPDATE redundant_runs SET status = ${verdict.status}, third_solver_id = ${verdict.thirdSolverId}, evidence = ${sql.jsonb(verdict.evidence as never)},
      wrong_solver_id = ${verdict.wrongSolverId}, concluded_at = now()
    WHERE task_id = ${verdict.clientTaskId}`);
}

const RedundantRunRecordRow = z.object({
  task_id: z.string(),
  task_type: z.string(),
  status: z.string(),
  first_solver_id: z.string(),
  second_solver_id: z.string().nullable(),
  third_solver_id: z.string().nullable(),
  wrong_solver_id: z.string().nullable(),
  measure: z.string().nullable(),
  similarity: z.number().nullable(),
  threshold: z.number().nullable(),
  evidence: z.record(z.unknown()).nullable(),
  judged_at: z.string().nullable(),
});
export type RedundantRunRecord = z.infer<typeof RedundantRunRecordRow>;

/**
 * A solver's disagreements, on either side, and the runs that proved it wrong, newest first: what an admin reads
 * (GET /v1/admin/solvers/{id}/trust).
 */
export async function disagreementsOf(
  db: Runner,
  solverId: string,
  limit = 50,
): Promise<readonly RedundantRunRecord[]> {
  return db.any(sql.type(RedundantRunRecordRow)`
    SELECT task_id, task_type, status, first_solver_id, second_solver_id, third_solver_id, wrong_solver_id, measure, similarity, threshold, evidence,
           to_char(judged_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS judged_at
    FROM (
      SELECT * FROM redundant_runs WHERE first_solver_id = ${solverId} AND status = 'disagreed'
      UNION SELECT * FROM redundant_runs WHERE second_solver_id = ${solverId} AND status = 'disagreed'
      UNION SELECT * FROM redundant_runs WHERE wrong_solver_id = ${solverId}
    ) r
    ORDER BY created_at DESC LIMIT ${limit}`);
}

/**
 * Chat verifications concluded in the last `withinSeconds`, per model checked and outcome: the triad of
 * the three answers (`client_odd`, `check_odd`, `all_agree`, `undecided`, `incomparable`), or the run's
 * state when it ended without one (`skipped`, `unanswered`, `incomparable`).
 */
export async function recentChatVerifications(db: Runner, withinSeconds: number) {
  const rows = await db.any(sql.type(z.object({ model: z.string(), outcome: z.string(), runs: z.number() }))`
    SELECT COALESCE(model_name, '') AS model, COALESCE(evidence->>'triad', status) AS outcome, count(*)::int AS runs
    FROM redundant_runs
    WHERE task_type = 'chat_completion' AND concluded_at > now() - make_interval(secs => ${withinSeconds})
    GROUP BY 1, 2 ORDER BY 1, 2`);
  return [...rows];
}
