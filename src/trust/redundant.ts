import { sql, type CommonQueryMethods, type DatabaseTransactionConnection } from 'slonik';
import { resolveArtifacts } from '../artifacts/results';
import type { ArtifactStore } from '../artifacts/store';
import { z } from 'zod';
import { eligibleSolvers } from '../db/matching';
import { PLATFORM_ACCOUNT_ID } from '../db/ledger';
import { createRunTask } from '../db/platform-tasks';
import type { Db } from '../db/pool';
import { countedProofFromAccountIn, refundTask } from '../db/verification';
import type { DueDelivery } from '../db/webhooks';
import { WEB_TASK_TYPES, type WebTaskType } from '../schemas/domain';
import { isVerifier, recordRedundantRunStep, type TrustPolicy } from '../db/reputation';
import { compareResults, disagrees, type Comparison } from './similarity';
import { highestVerificationRate, verificationRate } from './sprt';
import { verificationRecordOf } from '../db/verifiers';
import { recordVerifiedOutcomeIn } from './verifiers';

/**
 * Verified client tasks (docs/trust.md, "Verified client tasks" and "Redundant runs"): a sampled client
 * web task is run again, after the client has its answer, for the platform's account, by a verifier
 * when one is online for the type, else by another solver, and the results are compared
 * (src/trust/similarity.ts). A verifier's disagreement proves the client's result wrong; two other
 * solvers' disagreement sends a third run, and the odd one out is proven wrong.
 */

type Runner = CommonQueryMethods;

/**
 * The states of a redundant run: waiting for its second result; judged (`refuted`: the client's result
 * proven wrong, `upheld`: the second run was the odd one out); or ended without a verdict.
 */
export const REDUNDANT_RUN_STATES = Object.freeze(['pending', 'agreed', 'disagreed', 'incomparable', 'unanswered', 'skipped', 'refuted', 'upheld'] as const);
export type RedundantRunState = (typeof REDUNDANT_RUN_STATES)[number];

export { redundantSearchTaskType, redundantWorkflowId } from '../contract/workflows';

const isWebTaskType = (taskType: string): taskType is WebTaskType => (WEB_TASK_TYPES as readonly string[]).includes(taskType);

/**
 * NOTIFY channel on which a sampled run is announced as the transaction that drew it commits: every
 * worker listens, and starts its workflow (src/trust/redundant-starter.ts).
 */
export const REDUNDANT_RUN_DRAWN_CHANNEL = 'redundant_run_drawn';

/**
 * In the transaction that settles a client's web task with its solver's result: draws whether it is
 * verified, and if so records the run and announces it to the workers, delivered as this transaction
 * commits. The rate is the solver's for the type (`verificationRate`: high for a newcomer, falling to
 * REDUNDANT_RUN_FRACTION with its verified passes, up again for a while after a result proven wrong);
 * only a draw between that floor and the highest rate reads the solver's record (one primary-key
 * lookup: about half the tasks at the defaults).
 * A verifier's own tasks are not drawn: it is the reference.
 */
