import type { CommonQueryMethods, DatabaseTransactionConnection } from 'slonik';
import { resolveArtifacts } from '../artifacts/results';
import type { ArtifactStore } from '../artifacts/store';
import type { RedundantRunState } from '../contract/lifecycle';
import { PLATFORM_ACCOUNT_ID } from '../db/ledger';
import { createRunTask } from '../db/platform-tasks';
import type { Db } from '../db/pool';
import {
  concludeDispute,
  disputedRunOf,
  drawRedundantRunIn,
  endRedundantRun,
  recordSecondVerdictIn,
  recordThirdVerdictIn,
  redundantRunOf,
  redundantRunResults,
  thirdRunResults,
  verifiersOnline,
  type ClientTask,
  type RedundantRunResults,
  type ThirdRunResults,
} from '../db/redundant';
import { countedProofFromAccountIn, refundTask } from '../db/verification';
import type { DueDelivery } from '../db/webhooks';
import { CHAT_TASK_TYPE, WEB_TASK_TYPES, type WebTaskType } from '../schemas/domain';
import type { TrustPolicy } from '../db/reputation';
import { compareResults, disagrees, type Comparison } from './similarity';
import { CHAT_SUSPICION_FRACTION, chatVerificationRate, compareChatAnswers, judgeChatTriad } from './chat-agreement';
import { highestVerificationRate, verificationRate } from './sprt';
import { verificationRecordOf } from '../db/verifiers';
import { recordVerifiedOutcomeIn } from './verifiers';

/**
 * Verified client tasks (docs/trust.md, "Verified client tasks" and "Redundant runs"): a sampled client
 * web task is run again, after the client has its answer, for the platform's account, by a verifier
 * when one is online for the type, else by another solver, and the results are compared
 * (src/trust/similarity.ts). A verifier's disagreement proves the client's result wrong; two other
 * solvers' disagreement sends a third run, and the odd one out is proven wrong. The statements:
 * src/db/redundant.ts.
 */

type Runner = CommonQueryMethods;

export { redundantSearchTaskType, redundantWorkflowId } from '../contract/workflows';

const isWebTaskType = (taskType: string): taskType is WebTaskType =>
  (WEB_TASK_TYPES as readonly string[]).includes(taskType);

/**
 * In the transaction that settles a client's web task or chat with its solver's result: draws whether it
 * is verified (a chat only with the answer its client was streamed, `answer`, which the run keeps), and
 * if so records the run and announces it to the workers, delivered as this transaction commits. The
 * rate is the solver's for the type (`verificationRate`: high for a newcomer, falling to
 * REDUNDANT_RUN_FRACTION with its verified passes, up again for a while after a result proven wrong; a
 * chat's raised while its test leans against it, chatVerificationRate); only a draw between that floor
 * and the highest rate reads the solver's record (one primary-key lookup: about half the tasks at the
 * defaults).
 * A verifier's own tasks are not drawn: it is the reference.
 */
export async function sampleRedundantRunIn(
  tx: Runner,
  policy: TrustPolicy,
  task: { taskId: string; taskType: string; accountId: string; solverId: string; answer?: Record<string, unknown> },
): Promise<boolean> {
  const { redundantRunFraction: floor, verificationStartFraction: start } = policy;
  const chat = task.taskType === CHAT_TASK_TYPE;
  const highest = highestVerificationRate(start, floor);
  const ceiling = chat && highest > 0 ? Math.max(highest, CHAT_SUSPICION_FRACTION) : highest;
  const verifiable = isWebTaskType(task.taskType) || (chat && !!task.answer);
  if (ceiling <= 0 || task.accountId === PLATFORM_ACCOUNT_ID || !verifiable) return false;
  const draw = Math.random();
  if (draw >= ceiling) return false;
  if (draw >= floor) {
    const record = await verificationRecordOf(tx, task.solverId, task.taskType);
    const rate = verificationRate(record.verified_passes, start, floor, record.verified_since_failure);
    if (draw >= (chat ? chatVerificationRate(rate, record.sprt_llr) : rate)) return false;
  }
  return drawRedundantRunIn(tx, task);
}

