import { sql, type CommonQueryMethods } from 'slonik';
import { z } from 'zod';
import type { CanaryVerdict } from '../contract/lifecycle';
import { CHAT_TASK_TYPE } from '../schemas/domain';
import { PLATFORM_ACCOUNT_ID } from './ledger';
import { LIVE_NODE_OF_CONNECTION } from './matching';
import {
  activeCanaryTypesSql,
  announceCanaryDue,
  belowThreshold,
  type CanaryTaskType,
  CANARY_PASS_WEIGHT,
  CANARY_TASK_TYPES,
  checkPriceSql,
  onProbationSql,
  quarantined,
  RECOVERY_CANARY_SECONDS,
  recoveryCanaries,
  type TrustPolicy,
} from './reputation';

/**
 * The statements of canaries (docs/trust.md, "Canaries"): which solvers are due one, the rows a new
 * canary's page is drawn against, and the verdict recorded with what it does to the solver's record.
 * What a canary sends and how its result is judged: src/trust/canaries.ts.
 */

type Runner = CommonQueryMethods;
type Fragment = ReturnType<typeof sql.fragment>;

/**
 * Whether solver `s` (a SQL expression) is due a canary of task type `t` now, on the evidence: not
 * quarantined, no canary of that type open, and either on probation (fewer passed canaries than
 * TRUST_PROBATION_CANARIES), past its randomly drawn count of attempts since the last one, or below
 * the score threshold with no canary of the type for RECOVERY_CANARY_SECONDS (a recovery canary).
 */
function dueNow(policy: TrustPolicy, s: Fragment, t: Fragment) {
  const { probationCanaries } = policy;
  const recovering = recoveryCanaries(policy)
    ? sql.fragment`OR (${belowThreshold(policy, 'r')} AND NOT EXISTS (
        SELECT 1 FROM canaries k WHERE k.solver_id = ${s} AND k.task_type = ${t} AND k.created_at > now() - make_interval(secs => ${RECOVERY_CANARY_SECONDS})))`
    : sql.fragment``;
  return sql.fragment`NOT ${quarantined(s)}
    AND NOT EXISTS (SELECT 1 FROM canaries k WHERE k.solver_id = ${s} AND k.task_type = ${t} AND k.verdict IS NULL)
    AND NOT ${backingOff(s, t)}
    -- No row yet: due when probation is on. A row with no count drawn (canaries by count off): not by count.
    AND COALESCE((SELECT COALESCE(r.canary_passes < ${probationCanaries}::int OR r.since_canary >= r.canary_due_after ${recovering}, false)
                  FROM solver_reputation r WHERE r.solver_id = ${s} AND r.task_type = ${t}), ${probationCanaries}::int > 0)`;
}

/**
 * After an unanswered canary, the next of its type waits: CANARY_RETRY_SECONDS, doubled by each
 * unanswered canary in a row since the last judged one, RECOVERY_CANARY_SECONDS at most. A solver that
 * cannot answer canaries (its resolver does not know the canary names, its upstream is down) is not sent
 * one after another: each unanswered one would otherwise make the next due at once.
 */
export const CANARY_RETRY_SECONDS = 30;

/** Whether solver `s` waits out the backoff after its last canary of type `t`, unanswered. */
function backingOff(s: Fragment, t: Fragment) {
  return sql.fragment`EXISTS (
    SELECT 1 FROM (
      SELECT k.verdict, k.judged_at FROM canaries k WHERE k.solver_id = ${s} AND k.task_type = ${t} AND k.verdict IS NOT NULL ORDER BY k.judged_at DESC LIMIT 1
    ) last
    WHERE last.verdict = 'unanswered' AND last.judged_at > now() - make_interval(secs =>
      LEAST(${RECOVERY_CANARY_SECONDS}::int, ${CANARY_RETRY_SECONDS}::int * 2 ^ LEAST(10, (
      SELECT count(*) - 1 FROM canaries u
      WHERE u.solver_id = ${s} AND u.task_type = ${t} AND u.verdict = 'unanswered'
        AND u.judged_at > COALESCE((SELECT max(j.judged_at) FROM canaries j WHERE j.solver_id =
          ${s} AND j.task_type = ${t} AND j.verdict IN ('passed', 'failed')), '-infinity')))))
  )`;
}