export async function sampleRedundantRunIn(
  tx: Runner,
  policy: TrustPolicy,
  task: { taskId: string; taskType: string; accountId: string; solverId: string },
): Promise<boolean> {
  const { redundantRunFraction: floor, verificationStartFraction: start } = policy;
  const ceiling = highestVerificationRate(start, floor);
  if (ceiling <= 0 || task.accountId === PLATFORM_ACCOUNT_ID || !isWebTaskType(task.taskType)) return false;
  const draw = Math.random();
  if (draw >= ceiling) return false;
  if (draw >= floor) {
    const record = await verificationRecordOf(tx, task.solverId, task.taskType);
    if (draw >= verificationRate(record.verified_passes, start, floor, record.verified_since_failure)) return false;
  }
  const drawn = await tx.query(sql.unsafe`
    WITH drawn AS (
      INSERT INTO redundant_runs (task_id, task_type, first_solver_id)
      SELECT ${task.taskId}, ${task.taskType}, ${task.solverId} WHERE NOT ${isVerifier(sql.fragment`${task.solverId}::text`)}
      ON CONFLICT DO NOTHING
      RETURNING task_id
    )
    SELECT pg_notify(${REDUNDANT_RUN_DRAWN_CHANNEL}, json_build_object('task_id', task_id)::text) FROM drawn`);
  return drawn.rowCount > 0;
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
    UPDATE redundant_runs SET status = ${status}, evidence = ${sql.jsonb({ reason })}, judged_at = now(), concluded_at = now(),
      workflow_started_at = COALESCE(workflow_started_at, now())
    WHERE task_id = ${clientTaskId} AND status = 'pending'`);
}

/** Skips these sampled runs not started yet (the platform cannot pay for them): no workflow is started for them. */
export async function skipUnstartedRedundantRuns(db: Runner, clientTaskIds: readonly string[], reason: string): Promise<number> {
  const skipped = await db.anyFirst(sql.type(z.object({ task_id: z.string() }))`
    UPDATE redundant_runs SET status = 'skipped', evidence = ${sql.jsonb({ reason })}, judged_at = now(), concluded_at = now(), workflow_started_at = now()
    WHERE task_id = ANY(${sql.array([...clientTaskIds], 'text')}) AND workflow_started_at IS NULL AND status = 'pending'
    RETURNING task_id`);
  return skipped.length;
}

/**
 * What creating a run's task did: the task to run (its cap, the solver it checks, the solvers to leave
 * out, and whether it goes to verifiers only: matched to them alone, whoever comes online while it
 * waits), or why there is none.
 */
export type RedundantRunCreated =
  | { created: true; runTaskId: string; maxPricePoints: string; firstSolverId: string; excludedSolverIds?: string[]; byVerifier?: boolean }
  | { created: false; reason: 'not_found' | 'judged' | 'platform_balance' };

/** What a run's task copies of the client's task: its type, payload as stored, timeout and the country it must be fetched from. */
const ClientTask = z.object({
  task_type: z.string(),
  payload: z.record(z.unknown()),
  timeout_seconds: z.number(),
  country: z.string().nullable(),
});
const CLIENT_TASK_COLUMNS = sql.fragment`t.payload, t.timeout_seconds, t.country`;

/**
 * The run task of a client task, with the platform's hold for `maxPricePoints`; of the client task's
 * country, unless `anyCountry` (a verifier of another country: crossCountry).
 */
const runTask = (input: { clientTaskId: string; runTaskId: string; workflowId: string }, client: z.infer<typeof ClientTask>, maxPricePoints: string, anyCountry = false) => ({
  clientTaskId: input.clientTaskId,
  taskId: input.runTaskId,
  workflowId: input.workflowId,
  taskType: client.task_type,
  payload: client.payload,
  timeoutSeconds: client.timeout_seconds,
  maxPricePoints,
  ...(client.country && !anyCountry ? { country: client.country } : {}),
});

/**
 * Whether a run's second result came from a verifier of another country than its client task asks for
 * (`r` the run, its client task's country set, its second run's not): with no verifier of that country
 * online, the run goes to a verifier of any (runnersFor). Pages differ by country, so its disagreement
 * proves nothing: it is settled like two other solvers' disagreement, by a third run of that country.
 */
const crossCountry = (r: ReturnType<typeof sql.fragment>) => sql.fragment`(
  (SELECT country FROM tasks WHERE task_id = ${r}.task_id) IS NOT NULL AND (SELECT country FROM tasks WHERE task_id = ${r}.run_task_id) IS NULL)`;

const RunRow = ClientTask.extend({
  run_task_id: z.string().nullable(),
  status: z.string(),
  first_solver_id: z.string(),
  by_verifier: z.boolean(),
  client_price_points: z.string(),
  run_max_price_points: z.string().nullable(),
});

/**
 * Who may run a client task again: with a verifier online that may take the type (trusted, free or
 * not) and declares the task's country when it asks for one, verifiers only (`byVerifier`, matched with
 * `verifiersOnly`); for a task that asks for a country no verifier declares, a verifier of any country
 * when one is online (`anyCountry`: its run task asks for none), so a solver alone in its country is
 * still checked; otherwise any solver but the one that served it (of the task's country).
 */
async function runnersFor(db: Runner, policy: TrustPolicy, run: { clientTaskId: string; taskType: string; firstSolverId: string }, byVerifier?: boolean) {
  const excludedSolverIds = [run.firstSolverId];
  if (byVerifier !== undefined) return { byVerifier, excludedSolverIds, anyCountry: false };
  const country = sql.fragment`(SELECT country FROM tasks WHERE task_id = ${run.clientTaskId})`;
  const found = await db.one(sql.type(z.object({ online: z.boolean(), elsewhere: z.boolean() }))`
    SELECT EXISTS (SELECT 1 ${eligibleSolvers(run.taskType, { policy, excludedSolverIds, verifiersOnly: true, country })}) AS online,
           ${country} IS NOT NULL AND EXISTS (SELECT 1 ${eligibleSolvers(run.taskType, { policy, excludedSolverIds, verifiersOnly: true, country: null })}) AS elsewhere`);
  const anyCountry = !found.online && found.elsewhere;
  return { byVerifier: found.online || anyCountry, excludedSolverIds, anyCountry };
}

/**
 * Creates the platform's task that runs a client's task again and the platform's hold for its price
 * cap (insertRunTask). A run for verifiers is capped at CHECK_PRICE_CEILING_POINTS, like a canary: a
 * verifier is the operator's own, so it may be dearer than the solver it checks. Any other run is
 * capped at what the client was charged, not the client's cap: a client and a solver priced above the
 * first one could otherwise farm the platform (the client pays 1, the platform pays the colluding
 * solver up to the client's cap). The client's account is not touched. Idempotent by client task: a
 * second call finds the task the first created.
 */
export async function createRedundantRunTask(db: Runner, policy: TrustPolicy, input: { clientTaskId: string; runTaskId: string; workflowId: string }): Promise<RedundantRunCreated> {
  const run = await db.maybeOne(sql.type(RunRow)`
    SELECT r.run_task_id, r.status, r.task_type, r.first_solver_id, r.by_verifier, trim_scale(COALESCE(t.price_points, 0))::text AS client_price_points, ${CLIENT_TASK_COLUMNS},
           (SELECT trim_scale(rt.max_price_points)::text FROM tasks rt WHERE rt.task_id = r.run_task_id) AS run_max_price_points
    FROM redundant_runs r JOIN tasks t ON t.task_id = r.task_id WHERE r.task_id = ${input.clientTaskId}`);
  if (!run) return { created: false, reason: 'not_found' };
  // Ended already: nothing is sent again, whoever asks.
  if (run.status !== 'pending') return { created: false, reason: 'judged' };
  const first = { clientTaskId: input.clientTaskId, taskType: run.task_type, firstSolverId: run.first_solver_id };
  if (run.run_task_id) {
    const { byVerifier, excludedSolverIds } = await runnersFor(db, policy, first, run.by_verifier);
    return { created: true, runTaskId: run.run_task_id, maxPricePoints: run.run_max_price_points ?? run.client_price_points, firstSolverId: run.first_solver_id, byVerifier, excludedSolverIds };
  }
  const { anyCountry, byVerifier, excludedSolverIds } = await runnersFor(db, policy, first);
  const runners = { byVerifier, excludedSolverIds };
  const maxPricePoints = runners.byVerifier ? policy.checkPriceCeilingPoints : run.client_price_points;
  const outcome = await createRunTask(db, policy, { ...runTask(input, run, maxPricePoints, anyCountry), run: 'second', byVerifier: runners.byVerifier });
  if (outcome === 'platform_balance') {
    await endRedundantRun(db, input.clientTaskId, 'skipped', 'platform_balance');
    return { created: false, reason: 'platform_balance' };
  }
  // Another call claimed it meanwhile: its task is the one.
  if (outcome === 'not_claimed') return createRedundantRunTask(db, policy, input);
  return { created: true, runTaskId: input.runTaskId, maxPricePoints, firstSolverId: run.first_solver_id, ...runners };
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

/** A verdict and the `task.refunded` deliveries it wrote, whose first attempt is the caller's to make once it returns. */
export interface RunVerdict {
  status: RedundantRunState;
  webhooks: DueDelivery[];
}

const side = (solverId: string | null, excerpt: Comparison['first']) => ({ solver_id: solverId, ...excerpt });

/**
 * Reads a run with `read`, resolves the artifacts of its results (`resolve`; object storage, before any
 * lock is taken, so no row lock waits on it), then reads it again under its row lock and `judge`s it in
 * one transaction with what was resolved. A run that changed between the two reads (judged by another
 * caller meanwhile, a result purged) is read again: every change is one of its few state moves, so this ends.
 */
async function judgeResolved<Row>(
  db: Db,
  read: (runner: Runner, lock: ReturnType<typeof sql.fragment>) => Promise<Row | null>,
  resolve: (row: Row) => Promise<Record<string, unknown>[]> | null,
  judge: (tx: DatabaseTransactionConnection, row: Row | null, resolved: Record<string, unknown>[] | null) => Promise<RunVerdict>,
): Promise<RunVerdict> {
  for (;;) {
    const before = await read(db, sql.fragment``);
    const resolved = before ? await resolve(before) : null;
    const verdict = await db.transaction(async (tx) => {
      const row = await read(tx, sql.fragment`FOR UPDATE OF r`);
      return JSON.stringify(row) === JSON.stringify(before) ? judge(tx, row, resolved) : null;
    });
    if (verdict) return verdict;
  }
}

/** Whether a second run has what a comparison needs: its task completed with a result, and both results. */
const secondComparable = (run: z.infer<typeof ResultsRow>) =>
  run.status === 'pending' && run.run_status === 'completed' && !!run.first_result && !!run.second_result && !!run.second_solver_id && isWebTaskType(run.task_type);

/**
 * Compares a run's second result with the client's and records the verdict (the measure, the
 * similarity, the threshold and what each side looked like), in one transaction. Both solvers'
 * reputation counts the run. Agreement is a verified pass for each side that is not a verifier. A run
 * that cannot answer (its result empty where the client's is not, its image unreadable) is
 * `incomparable`: nobody's record changes. A disagreement counts against nobody yet: it waits for a third
 * run (`disagreed`, not concluded): a verifier's, for the verifier's stability check (it fetches again;
 * judgeThirdRun), another solver's, for a majority. Once: a run already judged is left as it is.
 */
export async function judgeRedundantRun(db: Db, policy: TrustPolicy, artifacts: ArtifactStore, clientTaskId: string): Promise<RunVerdict> {
  const read = (runner: Runner, lock: ReturnType<typeof sql.fragment>) =>
    runner.maybeOne(sql.type(ResultsRow)`
      SELECT r.task_type, r.status, r.first_solver_id, s.solver_id AS second_solver_id, r.run_task_id,
             c.result AS first_result, s.result AS second_result, s.status AS run_status, c.payload,
             r.by_verifier AND s.solver_id IS NOT NULL AND ${isVerifier(sql.fragment`s.solver_id`)} AS second_is_verifier,
             ${crossCountry(sql.fragment`r`)} AS cross_country
      FROM redundant_runs r JOIN tasks c ON c.task_id = r.task_id LEFT JOIN tasks s ON s.task_id = r.run_task_id
      WHERE r.task_id = ${clientTaskId}
      ${lock}`);
  const resolve = (run: z.infer<typeof ResultsRow>) =>
    secondComparable(run) ? Promise.all([resolveArtifacts(artifacts, run.first_result!), resolveArtifacts(artifacts, run.second_result!)]) : null;
  return judgeResolved(db, read, resolve, async (tx, run, resolved) => {
    if (!run) return { status: 'skipped', webhooks: [] };
    if (run.status !== 'pending') return { status: run.status as RedundantRunState, webhooks: [] };
    if (!secondComparable(run) || !resolved || !run.second_solver_id || !isWebTaskType(run.task_type)) {
      await endRedundantRun(tx, clientTaskId, 'unanswered', 'no second result');
      return { status: 'unanswered', webhooks: [] };
    }
    const [first, second] = resolved as [Record<string, unknown>, Record<string, unknown>];
    const comparison = compareResults(run.task_type, first, second, run.payload);
    const disagreed = disagrees(comparison);
    // A verifier's disagreement is not proof yet: the page may have changed between fetches, so the
    // verifier's third run (a stability check) decides (judgeThirdRun).
    const status: RedundantRunState = comparison.similarity === null ? 'incomparable' : !disagreed ? 'agreed' : 'disagreed';
    const evidence = {
      client_task_id: clientTaskId,
      run_task_id: run.run_task_id,
      by_verifier: run.second_is_verifier,
      ...(run.cross_country ? { cross_country: true } : {}),
      first: side(run.first_solver_id, comparison.first),
      second: side(run.second_solver_id, comparison.second),
      ...(comparison.incomparable ? { incomparable: comparison.incomparable } : {}),
    };
    await tx.query(sql.unsafe`
      WITH judged AS (
        UPDATE redundant_runs SET status = ${status}, second_solver_id = ${run.second_solver_id}, measure = ${comparison.measure},
          similarity = ${comparison.similarity}, threshold = ${comparison.threshold}, evidence = ${sql.jsonb(evidence)}, judged_at = now(),
          concluded_at = CASE WHEN ${status === 'disagreed'} THEN NULL ELSE now() END
        WHERE task_id = ${clientTaskId} AND status = 'pending'
        RETURNING task_id
      ), pair AS (
        SELECT solver_id, ${run.task_type}::text AS task_type
        FROM unnest(${sql.array([run.first_solver_id, run.second_solver_id], 'text')}) AS solver_id
        WHERE EXISTS (SELECT 1 FROM judged) AND ${status !== 'incomparable'}
      ), ${recordRedundantRunStep(disagreed)}
      SELECT 1`);
    if (status === 'agreed') {
      for (const solverId of [run.first_solver_id, run.second_solver_id]) {
        await recordVerifiedOutcomeIn(tx, policy, { solverId, taskType: run.task_type, failed: false, evidence });
      }
    }
    return { status, webhooks: [] };
  });
}

/**
 * How long a proof against a solver on one client account's tasks keeps the next ones from that
 * account from counting. The account owns the pages its tasks fetch, and a page that serves its first
 * request one text and every later request another (the verifier's two fetches agree with each other,
 * not with what the solver got) proves an honest solver wrong as surely as a made-up page does: no fetch
 * tells the two apart. So proofs that all come from one account are one piece of evidence: one a day
 * counts (a failure observation and a refund); the others leave their task `disputed`, its pay held in
 * escrow. A day is the escrow period (EARNINGS_VESTING_SECONDS' default): a proof that did not count
 * is still refunded when a quarantine the solver's other clients or canaries bring is confirmed.
 */
export const SAME_ACCOUNT_PROOF_WINDOW_SECONDS = 24 * 3600;

/**
 * Whether a proof against `wrongSolverId` on this client task counts: not when a proof against it on a
 * task of the same client account counted within SAME_ACCOUNT_PROOF_WINDOW_SECONDS. Returns the
 * evidence to record: with `correlated_with` (that earlier task) when it does not count.
 */
async function proofCountsIn<Evidence extends object>(
  tx: DatabaseTransactionConnection,
  clientTaskId: string,
  wrongSolverId: string,
  evidence: Evidence,
): Promise<{ counts: boolean; evidence: Evidence & { correlated_with?: string } }> {
  const earlier = await countedProofFromAccountIn(tx, { solverId: wrongSolverId, clientTaskId, windowSeconds: SAME_ACCOUNT_PROOF_WINDOW_SECONDS });
  return earlier === null ? { counts: true, evidence } : { counts: false, evidence: { ...evidence, correlated_with: earlier } };
}

/**
 * A client task's result proven wrong: a verified failure of its solver (which may quarantine it), and
 * the task refunded at once from its solver's held pay (`refundTask`). A proof that does not count
 * (proofCountsIn) does neither: the task stays `disputed`.
 */
async function proveWrongIn(
  tx: DatabaseTransactionConnection,
  policy: TrustPolicy,
  proof: { clientTaskId: string; wrongSolverId: string; taskType: string; evidence: Record<string, unknown>; counts: boolean },
) {
  if (!proof.counts) return [];
  await recordVerifiedOutcomeIn(tx, policy, { solverId: proof.wrongSolverId, taskType: proof.taskType, failed: true, evidence: proof.evidence });
  return (await refundTask(tx, proof.clientTaskId)).webhooks;
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

/**
 * Creates the platform's task that decides a disputed run, and its hold, like the second run's. After a
 * verifier's disagreement: the verifier's stability check, for verifiers only (the same verifier may
 * take it), capped at CHECK_PRICE_CEILING_POINTS, the client's solver left out. After two other solvers'
 * disagreement, or a verifier's of another country than the task asks for (crossCountry): a tie-break,
 * capped at what the client was charged, any solver but the two (of the task's country). Idempotent
 * like createRedundantRunTask. A run concluded already gets none.
 */
export async function createThirdRunTask(db: Runner, policy: TrustPolicy, input: { clientTaskId: string; runTaskId: string; workflowId: string }): Promise<RedundantRunCreated> {
  const run = await db.maybeOne(sql.type(ThirdRow)`
    SELECT r.status, r.by_verifier, ${crossCountry(sql.fragment`r`)} AS cross_country, r.task_type, r.concluded_at IS NOT NULL AS concluded, r.first_solver_id, r.second_solver_id, r.third_run_task_id, ${CLIENT_TASK_COLUMNS},
           trim_scale(COALESCE(t.price_points, 0))::text AS client_price_points
    FROM redundant_runs r JOIN tasks t ON t.task_id = r.task_id WHERE r.task_id = ${input.clientTaskId}`);
  if (!run) return { created: false, reason: 'not_found' };
  if (run.status !== 'disagreed' || run.concluded || !run.second_solver_id) return { created: false, reason: 'judged' };
  // A verifier's stability check; or, after two other solvers' disagreement or a verifier's of another
  // country, a tie-break by any solver of the task's country but the two.
  const stability = run.by_verifier && !run.cross_country;
  const maxPricePoints = stability ? policy.checkPriceCeilingPoints : run.client_price_points;
  const created = (runTaskId: string): RedundantRunCreated => ({
    created: true,
    runTaskId,
    maxPricePoints,
    firstSolverId: run.first_solver_id,
    ...(stability ? { excludedSolverIds: [run.first_solver_id], byVerifier: true } : { excludedSolverIds: [run.first_solver_id, run.second_solver_id!] }),
  });
  if (run.third_run_task_id) return created(run.third_run_task_id);
  const outcome = await createRunTask(db, policy, { ...runTask(input, run, maxPricePoints), run: 'third' });
  if (outcome === 'platform_balance') {
    await concludeDispute(db, input.clientTaskId, 'platform_balance');
    return { created: false, reason: 'platform_balance' };
  }
  if (outcome === 'not_claimed') return createThirdRunTask(db, policy, input);
  return created(input.runTaskId);
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
    WHERE task_id = ${clientTaskId} AND status = 'disagreed' AND concluded_at IS NULL`);
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

