import crypto from 'node:crypto';
import type { CommonQueryMethods, DatabasePool } from 'slonik';
import { z } from 'zod';
import {
  canaryAtPage,
  canaryPageTaken,
  chatAuditCounts,
  judgedAuditsSinceClear,
  recentChatAuditHistories,
  recentChatAuditVerdicts,
  recentClientChatShapes,
  lockOpenCanaryIn,
  recentCanaryHosts,
  recordCanaryVerdictIn,
  solverNodeBaseUrl,
  storedTaskId,
} from '../db/canaries';
import { createCanaryTask } from '../db/platform-tasks';
import type { CanaryVerdict } from '../contract/lifecycle';
import { CHAT_TASK_TYPE } from '../schemas/domain';
import { PAYLOAD_SCHEMAS } from '../schemas/requests';
import type { SolverTrust } from '../schemas/responses';
import {
  AUDIT_HISTORY,
  AUDIT_SPRT,
  auditTest,
  buildChatAudit,
  ChatAuditExpectation,
  EXPECTED_AUDIT_PASS_RATE,
  judgeChatAudit,
  nearQuarantine,
  shapeOf,
  type ChatShape,
} from './chat-audit';
import { tokenFromPng } from './pixels';
import type { CanaryTaskType, TrustPolicy } from '../db/reputation';
import type { SearchOracle } from './search-oracle';
import { compareResults, disagrees, SIMILARITY_MEASURES, textSimilarity } from './similarity';
import type { CanaryOrigin } from '../config';
import { canaryUrlBase, drawCanaryHost, LOCAL_CANARY_DOMAIN } from './canary-hosts';
import { canaryPage, canaryPageText } from './canary-pages';

/**
 * Canary tasks (docs/trust.md): the platform account sends a solver a task for a page the service
 * serves under a canary host name (CANARY_HOSTS), drawn from a fresh random seed like any small site's
 * page (src/trust/canary-pages.ts); a fetch or snapshot passes when its text is the page's text (by
 * the redundant runs' measure), a screenshot when its pixels show the seed's grid. For chat, the
 * canary is an audit prompt (src/trust/chat-audit.ts) whose answer is known; for web_search, a fresh query
 * whose answer the search oracle gave (src/trust/search-oracle.ts)
 * and the result is compared with by the redundant runs' measure. The verdict is given in the
 * transaction that stores the result and settles it. The statements, and the rule of when a solver is
 * due a canary: src/db/canaries.ts.
 */

type Runner = CommonQueryMethods;

export { isCanaryTaskType, type CanaryTaskType } from '../db/reputation';

const SEARCH_TASK_TYPE = 'web_search';

/**
 * The price cap (and the platform's hold) of every canary, page, audit or search: CHECK_PRICE_CEILING_POINTS.
 * The settlement captures the checked solver's own price within it, as for a client's task, so a
 * solver is checked at whatever price it asks up to the ceiling; above it, it gets no client work
 * (trusted). Held at the ceiling rather than the price found as it was due, so that a price raised
 * before the canary is matched still matches.
 */
export const canaryHold = (config: { trust: { checkPriceCeilingPoints: string } }) =>
  config.trust.checkPriceCeilingPoints;

/**
 * The workflow id of a solver's canary of a task type: numbered by the canaries of that type it was
 * sent before, so that every process starting the same due canary names one workflow (the others'
 * starts are refused). Its TaskType search attribute value is its own, in the Temporal UI.
 */
export const canaryWorkflowId = (solverId: string, taskType: string, sent: number) =>
  `canary-${solverId}-${taskType}-${sent + 1}`;
export const canarySearchTaskType = (taskType: string) => `canary_${taskType}`;

/** The canary page at a host name and path (its HTML), or null when there is none. */
export async function canaryPageAt(db: Runner, hostname: string, path: string): Promise<string | null> {
  const host = hostname.toLowerCase();
  const canary = await canaryAtPage(db, `${host}${path}`);
  return canary ? canaryPage(canary.token, canary.task_type, host).html : null;
}

export interface NewCanary {
  taskId: string;
  solverId: string;
  taskType: CanaryTaskType;
  /** Canaries of that type the solver was sent before this one, as its starter found it due. */
  sent: number;
  workflowId: string;
  /**
   * Where pages are served (CANARY_HOSTS), or under localhost names on the port of the node holding the solver's
   * socket.
   */
  canaryHosts: { configured: readonly CanaryOrigin[]; local: boolean };
  pricePoints: string;
  timeoutSeconds: number;
  /** What web_search canaries are compared with; none: no web_search canary is created. */
  searchOracle?: SearchOracle | null;
}