/** The canaries of a task type a solver was sent so far (the number in its next canary's workflow id). */
const canariesSent = (s: Fragment, t: Fragment) =>
  sql.fragment`(SELECT count(*)::int FROM canaries k WHERE k.solver_id = ${s} AND k.task_type = ${t})`;

/**
 * Whether the solver is still due its canary of the type (dueNow) and was sent no other canary of the
 * type since it was found due (`sent` canaries before): the condition that claims a new canary.
 */
export function canaryStillDue(policy: TrustPolicy, canary: { solverId: string; taskType: string; sent: number }) {
  const solver = sql.fragment`${canary.solverId}::text`;
  const taskType = sql.fragment`${canary.taskType}::text`;
  return sql.fragment`${dueNow(policy, solver, taskType)} AND ${canariesSent(solver, taskType)} = ${canary.sent}`;
}

export interface DueCanary {
  solverId: string;
  taskType: CanaryTaskType;
  /** Canaries of that type the solver was sent before this one. */
  sent: number;
  /** Whether it is a probation check: held at probationCheckPrice, and started only beyond the reserve. */
  probation: boolean;
  /** What it holds of the platform account, and the most it pays (checkPriceSql). */
  hold: string;
}

/** Solvers (all, or one) online and due a canary of a task type (dueNow). */
export async function dueCanaries(
  db: Runner,
  policy: TrustPolicy,
  options: { solverId?: string; limit?: number } = {},
): Promise<readonly DueCanary[]> {
  const [s, t] = [sql.fragment`c.solver_id`, sql.fragment`c.task_type`];
  return db.any(sql.type(
    z.object({
      solverId: z.string(),
      taskType: z.enum(CANARY_TASK_TYPES),
      sent: z.number(),
      probation: z.boolean(),
      hold: z.string(),
    }),
  )`
    SELECT c.solver_id AS "solverId", c.task_type AS "taskType", ${canariesSent(s, t)} AS sent,
           ${onProbationSql(policy, s, t)} AS probation, trim_scale(${checkPriceSql(policy, s, t)})::text AS hold
    FROM (
      SELECT DISTINCT c.solver_id, c.task_type
      FROM solver_capabilities c
      JOIN solver_connections sc ON sc.solver_id = c.solver_id AND NOT sc.draining
      ${LIVE_NODE_OF_CONNECTION}
      WHERE c.task_type = ANY(${activeCanaryTypesSql(policy)})
        -- Chat goes to strong-tier capabilities only: those are audited.
        AND (c.task_type <> ${CHAT_TASK_TYPE} OR c.tier = 'strong')
        AND c.solver_id <> ${PLATFORM_ACCOUNT_ID}
        -- An offer above what its check pays is no check's to pay (it gets no client work either):
        -- the ceiling, or on probation what a client's default task holds (probationCheckPrice).
        AND c.min_price_points <= ${checkPriceSql(policy, sql.fragment`c.solver_id`, sql.fragment`c.task_type`)}
        AND (${options.solverId ?? null}::text IS NULL OR c.solver_id = ${options.solverId ?? null})
    ) c
    WHERE ${dueNow(policy, sql.fragment`c.solver_id`, sql.fragment`c.task_type`)}
    LIMIT ${options.limit ?? 100}`);
}

/** The canary whose page is at `page` (host name and path): its seed and task type, or null. */
export async function canaryAtPage(db: Runner, page: string): Promise<{ token: string; task_type: string } | null> {
  return db.maybeOne(sql.type(z.object({ token: z.string(), task_type: z.string() }))`
    SELECT token, task_type FROM canaries WHERE page = ${page}`);
}

/** Whether a canary's page is at `page` (host name and path). */
export async function canaryPageTaken(db: Runner, page: string): Promise<boolean> {
  return db.exists(sql.unsafe`SELECT 1 FROM canaries WHERE page = ${page}`);
}