/**
 * Judges a disputed run by its third result. After a verifier's disagreement, the third is the
 * verifier's stability check: its two results must agree with each other (the page is stable) and the
 * client's must disagree with the second too; then the client's result is proven wrong (`refuted`,
 * refunded at once). A page whose two checks differ, or a client's result that agrees with the second
 * check, is `incomparable`: no failure, no refund. After two other solvers' disagreement (or a verifier's
 * of another country), the one of the two that disagrees with the third, while the other agrees, is the
 * odd one out and proven wrong (`upheld`: the second, but never a verifier of another country, which saw
 * another page; `refuted`: the client's, refunded at once). Otherwise (the third agrees with
 * both or neither, or cannot be compared) the dispute concludes with no failure on either side.
 */
export async function judgeThirdRun(db: Db, policy: TrustPolicy, artifacts: ArtifactStore, clientTaskId: string): Promise<RunVerdict> {
  const read = (runner: Runner, lock: ReturnType<typeof sql.fragment>) =>
    runner.maybeOne(sql.type(ThirdResultsRow)`
      SELECT r.task_type, r.by_verifier, ${crossCountry(sql.fragment`r`)} AS cross_country, r.first_solver_id, r.second_solver_id, x.solver_id AS third_solver_id, c.result AS first_result, s.result AS second_result,
             x.result AS third_result, x.status AS third_status, r.evidence, c.payload
      FROM redundant_runs r JOIN tasks c ON c.task_id = r.task_id JOIN tasks s ON s.task_id = r.run_task_id JOIN tasks x ON x.task_id = r.third_run_task_id
      WHERE r.task_id = ${clientTaskId} AND r.status = 'disagreed' AND r.concluded_at IS NULL
      ${lock}`);
  const thirdComparable = (run: z.infer<typeof ThirdResultsRow>) =>
    run.third_status === 'completed' && !!run.first_result && !!run.second_result && !!run.third_result && !!run.third_solver_id && isWebTaskType(run.task_type);
  const resolve = (run: z.infer<typeof ThirdResultsRow>) =>
    thirdComparable(run) ? Promise.all([run.first_result!, run.second_result!, run.third_result!].map((result) => resolveArtifacts(artifacts, result))) : null;
  return judgeResolved(db, read, resolve, async (tx, run, resolved) => {
    if (!run) return { status: 'disagreed', webhooks: [] };
    if (!thirdComparable(run) || !resolved || !run.third_solver_id || !isWebTaskType(run.task_type)) {
      await concludeDispute(tx, clientTaskId, 'no third result');
      return { status: 'disagreed', webhooks: [] };
    }
    const [first, second, third] = resolved as [Record<string, unknown>, Record<string, unknown>, Record<string, unknown>];
    if (run.by_verifier && !run.cross_country) return judgeStabilityIn(tx, policy, clientTaskId, run, [first, second, third]);
    const withFirst = compareResults(run.task_type, first, third, run.payload);
    const withSecond = compareResults(run.task_type, second, third, run.payload);
    const agreesFirst = withFirst.similarity !== null && !disagrees(withFirst);
    const agreesSecond = withSecond.similarity !== null && !disagrees(withSecond);
    const status: RedundantRunState = agreesFirst && !agreesSecond ? 'upheld' : agreesSecond && !agreesFirst ? 'refuted' : 'disagreed';
    // A verifier of another country outvoted saw another country's page: not wrong, nobody's failure.
    const wrong = status === 'upheld' ? (run.cross_country ? null : run.second_solver_id) : status === 'refuted' ? run.first_solver_id : null;
    const judged = {
      ...run.evidence,
      third: { ...side(run.third_solver_id, withFirst.second), similarity_to_first: withFirst.similarity, similarity_to_second: withSecond.similarity },
    };
    const { counts, evidence } = wrong ? await proofCountsIn(tx, clientTaskId, wrong, judged) : { counts: false, evidence: judged };
    await tx.query(sql.unsafe`
      UPDATE redundant_runs SET status = ${status}, third_solver_id = ${run.third_solver_id}, evidence = ${sql.jsonb(evidence)},
        wrong_solver_id = ${wrong}, concluded_at = now()
      WHERE task_id = ${clientTaskId}`);
    if (status === 'disagreed') return { status, webhooks: [] };
    // The majority's other side passed the check.
    const right = status === 'upheld' ? run.first_solver_id : run.second_solver_id;
    await recordVerifiedOutcomeIn(tx, policy, { solverId: right, taskType: run.task_type, failed: false, evidence });
    if (status === 'upheld') {
      if (counts && wrong) await recordVerifiedOutcomeIn(tx, policy, { solverId: run.second_solver_id, taskType: run.task_type, failed: true, evidence });
      return { status, webhooks: [] };
    }
    return { status, webhooks: await proveWrongIn(tx, policy, { clientTaskId, wrongSolverId: run.first_solver_id, taskType: run.task_type, evidence, counts }) };
  });
}