/** What a web_search canary expects (kept in the canary's `audit` column): the oracle's result URLs for its query. */
const SearchExpectation = z.object({
  kind: z.literal('search'),
  oracle: z.string(),
  query: z.string(),
  count: z.number(),
  results: z.array(z.object({ title: z.string(), url: z.string() })),
});

/** Recent client chats an audit's shape is drawn from (the newest, so that it follows what clients send now). */
const SHAPE_SAMPLE = 200;

/**
 * The shape of one of the latest client chats, drawn at random (null when there is none): its
 * sampling parameters, system prompt, earlier exchanges, tools or response format, never its contents
 * (shapeOf reads the stored payload without its messages' or tools' text).
 */
async function recentClientChatShape(db: Runner): Promise<ChatShape | null> {
  const row = await recentClientChatShapes(db, SHAPE_SAMPLE);
  if (!row) return null;
  return shapeOf({
    ...row.params,
    messages: (row.roles ?? []).map((role) => ({ role })),
    tools: Array.from({ length: row.tools }, () => ({})),
  });
}

/**
 * The task a canary sends, per task type, and what its result must show: for the page types the page's
 * address in the payload a client's request becomes (its defaults filled in the same way), the seed
 * the page is drawn from and where it is served (host and path); for chat a fresh audit prompt and its
 * expected answer; for web_search a fresh query and the oracle's answer. A string: why there is none.
 */
async function canaryTask(
  db: Runner,
  canary: NewCanary,
): Promise<
  | {
      payload: Record<string, unknown>;
      token: string;
      audit: ChatAuditExpectation | z.infer<typeof SearchExpectation> | null;
      page?: string;
    }
  | 'no_page_address'
  | 'no_oracle_answer'
> {
  if (canary.taskType === CHAT_TASK_TYPE) {
    const built = buildChatAudit({ shape: (await recentClientChatShape(db)) ?? undefined });
    return { payload: built.payload, token: built.token, audit: built.expected };
  }
  if (canary.taskType === SEARCH_TASK_TYPE) {
    const drawn = await canary.searchOracle?.drawCanary();
    if (!drawn) return 'no_oracle_answer';
    const { payload, results } = drawn;
    return {
      payload,
      token: payload.query,
      audit: { kind: 'search', oracle: canary.searchOracle!.name, query: payload.query, count: payload.count, results },
    };
  }
  const origin = await pageOrigin(db, canary);
  if (!origin) return 'no_page_address';
  const earlierHosts = await recentCanaryHosts(db, canary.solverId, EARLIER_HOSTS);
  const host = drawCanaryHost(origin, earlierHosts);
  // A page is at a path of its own on its host: a seed whose page is taken (rare) is drawn again.
  let token: string;
  let path: string;
  do {
    token = crypto.randomBytes(16).toString('hex');
    path = canaryPage(token, canary.taskType, host).path;
  } while (await canaryPageTaken(db, `${host}${path}`));
  const payload = PAYLOAD_SCHEMAS[canary.taskType].parse({ url: `${canaryUrlBase(origin, host)}${path}` }) as Record<
    string,
    unknown
  >;
  return { payload, token, audit: null, page: `${host}${path}` };
}

/** The solver's latest canary hosts a new page may reuse (drawCanaryHost). */
const EARLIER_HOSTS = 8;

/**
 * The origin of a new canary page: one of CANARY_HOSTS, or names under localhost on the port of the node holding
 * the solver's socket.
 */
async function pageOrigin(db: Runner, canary: NewCanary): Promise<CanaryOrigin | null> {
  const { configured, local } = canary.canaryHosts;
  if (configured.length > 0) return configured[crypto.randomInt(configured.length)]!;
  if (!local) return null;
  const base = await solverNodeBaseUrl(db, canary.solverId);
  if (!base) return null;
  const url = new URL(base);
  return { scheme: 'http', host: LOCAL_CANARY_DOMAIN, port: url.port ? Number(url.port) : null };
}

/** What creating a canary did: the task to run, or why there is none. */
export type CanaryCreated =
  | { created: true; taskId: string }
  | { created: false; reason: 'not_due' | 'no_page_address' | 'no_oracle_answer' | 'platform_balance' };

/**
 * Creates the canary, its task (the platform's, with the solver's task payload shape and nothing
 * else) and the platform's hold, in one statement (createCanaryTask), and draws the count for the next canary; only
 * while the solver is still due it and was sent no other canary of the type since it was found due
 * (`not_due` otherwise: a late start of a canary already sent creates nothing). Its workflow is
 * already running (it calls this), so the task is marked started: the stranded-task sweep leaves it
 * alone. Idempotent by task id.
 */