/** The hosts of the solver's latest `limit` canary pages. */
export async function recentCanaryHosts(db: Runner, solverId: string, limit: number): Promise<readonly string[]> {
  return db.anyFirst(sql.type(z.object({ host: z.string() }))`
    SELECT DISTINCT split_part(page, '/', 1) AS host FROM (
      SELECT page FROM canaries WHERE solver_id = ${solverId} AND page IS NOT NULL ORDER BY created_at DESC LIMIT ${limit}) p`);
}

/** The base URL of a node holding the solver's socket, or null (none, or the node has none). */
export async function solverNodeBaseUrl(db: Runner, solverId: string): Promise<string | null> {
  return db.maybeOneFirst(sql.type(z.object({ base_url: z.string().nullable() }))`
    SELECT n.base_url FROM solver_connections sc JOIN api_nodes n ON n.node_id = sc.node_id WHERE sc.solver_id = ${solverId} LIMIT 1`);
}

/** The task's id when a task of that id is stored, else null. */
export async function storedTaskId(db: Runner, taskId: string): Promise<string | null> {
  return db.maybeOneFirst(
    sql.type(z.object({ task_id: z.string() }))`SELECT task_id FROM tasks WHERE task_id = ${taskId}`,
  );
}

const OpenCanaryRow = z.object({
  canary_id: z.string(),
  task_type: z.string(),
  token: z.string(),
  audit: z.unknown(),
  page: z.string().nullable(),
});
export type OpenCanary = z.infer<typeof OpenCanaryRow>;

/**
 * The task's canary while it has no verdict, its row locked for the caller's transaction; null when the task is
 * no open canary.
 */
export async function lockOpenCanaryIn(tx: Runner, taskId: string): Promise<OpenCanary | null> {
  return tx.maybeOne(sql.type(OpenCanaryRow)`
    SELECT canary_id, task_type, token, audit, page FROM canaries WHERE task_id = ${taskId} AND verdict IS NULL FOR UPDATE`);
}

/** The moment a solver's audits start counting again: its last cleared quarantine's clearing. */
const lastClearOf = (solverId: Fragment) =>
  sql.fragment`COALESCE((SELECT max(cleared_at) FROM solver_quarantines WHERE solver_id = ${solverId}), '-infinity')`;

/**
 * A solver's judged audits (or canaries) of a task type, oldest first, `taskId` left out (null: none):
 * its last `count` since an admin last cleared a quarantine of the solver (those before no longer count).
 */
export async function judgedAuditsSinceClear(
  tx: Runner,
  solverId: string,
  taskType: string,
  taskId: string | null,
  count: number,
): Promise<boolean[]> {
  const verdicts = await tx.anyFirst(sql.type(z.object({ passed: z.boolean() }))`
    SELECT passed FROM (
      SELECT verdict = 'passed' AS passed, judged_at FROM canaries
      WHERE solver_id = ${solverId} AND task_type = ${taskType} AND (${taskId}::text IS NULL OR task_id <> ${taskId}) AND verdict IN ('passed', 'failed')
        AND judged_at > ${lastClearOf(sql.fragment`${solverId}`)}
      ORDER BY judged_at DESC LIMIT ${count}::int) w
    ORDER BY judged_at`);
  return [...verdicts];
}

/**
 * The model that answered an audit: the model name of the capability its one attempt was matched to
 * (a strong-tier one: audits are reserved with the strong-tier allowlist), as it was at the time.
 */
const AUDIT_MODEL = sql.fragment`(SELECT a.model_name FROM task_attempts a WHERE a.task_id = c.task_id ORDER BY a.attempt_number DESC LIMIT 1)`;

const ChatAuditCountRow = z.object({
  model: z.string(),
  passed: z.number(),
  failed: z.number(),
  passed_since_clear: z.number(),
  failed_since_clear: z.number(),
});
export type ChatAuditCounts = z.infer<typeof ChatAuditCountRow>;

/**
 * A solver's judged chat audits per model that answered them: passed and failed, all told and since an
 * admin last cleared a quarantine of the solver (what its sequential test reads), model names in order.
 */