/**
 * What creating a run's task did: the task to run (its cap, the solver it checks, the solvers to leave
 * out, and whether it goes to verifiers only: matched to them alone, whoever comes online while it
 * waits), or why there is none.
 */
export type RedundantRunCreated =
  | {
      created: true;
      runTaskId: string;
      maxPricePoints: string;
      firstSolverId: string;
      excludedSolverIds?: string[];
      byVerifier?: boolean;
      /** A chat's: the model its verifier must run (the one that served the client). */
      strongModels?: string[];
    }
  | { created: false; reason: 'not_found' | 'judged' | 'platform_balance' | 'no_verifier' };

const isChatRun = (run: { task_type: string }) => run.task_type === CHAT_TASK_TYPE;

/** The models a chat's checks may run: the one that served the client (none known: nobody may check it). */
const chatModels = (run: ClientTask) => (isChatRun(run) ? [run.model_name ?? ''] : undefined);

/**
 * The run task of a client task, with the platform's hold for `maxPricePoints`; of the client task's
 * country, unless `anyCountry` (a verifier of another country: crossCountry, src/db/redundant.ts).
 */
const runTask = (
  input: { clientTaskId: string; runTaskId: string; workflowId: string },
  client: ClientTask,
  maxPricePoints: string,
  anyCountry = false,
) => ({
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
 * Who may run a client task again: with a verifier online that may take the type (trusted, free or
 * not) and declares the task's country when it asks for one, verifiers only (`byVerifier`, matched with
 * `verifiersOnly`); for a task that asks for a country no verifier declares, a verifier of any country
 * when one is online (`anyCountry`: its run task asks for none), so a solver alone in its country is
 * still checked; otherwise any solver but the one that served it (of the task's country).
 */
async function runnersFor(
  db: Runner,
  policy: TrustPolicy,
  run: { clientTaskId: string; taskType: string; firstSolverId: string; strongModels?: string[] },
  byVerifier?: boolean,
) {
  const excludedSolverIds = [run.firstSolverId];
  const strongModels = run.strongModels ? { strongModels: run.strongModels } : {};
  if (byVerifier !== undefined)
    return { byVerifier, excludedSolverIds, anyCountry: false, online: true, ...strongModels };
  const found = await verifiersOnline(db, policy, {
    clientTaskId: run.clientTaskId,
    taskType: run.taskType,
    excludedSolverIds,
    ...strongModels,
  });
  const anyCountry = !found.online && found.elsewhere;
  return {
    byVerifier: found.online || anyCountry,
    excludedSolverIds,
    anyCountry,
    online: found.online,
    ...strongModels,
  };
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
export async function createRedundantRunTask(
  db: Runner,
  policy: TrustPolicy,
  input: { clientTaskId: string; runTaskId: string; workflowId: string },
): Promise<RedundantRunCreated> {
  const run = await redundantRunOf(db, input.clientTaskId);
  if (!run) return { created: false, reason: 'not_found' };
  // Ended already: nothing is sent again, whoever asks.
  if (run.status !== 'pending') return { created: false, reason: 'judged' };
  const first = {
    clientTaskId: input.clientTaskId,
    taskType: run.task_type,
    firstSolverId: run.first_solver_id,
    strongModels: chatModels(run),
  };
  if (run.run_task_id) {
    const { byVerifier, excludedSolverIds, strongModels } = await runnersFor(db, policy, first, run.by_verifier);
    return {
      created: true,
      runTaskId: run.run_task_id,
      maxPricePoints: run.run_max_price_points ?? run.client_price_points,
      firstSolverId: run.first_solver_id,
      byVerifier,
      excludedSolverIds,
      ...(strongModels ? { strongModels } : {}),
    };
  }
  const { anyCountry, byVerifier, excludedSolverIds, strongModels, online } = await runnersFor(db, policy, first);
  // A chat is checked by a verifier running its model only: another solver's answer, or another model's,
  // says nothing about it.
  if (isChatRun(run) && !online) {
    await endRedundantRun(db, input.clientTaskId, 'skipped', 'no_verifier');
    return { created: false, reason: 'no_verifier' };
  }
  const runners = { byVerifier, excludedSolverIds, ...(strongModels ? { strongModels } : {}) };
  const maxPricePoints = runners.byVerifier ? policy.checkPriceCeilingPoints : run.client_price_points;
  const outcome = await createRunTask(db, policy, {
    ...runTask(input, run, maxPricePoints, anyCountry),
    run: 'second',
    byVerifier: runners.byVerifier,
  });
  if (outcome === 'platform_balance') {
    await endRedundantRun(db, input.clientTaskId, 'skipped', 'platform_balance');
    return { created: false, reason: 'platform_balance' };
  }
  // Another call claimed it meanwhile: its task is the one.
  if (outcome === 'not_claimed') return createRedundantRunTask(db, policy, input);
  return { created: true, runTaskId: input.runTaskId, maxPricePoints, firstSolverId: run.first_solver_id, ...runners };
}

/**
 * A verdict and the `task.refunded` deliveries it wrote, whose first attempt is the caller's to make once it
 * returns.
 */
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
  read: (runner: Runner, locked: boolean) => Promise<Row | null>,
  resolve: (row: Row) => Promise<Record<string, unknown>[]> | null,
  judge: (
    tx: DatabaseTransactionConnection,
    row: Row | null,
    resolved: Record<string, unknown>[] | null,
  ) => Promise<RunVerdict>,
): Promise<RunVerdict> {
  for (;;) {
    const before = await read(db, false);
    const resolved = before ? await resolve(before) : null;
    const verdict = await db.transaction(async (tx) => {
      const row = await read(tx, true);
      return JSON.stringify(row) === JSON.stringify(before) ? judge(tx, row, resolved) : null;
    });
    if (verdict) return verdict;
  }
}

/** Whether a second run has what a comparison needs: its task completed with a result, and both results. */
const secondComparable = (run: RedundantRunResults) =>
  run.status === 'pending' &&
  run.run_status === 'completed' &&
  !!run.first_result &&
  !!run.second_result &&
  !!run.second_solver_id &&
  (isWebTaskType(run.task_type) || isChatRun(run));

/**
 * Compares a run's second result with the client's and records the verdict (the measure, the
 * similarity, the threshold and what each side looked like), in one transaction. Both solvers'
 * reputation counts the run. Agreement is a verified pass for each side that is not a verifier. A run
 * that cannot answer (its result empty where the client's is not, its image unreadable) is
 * `incomparable`: nobody's record changes. A disagreement counts against nobody yet: it waits for a third
 * run (`disagreed`, not concluded): a verifier's, for the verifier's stability check (it fetches again;
 * judgeThirdRun), another solver's, for a majority. Once: a run already judged is left as it is.
 */
export async function judgeRedundantRun(
  db: Db,
  policy: TrustPolicy,
  artifacts: ArtifactStore,
  clientTaskId: string,
): Promise<RunVerdict> {
  const read = (runner: Runner, locked: boolean) => redundantRunResults(runner, clientTaskId, locked);
  const resolve = (run: RedundantRunResults) =>
    secondComparable(run)
      ? Promise.all([resolveArtifacts(artifacts, run.first_result!), resolveArtifacts(artifacts, run.second_result!)])
      : null;
  return judgeResolved(db, read, resolve, async (tx, run, resolved) => {
    if (!run) return { status: 'skipped', webhooks: [] };
    if (run.status !== 'pending') return { status: run.status as RedundantRunState, webhooks: [] };
    if (!secondComparable(run) || !resolved || !run.second_solver_id) {
      await endRedundantRun(tx, clientTaskId, 'unanswered', 'no second result');
      return { status: 'unanswered', webhooks: [] };
    }
    const [first, second] = resolved as [Record<string, unknown>, Record<string, unknown>];
    const comparison = isWebTaskType(run.task_type)
      ? compareResults(run.task_type, first, second, run.payload)
      : compareChatAnswers(first, second);
    const disagreed = disagrees(comparison);
    // A verifier's disagreement is not proof yet: the page may have changed between fetches, so the
    // verifier's third run (a stability check) decides (judgeThirdRun). A chat's first check always waits
    // for the verifier's second answer: only three answers tell which is the odd one out.
    const status: RedundantRunState =
      comparison.similarity === null
        ? 'incomparable'
        : isChatRun(run)
          ? 'compared'
          : !disagreed
            ? 'agreed'
            : 'disagreed';
    const evidence = {
      client_task_id: clientTaskId,
      run_task_id: run.run_task_id,
      by_verifier: run.second_is_verifier,
      ...(run.cross_country ? { cross_country: true } : {}),
      first: side(run.first_solver_id, comparison.first),
      second: side(run.second_solver_id, comparison.second),
      ...(comparison.incomparable ? { incomparable: comparison.incomparable } : {}),
    };
    await recordSecondVerdictIn(tx, {
      clientTaskId,
      status,
      taskType: run.task_type,
      firstSolverId: run.first_solver_id,
      secondSolverId: run.second_solver_id,
      comparison,
      evidence,
      disagreed,
    });
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
  const earlier = await countedProofFromAccountIn(tx, {
    solverId: wrongSolverId,
    clientTaskId,
    windowSeconds: SAME_ACCOUNT_PROOF_WINDOW_SECONDS,
  });
  return earlier === null
    ? { counts: true, evidence }
    : { counts: false, evidence: { ...evidence, correlated_with: earlier } };
}

/**
 * A client task's result proven wrong: a verified failure of its solver (which may quarantine it), and
 * the task refunded at once from its solver's held pay (`refundTask`). A proof that does not count
 * (proofCountsIn) does neither: the task stays `disputed`.
 */
async function proveWrongIn(
  tx: DatabaseTransactionConnection,
  policy: TrustPolicy,
  proof: {
    clientTaskId: string;
    wrongSolverId: string;
    taskType: string;
    evidence: Record<string, unknown>;
    counts: boolean;
  },
) {
  if (!proof.counts) return [];
  await recordVerifiedOutcomeIn(tx, policy, {
    solverId: proof.wrongSolverId,
    taskType: proof.taskType,
    failed: true,
    evidence: proof.evidence,
  });
  return (await refundTask(tx, proof.clientTaskId)).webhooks;
}

/**
 * Creates the platform's task that decides a disputed run, and its hold, like the second run's. After a
 * verifier's disagreement: the verifier's stability check, for verifiers only (the same verifier may
 * take it), capped at CHECK_PRICE_CEILING_POINTS, the client's solver left out. After two other solvers'
 * disagreement, or a verifier's of another country than the task asks for (crossCountry, src/db/redundant.ts):
 * a tie-break,
 * capped at what the client was charged, any solver but the two (of the task's country). Idempotent
 * like createRedundantRunTask. A run concluded already gets none.
 */
export async function createThirdRunTask(
  db: Runner,
  policy: TrustPolicy,
  input: { clientTaskId: string; runTaskId: string; workflowId: string },
): Promise<RedundantRunCreated> {
  const run = await disputedRunOf(db, input.clientTaskId);
  if (!run) return { created: false, reason: 'not_found' };
  const awaiting = run.status === 'disagreed' || run.status === 'compared';
  if (!awaiting || run.concluded || !run.second_solver_id) return { created: false, reason: 'judged' };
  // A verifier's stability check; or, after two other solvers' disagreement or a verifier's of another
  // country, a tie-break by any solver of the task's country but the two.
  const stability = run.by_verifier && !run.cross_country;
  const maxPricePoints = stability ? policy.checkPriceCeilingPoints : run.client_price_points;
  const created = (runTaskId: string): RedundantRunCreated => ({
    created: true,
    runTaskId,
    maxPricePoints,
    firstSolverId: run.first_solver_id,
    ...(stability
      ? { excludedSolverIds: [run.first_solver_id], byVerifier: true }
      : { excludedSolverIds: [run.first_solver_id, run.second_solver_id!] }),
    ...(isChatRun(run) ? { strongModels: chatModels(run) } : {}),
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
export async function judgeThirdRun(
  db: Db,
  policy: TrustPolicy,
  artifacts: ArtifactStore,
  clientTaskId: string,
): Promise<RunVerdict> {
  const read = (runner: Runner, locked: boolean) => thirdRunResults(runner, clientTaskId, locked);
  const thirdComparable = (run: ThirdRunResults) =>
    run.third_status === 'completed' &&
    !!run.first_result &&
    !!run.second_result &&
    !!run.third_result &&
    !!run.third_solver_id &&
    (isWebTaskType(run.task_type) || isChatRun(run));
  const resolve = (run: ThirdRunResults) =>
    thirdComparable(run)
      ? Promise.all(
          [run.first_result!, run.second_result!, run.third_result!].map((result) =>
            resolveArtifacts(artifacts, result),
          ),
        )
      : null;
  return judgeResolved(db, read, resolve, async (tx, run, resolved) => {
    if (!run) return { status: 'disagreed', webhooks: [] };
    if (!thirdComparable(run) || !resolved || !run.third_solver_id) {
      await concludeDispute(tx, clientTaskId, 'no third result');
      return { status: 'disagreed', webhooks: [] };
    }
    const [first, second, third] = resolved as [
      Record<string, unknown>,
      Record<string, unknown>,
      Record<string, unknown>,
    ];
    if (!isWebTaskType(run.task_type)) return judgeChatTriadIn(tx, policy, clientTaskId, run, [first, second, third]);
    if (run.by_verifier && !run.cross_country)
      return judgeStabilityIn(tx, policy, clientTaskId, run, [first, second, third]);
    const withFirst = compareResults(run.task_type, first, third, run.payload);
    const withSecond = compareResults(run.task_type, second, third, run.payload);
    const agreesFirst = withFirst.similarity !== null && !disagrees(withFirst);
    const agreesSecond = withSecond.similarity !== null && !disagrees(withSecond);
    const status: RedundantRunState =
      agreesFirst && !agreesSecond ? 'upheld' : agreesSecond && !agreesFirst ? 'refuted' : 'disagreed';
    // A verifier of another country outvoted saw another country's page: not wrong, nobody's failure.
    const wrong =
      status === 'upheld'
        ? run.cross_country
          ? null
          : run.second_solver_id
        : status === 'refuted'
          ? run.first_solver_id
          : null;
    const judged = {
      ...run.evidence,
      third: {
        ...side(run.third_solver_id, withFirst.second),
        similarity_to_first: withFirst.similarity,
        similarity_to_second: withSecond.similarity,
      },
    };
    const { counts, evidence } = wrong
      ? await proofCountsIn(tx, clientTaskId, wrong, judged)
      : { counts: false, evidence: judged };
    await recordThirdVerdictIn(tx, {
      clientTaskId,
      status,
      thirdSolverId: run.third_solver_id,
      evidence,
      wrongSolverId: wrong,
    });
    if (status === 'disagreed') return { status, webhooks: [] };
    // The majority's other side passed the check.
    const right = status === 'upheld' ? run.first_solver_id : run.second_solver_id;
    await recordVerifiedOutcomeIn(tx, policy, { solverId: right, taskType: run.task_type, failed: false, evidence });
    if (status === 'upheld') {
      if (counts && wrong)
        await recordVerifiedOutcomeIn(tx, policy, {
          solverId: run.second_solver_id,
          taskType: run.task_type,
          failed: true,
          evidence,
        });
      return { status, webhooks: [] };
    }
    return {
      status,
      webhooks: await proveWrongIn(tx, policy, {
        clientTaskId,
        wrongSolverId: run.first_solver_id,
        taskType: run.task_type,
        evidence,
        counts,
      }),
    };
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
  run: ThirdRunResults,
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
    third: {
      ...side(run.third_solver_id, again.second),
      similarity_to_first: again.similarity,
      similarity_to_second: checks.similarity,
    },
    stability: {
      stable,
      checks_similarity: checks.similarity,
      ...(checks.incomparable ? { incomparable: checks.incomparable } : {}),
      ...(again.incomparable ? { incomparable: again.incomparable } : {}),
    },
  };
  const { counts, evidence } = refuted
    ? await proofCountsIn(tx, clientTaskId, run.first_solver_id, judged)
    : { counts: false, evidence: judged };
  await recordThirdVerdictIn(tx, {
    clientTaskId,
    status,
    thirdSolverId: run.third_solver_id,
    evidence,
    wrongSolverId: refuted ? run.first_solver_id : null,
  });
  if (!refuted) return { status, webhooks: [] };
  return {
    status,
    webhooks: await proveWrongIn(tx, policy, {
      clientTaskId,
      wrongSolverId: run.first_solver_id,
      taskType: run.task_type,
      evidence,
      counts,
    }),
  };
}

/**
 * A chat's verification judged on its three answers (src/trust/chat-agreement.ts): the client's and the
 * verifier's two, each draws of one model when the solver is honest. The client's answer the odd one
 * out is a failure observation in the solver's chat test (`disagreed`, concluded); a check's answer the
 * odd one out, a pass (`agreed`); all three alike, a verified pass the test does not count (`agreed`); no
 * odd one out (`incomparable`), the same; a check that answered nothing, no outcome (`incomparable`).
 * No single answer proves a solver wrong, so nothing is refunded here: a quarantine the test decides
 * refunds the held pay ("Escrow and refunds").
 */
async function judgeChatTriadIn(
  tx: DatabaseTransactionConnection,
  policy: TrustPolicy,
  clientTaskId: string,
  run: ThirdRunResults,
  [client, first, second]: [Record<string, unknown>, Record<string, unknown>, Record<string, unknown>],
): Promise<RunVerdict> {
  const { triad, withFirst, withSecond, checks } = judgeChatTriad(client, first, second);
  const status: RedundantRunState =
    triad === 'client_odd' ? 'disagreed' : triad === 'check_odd' || triad === 'all_agree' ? 'agreed' : 'incomparable';
  const evidence = {
    ...run.evidence,
    third: {
      ...side(run.third_solver_id, withSecond.second),
      similarity_to_first: withSecond.similarity,
      similarity_to_second: checks.similarity,
    },
    triad,
    similarity_to_first_check: withFirst.similarity,
  };
  await recordThirdVerdictIn(tx, {
    clientTaskId,
    status,
    thirdSolverId: run.third_solver_id,
    evidence,
    wrongSolverId: null,
  });
  // Triads with no odd one out are no observation for the test, but lower the rate like any pass: a model
  // whose answers always differ (or always agree) would otherwise keep half its chats verified.
  if (triad !== 'incomparable')
    await recordVerifiedOutcomeIn(tx, policy, {
      solverId: run.first_solver_id,
      taskType: run.task_type,
      failed: triad === 'client_odd',
      tested: triad === 'client_odd' || triad === 'check_odd',
      evidence,
    });
  return { status, webhooks: [] };
}