export async function createCanary(db: DatabasePool, policy: TrustPolicy, canary: NewCanary): Promise<CanaryCreated> {
  const existing = await storedTaskId(db, canary.taskId);
  if (existing) return { created: true, taskId: canary.taskId };
  const task = await canaryTask(db, canary);
  if (typeof task === 'string') return { created: false, reason: task };
  const outcome = await createCanaryTask(db, policy, {
    taskId: canary.taskId,
    taskType: canary.taskType,
    payload: task.payload,
    maxPricePoints: canary.pricePoints,
    timeoutSeconds: canary.timeoutSeconds,
    workflowId: canary.workflowId,
    solverId: canary.solverId,
    canaryId: crypto.randomBytes(12).toString('base64url'),
    token: task.token,
    audit: task.audit,
    page: task.page ?? null,
    sent: canary.sent,
  });
  if (outcome === 'platform_balance') return { created: false, reason: 'platform_balance' };
  if (outcome === 'not_claimed') {
    // An earlier try of this call whose statement committed after it was given up on (a slow commit
    // on a busy database) made the solver look not due: that canary is this one.
    const committed = await storedTaskId(db, canary.taskId);
    return committed ? { created: true, taskId: committed } : { created: false, reason: 'not_due' };
  }
  return { created: true, taskId: canary.taskId };
}

/**
 * What a result shows of the page: the text of a fetch or snapshot, and for a screenshot the token
 * read back from the image's grid (or why it could not be read).
 */
function resultText(taskType: string, result: Record<string, unknown>): string {
  if (taskType === SEARCH_TASK_TYPE) {
    const results = Array.isArray(result.results) ? (result.results as { url?: unknown }[]) : [];
    return results.map((hit) => String(hit?.url ?? '')).join('\n');
  }
  if (taskType === 'screenshot') {
    if (typeof result.image_base64 !== 'string') return '';
    try {
      return tokenFromPng(Buffer.from(result.image_base64, 'base64'));
    } catch (error) {
      return `unreadable image: ${(error as Error).message}`;
    }
  }
  const field = taskType === 'page_snapshot' ? result.snapshot : result.content;
  return typeof field === 'string' ? field : '';
}

/**
 * Judges a canary's result, in the transaction that stores it: a pass counts CANARY_PASS_WEIGHT
 * successes and one passed canary; a failure counts as many failures and one failed canary, and
 * quarantines the solver with the evidence: at once for the web types, and for a chat audit when the
 * sequential test over its judged audits (AUDIT_SPRT: a model below EXPECTED_AUDIT_PASS_RATE) reaches
 * its threshold (a model may slip); a chat audit failed without quarantine makes the next one due at
 * once. Returns null when the task is no canary.
 */
export async function judgeCanaryIn(
  tx: Runner,
  taskId: string,
  solverId: string,
  result: Record<string, unknown>,
): Promise<Exclude<CanaryVerdict, 'unanswered'> | null> {
  const canary = await lockOpenCanaryIn(tx, taskId);
  if (!canary) return null;
  const expected =
    canary.audit === null || canary.task_type !== CHAT_TASK_TYPE ? null : ChatAuditExpectation.parse(canary.audit);
  const judged = expected ? judgeChatAudit(expected, result) : null;
  const searched =
    canary.task_type === SEARCH_TASK_TYPE ? judgeSearch(SearchExpectation.parse(canary.audit), result) : null;
  const text = resultText(canary.task_type, result);
  const paged =
    canary.page !== null && canary.task_type !== 'screenshot'
      ? judgePageText(canary.token, canary.task_type, canary.page, text)
      : null;
  const passed = judged
    ? judged.passed
    : searched
      ? searched.passed
      : paged
        ? paged.passed
        : text.includes(canary.token);
  const verdict: CanaryVerdict = passed ? 'passed' : 'failed';
  // One failure quarantines (web); a chat audit, the sequential test over the solver's judged audits.
  const test = judged
    ? auditTest([...(await judgedAuditsSinceClear(tx, solverId, canary.task_type, taskId, AUDIT_HISTORY)), passed])
    : null;
  const quarantine = test ? test.decision === 'quarantine' : !passed;
  const evidence = {
    canary_task_id: taskId,
    task_type: canary.task_type,
    expected_token: canary.token,
    // What came back, cut short: enough for an admin to see what the solver made up.
    returned_excerpt: judged ? judged.returned : text.slice(0, 500),
    ...(judged && expected && test
      ? {
          audit: expected.kind,
          problems: judged.problems,
          usage: result.usage ?? null,
          failed_audits: test.failed,
          judged_audits: test.judged,
          llr: test.llr,
          threshold: test.threshold,
          expected_pass_rate: 1 - AUDIT_SPRT.p0,
        }
      : {}),
    ...(searched ? { search: searched.evidence } : {}),
    ...(paged ? { page: paged.evidence } : {}),
  };
  await recordCanaryVerdictIn(tx, {
    taskId,
    solverId,
    taskType: canary.task_type,
    passed,
    quarantine,
    problems: judged?.problems ?? searched?.problems ?? [],
    reason: judged ? 'chat_audit_failed' : 'canary_failed',
    evidence,
  });
  return verdict;
}