export async function chatAuditCounts(db: Runner, solverId: string): Promise<readonly ChatAuditCounts[]> {
  return db.any(sql.type(ChatAuditCountRow)`
    WITH judged AS (
      SELECT ${AUDIT_MODEL} AS model, c.verdict, c.judged_at > ${lastClearOf(sql.fragment`${solverId}`)} AS since_clear
      FROM canaries c
      WHERE c.solver_id = ${solverId} AND c.task_type = ${CHAT_TASK_TYPE} AND c.verdict IN ('passed', 'failed')
    )
    SELECT COALESCE(model, '') AS model,
           count(*) FILTER (WHERE verdict = 'passed')::int AS passed, count(*) FILTER (WHERE verdict = 'failed')::int AS failed,
           count(*) FILTER (WHERE verdict = 'passed' AND since_clear)::int AS passed_since_clear,
           count(*) FILTER (WHERE verdict = 'failed' AND since_clear)::int AS failed_since_clear
    FROM judged GROUP BY model ORDER BY model`);
}

/** Chat audits judged in the last `withinSeconds`, per model that answered them and verdict. */
export async function recentChatAuditVerdicts(db: Runner, withinSeconds: number) {
  const rows = await db.any(sql.type(
    z.object({ model: z.string(), verdict: z.enum(['passed', 'failed']), audits: z.number() }),
  )`
    SELECT COALESCE(${AUDIT_MODEL}, '') AS model, c.verdict, count(*)::int AS audits
    FROM canaries c
    WHERE c.task_type = ${CHAT_TASK_TYPE} AND c.verdict IN ('passed', 'failed') AND c.judged_at > now() - make_interval(secs => ${withinSeconds})
    GROUP BY 1, 2 ORDER BY 1, 2`);
  return [...rows];
}

/**
 * For each solver out of quarantine with a chat audit judged in the last `withinSeconds`: the verdicts
 * its sequential test reads (as judgedAuditsSinceClear: its last `count` since its last cleared
 * quarantine, oldest first) and the model that answered its latest audit.
 */
export async function recentChatAuditHistories(db: Runner, withinSeconds: number, count: number) {
  const rows = await db.any(sql.type(z.object({ model: z.string(), verdicts: z.array(z.boolean()) }))`
    WITH audited AS (
      SELECT DISTINCT c.solver_id FROM canaries c
      WHERE c.task_type = ${CHAT_TASK_TYPE} AND c.verdict IN ('passed', 'failed') AND c.judged_at > now() - make_interval(secs => ${withinSeconds})
        AND NOT EXISTS (SELECT 1 FROM solver_quarantines q WHERE q.solver_id = c.solver_id AND q.cleared_at IS NULL)
    )
    SELECT COALESCE(h.model, '') AS model, h.verdicts
    FROM audited s
    CROSS JOIN LATERAL (
      SELECT (array_agg(w.model ORDER BY w.judged_at DESC))[1] AS model, array_agg(w.passed ORDER BY w.judged_at) AS verdicts
      FROM (
        SELECT ${AUDIT_MODEL} AS model, c.verdict = 'passed' AS passed, c.judged_at FROM canaries c
        WHERE c.solver_id = s.solver_id AND c.task_type = ${CHAT_TASK_TYPE} AND c.verdict IN ('passed', 'failed')
          AND c.judged_at > ${lastClearOf(sql.fragment`s.solver_id`)}
        ORDER BY c.judged_at DESC LIMIT ${count}::int
      ) w
    ) h
    WHERE h.verdicts IS NOT NULL`);
  return [...rows];
}

/**
 * One of the latest `sample` client chats, drawn at random, without its contents: its payload less
 * its messages and tools, its messages' roles and its tools' count (null when there is none).
 */