/**
 * The verifier's stability check (its second fetch of the client's task) judged: the verifier's two
 * results compared (the page is stable when they agree), then the client's with the second. Only a
 * stable page whose check the client's result fails proves it wrong.
 */
async function judgeStabilityIn(
  tx: DatabaseTransactionConnection,
  policy: TrustPolicy,
  clientTaskId: string,
  run: z.infer<typeof ThirdResultsRow>,
  [first, second, third]: [Record<string, unknown>, Record<string, unknown>, Record<string, unknown>],
): Promise<RunVerdict> {
  const taskType = run.task_type as WebTaskType;
  const checks = compareResults(taskType, second, third, run.payload);
  const stable = checks.similarity !== null && !disagrees(checks);
  const again = compareResults(taskType, first, third, run.payload);
  const refuted = stable && again.similarity !== null && disagrees(again);
  const status: RedundantRunState = refuted ? 'refuted' : 'incomparable';
  const judged = {
    ...run.evidence,
    third: { ...side(run.third_solver_id, again.second), similarity_to_first: again.similarity, similarity_to_second: checks.similarity },
    stability: { stable, checks_similarity: checks.similarity, ...(checks.incomparable ? { incomparable: checks.incomparable } : {}), ...(again.incomparable ? { incomparable: again.incomparable } : {}) },
  };
  const { counts, evidence } = refuted ? await proofCountsIn(tx, clientTaskId, run.first_solver_id, judged) : { counts: false, evidence: judged };
  await tx.query(sql.unsafe`
    UPDATE redundant_runs SET status = ${status}, third_solver_id = ${run.third_solver_id}, evidence = ${sql.jsonb(evidence)},
      wrong_solver_id = ${refuted ? run.first_solver_id : null}, concluded_at = now()
    WHERE task_id = ${clientTaskId}`);
  if (!refuted) return { status, webhooks: [] };
  return { status, webhooks: await proveWrongIn(tx, policy, { clientTaskId, wrongSolverId: run.first_solver_id, taskType: run.task_type, evidence, counts }) };
}

const RedundantRunRow = z.object({
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
export type RedundantRunRecord = z.infer<typeof RedundantRunRow>;

/** A solver's disagreements, on either side, and the runs that proved it wrong, newest first: what an admin reads (GET /v1/admin/solvers/{id}/trust). */
export async function disagreementsOf(db: Runner, solverId: string, limit = 50): Promise<readonly RedundantRunRecord[]> {
  return db.any(sql.type(RedundantRunRow)`
    SELECT task_id, task_type, status, first_solver_id, second_solver_id, third_solver_id, wrong_solver_id, measure, similarity, threshold, evidence,
           to_char(judged_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS judged_at
    FROM (
      SELECT * FROM redundant_runs WHERE first_solver_id = ${solverId} AND status = 'disagreed'
      UNION SELECT * FROM redundant_runs WHERE second_solver_id = ${solverId} AND status = 'disagreed'
      UNION SELECT * FROM redundant_runs WHERE wrong_solver_id = ${solverId}
    ) r
    ORDER BY created_at DESC LIMIT ${limit}`);
}