/** Passed over judged, to 4 places; null when none was judged. */
const passRate = (passed: number, failed: number) =>
  passed + failed > 0 ? Number((passed / (passed + failed)).toFixed(4)) : null;

/**
 * What an admin reads of a solver's chat audits (docs/trust.md, "Chat audits", where to see them): per
 * model that answered them, the audits passed and failed and the pass rate, all told and since its last
 * cleared quarantine; and its sequential test where the judge's next verdict would find it (the same
 * history: one test per solver, whatever model answered; null when it was never audited).
 */
export async function chatAuditsOf(db: Runner, solverId: string) {
  const [counts, history] = await Promise.all([
    chatAuditCounts(db, solverId),
    judgedAuditsSinceClear(db, solverId, CHAT_TASK_TYPE, null, AUDIT_HISTORY),
  ]);
  const test = auditTest(history);
  // Typed as the route's answer declares it, so that the decisions sprtStep gives and the documented ones cannot drift.
  const audits: Pick<z.infer<typeof SolverTrust>, 'chat_audits' | 'chat_audit_test'> = {
    chat_audits: counts.map((row) => ({
      ...row,
      pass_rate: passRate(row.passed, row.failed),
      pass_rate_since_clear: passRate(row.passed_since_clear, row.failed_since_clear),
    })),
    chat_audit_test:
      counts.length > 0
        ? { ...test, near_quarantine: nearQuarantine(test), expected_pass_rate: EXPECTED_AUDIT_PASS_RATE }
        : null,
  };
  return audits;
}

/**
 * Chat audits' figures over the last `withinSeconds`, for the metrics: audits judged per model and
 * verdict, and per model (of its latest audit) the solvers out of quarantine audited then whose
 * sequential test stands near quarantine (nearQuarantine).
 */
export async function chatAuditFigures(db: Runner, withinSeconds: number) {
  const [verdicts, histories] = await Promise.all([
    recentChatAuditVerdicts(db, withinSeconds),
    recentChatAuditHistories(db, withinSeconds, AUDIT_HISTORY),
  ]);
  const near = new Map<string, number>();
  for (const { model, verdicts: history } of histories)
    near.set(model, (near.get(model) ?? 0) + (nearQuarantine(auditTest(history)) ? 1 : 0));
  return { verdicts, nearQuarantine: [...near].map(([model, solvers]) => ({ model, solvers })) };
}

/**
 * A fetch's or snapshot's verdict on a canary page: the returned text against the page's own text
 * (canaryPageText), by the redundant runs' text measure and the fetch threshold (3-word shingles,
 * src/trust/similarity.ts): below it, the page was not what the solver read.
 */
function judgePageText(token: string, taskType: string, page: string, text: string) {
  const slash = page.indexOf('/');
  const host = page.slice(0, slash);
  const expected = canaryPageText(canaryPage(token, taskType, host).html);
  const { measure, threshold } = SIMILARITY_MEASURES.proxy_fetch;
  const similarity = Math.round(textSimilarity(expected, text) * 10_000) / 10_000;
  return {
    passed: similarity >= threshold,
    evidence: {
      host,
      path: page.slice(slash),
      measure,
      similarity,
      threshold,
      expected_excerpt: expected.slice(0, 500),
    },
  };
}

/**
 * A web_search canary's verdict: the solver's result URLs against the oracle's, by the redundant runs'
 * measure and threshold (result_url_overlap, src/trust/similarity.ts): below it, the results were not
 * searched for that query.
 */
function judgeSearch(expected: z.infer<typeof SearchExpectation>, result: Record<string, unknown>) {
  // The solver's result is the one checked, the oracle's the check (never empty: a query it answers with
  // nothing is drawn again), so an empty answer from the solver fails.
  const comparison = compareResults(SEARCH_TASK_TYPE, result, { results: expected.results }, { count: expected.count });
  const passed = comparison.similarity !== null && !disagrees(comparison);
  return {
    passed,
    problems: passed ? [] : [`result_url_overlap ${comparison.similarity} is below ${comparison.threshold}`],
    evidence: {
      oracle: expected.oracle,
      query: expected.query,
      measure: comparison.measure,
      similarity: comparison.similarity,
      threshold: comparison.threshold,
      oracle_urls: comparison.second.urls,
      returned_urls: comparison.first.urls,
    },
  };
}