export async function recentClientChatShapes(db: Runner, sample: number) {
  return db.maybeOne(sql.type(
    z.object({ params: z.record(z.unknown()), roles: z.array(z.string()).nullable(), tools: z.number() }),
  )`
    SELECT t.payload - 'messages' - 'tools' AS params,
           (SELECT array_agg(m ->> 'role') FROM jsonb_array_elements(t.payload -> 'messages') m) AS roles,
           CASE WHEN jsonb_typeof(t.payload -> 'tools') = 'array' THEN jsonb_array_length(t.payload -> 'tools') ELSE 0 END AS tools
    FROM (
      SELECT task_id FROM tasks
      WHERE task_type = ${CHAT_TASK_TYPE} AND account_id <> ${PLATFORM_ACCOUNT_ID}
      ORDER BY created_at DESC LIMIT ${sample}::int
    ) recent JOIN tasks t USING (task_id)
    ORDER BY random() LIMIT 1`);
}

/**
 * Records a canary's verdict in one statement: the verdict and the problems found (kept with its
 * audit), CANARY_PASS_WEIGHT successes or failures and one passed or failed canary on the solver's
 * record, and when `quarantine` its quarantine with `reason` and the evidence; a canary that closes
 * without quarantine announces the solver, which may be due its next one.
 */
export async function recordCanaryVerdictIn(
  tx: Runner,
  verdict: {
    taskId: string;
    solverId: string;
    taskType: string;
    passed: boolean;
    quarantine: boolean;
    problems: unknown[];
    reason: 'chat_audit_failed' | 'canary_failed';
    evidence: Record<string, unknown>;
  },
): Promise<void> {
  const { taskId, solverId, passed, quarantine } = verdict;
  const weight = CANARY_PASS_WEIGHT;
  await tx.query(sql.unsafe`
    WITH judged AS (
      UPDATE canaries SET verdict = ${(passed ? 'passed' : 'failed') satisfies CanaryVerdict}, judged_at = now(),
        audit = CASE WHEN audit IS NULL THEN NULL ELSE audit || jsonb_build_object('problems', ${sql.jsonb(verdict.problems as never)}::jsonb) END
      WHERE task_id = ${taskId}
    ), counted AS (
      INSERT INTO solver_reputation AS r (solver_id, task_type, successes, failures, canary_passes, canary_failures)
      VALUES (${solverId}, ${verdict.taskType}, ${passed ? weight : 0}, ${passed ? 0 : weight}, ${passed ? 1 : 0}, ${passed ? 0 : 1})
      ON CONFLICT (solver_id, task_type) DO UPDATE SET
        successes = r.successes + EXCLUDED.successes, failures = r.failures + EXCLUDED.failures,
        canary_passes = r.canary_passes + EXCLUDED.canary_passes, canary_failures = r.canary_failures + EXCLUDED.canary_failures,
        -- A failure that does not quarantine is checked again at once.
        canary_due_after = CASE WHEN ${!passed && !quarantine} THEN r.since_canary ELSE r.canary_due_after END
    ), quarantined AS (
      INSERT INTO solver_quarantines (solver_id, task_type, reason, evidence)
      SELECT ${solverId}, ${verdict.taskType}, ${verdict.reason}, ${sql.jsonb(verdict.evidence as never)}
      WHERE ${quarantine}
      ON CONFLICT DO NOTHING
    )
    -- A canary that closes without quarantine (a pass, or a chat audit failed once) leaves the solver
    -- possibly due the next one (probation, attempts meanwhile, or the failed audit's recheck at once).
    SELECT ${announceCanaryDue(sql.fragment`${solverId}::text`)} WHERE ${!quarantine}`);
}

/**
 * A canary whose task ended without a result: no verdict on the solver's honesty (its attempt counted
 * as a failure, unless it could not resolve a canary name: "Target failures"). The next is due after a
 * backoff (backingOff); announced, for the workers to see when.
 */
export async function markCanaryUnanswered(db: Runner, taskId: string): Promise<void> {
  await db.query(sql.unsafe`
    WITH marked AS (
      UPDATE canaries SET verdict = ${'unanswered' satisfies CanaryVerdict}, judged_at = now() WHERE task_id = ${taskId} AND verdict IS NULL
      RETURNING solver_id
    )
    SELECT ${announceCanaryDue(sql.fragment`solver_id`)} FROM marked`);
}
