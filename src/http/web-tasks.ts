import type { ArtifactStore } from '../artifacts/store';
import type { Idempotency, PriceLimit } from '../db/tasks/create';
import type { TaskRecord } from '../db/tasks/records';
import { withArtifacts } from '../tasks/records';
import type { WebhookEvent } from '../db/webhooks';
import { ApiError } from '../errors';
import type { DomainGuard } from '../guard/domain-guard';
import type { ScanResult } from '../safety/scanner';
import type { RoutingSort, WebTaskType } from '../schemas/domain';
import { clientFailure, type TaskState } from '../contract/lifecycle';
import type { CreateResult, TaskEngine } from '../tasks/engine';
import { assertAllowedTarget } from './target-policy';

/**
 * How the HTTP routes create and run tasks (POST /v1/tasks, the convenience endpoints, the scrape
 * compatibility endpoint, chat): the domain policy judges a web task's target first, then the task is
 * created through the task engine, and the waiting forms wait for its verdict. The HTTP errors of a task
 * that was not created or did not complete are made here.
 */

// A solver that lost its connection is back within a few seconds (its reconnection backoff starts at
// 0.5 s); asking again sooner mostly finds none again.
export const NO_SOLVER_RETRY_AFTER_SECONDS = 10;

/** 503 no_solver_available: a temporary condition, so it says when to ask again. */
export const noSolverOnline = (taskType: WebTaskType) =>
  new ApiError(
    'no_solver_available',
    `No solver for ${taskType} is online right now; retry in ${NO_SOLVER_RETRY_AFTER_SECONDS} s.`,
    { retry_after_seconds: NO_SOLVER_RETRY_AFTER_SECONDS },
    { 'Retry-After': String(NO_SOLVER_RETRY_AFTER_SECONDS) },
  );

/**
 * 503 solver_checks_unfunded: solvers for the type are online but on probation, and the platform
 * account cannot pay the checks that would end it (docs/trust.md, "Who pays the checks"). Nothing the
 * client does changes it; the operator funds the platform account, and the solvers are served once
 * their checks pass.
 */
export const solverChecksUnfunded = (taskType: string, solvers: number) =>
  new ApiError(
    'solver_checks_unfunded',
    `${solvers === 1 ? 'A solver' : `${solvers} solvers`} for ${taskType} ${solvers === 1 ? 'is' : 'are'} ` +
      `online but still on probation: the checks that end probation are paid from the service's ` +
      `platform account, which cannot pay them now. The operator must fund the platform account; ` +
      `the request can be served once a solver has passed its check.`,
    { task_type: taskType, solvers_on_probation: solvers },
  );

/**
 * Why no solver of the type can take a task now, as the HTTP error of a route that checks before it
 * creates anything: on probation for want of the platform's points, none in the country asked for, or
 * none online at all.
 */
export async function noSolverError(
  tasks: Pick<TaskEngine, 'whyNoSolver'>,
  taskType: WebTaskType,
  country?: string,
): Promise<ApiError> {
  const why = await tasks.whyNoSolver(taskType, { country });
  if (why.kind === 'checks_unfunded') return solverChecksUnfunded(taskType, why.solvers);
  return country ? noSolverInCountry(taskType, country) : noSolverOnline(taskType);
}

/**
 * 402 insufficient_balance: a hold of `amount` does not fit the account's available points. Lowering
 * max_price_points is offered only where the request can set it (POST /v1/tasks).
 */
export const insufficientBalance = (amount: string, priceFromRequest = false) =>
  new ApiError(
    'insufficient_balance',
    `This request holds ${amount} points while it runs (and is charged only what it costs), ` +
      `more than the account has available; deposit points${priceFromRequest ? ' or lower max_price_points' : ''}.`,
    { required_points: amount },
  );

/** 402 key_spend_limit_reached: the request's hold does not fit what is left of its key's spend limit. */
export const keySpendLimitReached = ({
  keyId,
  requiredPoints,
  limit,
}: Extract<CreateResult, { kind: 'key_spend_limit_reached' }>) =>
  new ApiError(
    'key_spend_limit_reached',
    `This request holds ${requiredPoints} points while it runs, more than is left of this API ` +
      `key's spend limit${limit ? ` (${limit.points} points ${limit.period === 'day' ? 'per UTC day' : 'in total'}, ${limit.spent_points} held or charged)` : ''}; nothing was held. Raise the limit (PATCH /v1/account/keys/${keyId})${limit?.period === 'day' ? ', wait for the next UTC day' : ''} ` +
      `or use another key.`,
    { key_id: keyId, required_points: requiredPoints, ...(limit ? { spend_limit: limit } : {}) },
  );

/** 422 idempotency_key_reused: the account sent this Idempotency-Key before with another request. */
export const idempotencyKeyReused = () =>
  new ApiError(
    'idempotency_key_reused',
    'This Idempotency-Key was used before with another request (another operation or body); ' +
      'nothing was done. Use a new key for a new request, or send the first request again to get ' +
      'its result.',
  );

/** 429 solvers_busy: admitting the task would only make it wait past its deadline (docs/queue.md, "Backpressure"). */
export const solversBusy = (retryAfterSeconds: number, waiting: number) =>
  new ApiError(
    'solvers_busy',
    `Every solver for this task is busy and ${waiting} task(s) already wait for one; nothing ` +
      `was held. Retry after ${retryAfterSeconds} s.`,
    { retry_after_seconds: retryAfterSeconds, queued_tasks: waiting },
    { 'Retry-After': String(retryAfterSeconds) },
  );

/** The field a price limit is set by, as the request names it. */
const LIMIT_FIELDS: Record<PriceLimit, string> = {
  prompt: 'provider.max_price.prompt',
  completion: 'provider.max_price.completion',
  request: 'provider.max_price.request',
  max_price_points: 'max_price_points',
  combined: 'provider.max_price',
};

/** Solvers are online, but none within the request's price limit `limit` (docs/queue.md, "What a chat pays"). */
function noSolverWithinPrice(limit: PriceLimit): ApiError {
  const field = LIMIT_FIELDS[limit];
  const message =
    limit === 'max_price_points'
      ? "No solver online can serve this request within its maximum price: each offer's estimate " +
        "(its base + its rates × the prompt's tokens and max_tokens) is above it. Shorten the " +
        'prompt or lower max_tokens.'
      : limit === 'combined'
        ? 'No solver online is within provider.max_price as a whole (each limit alone admits some); ' +
          'raise its limits or retry later.'
        : `No solver online is within ${field}; raise it or retry later.`;
  return new ApiError('no_solver_within_price', message, { param: field });
}

type Refusal = Exclude<CreateResult, { kind: 'created' | 'existing' }>;

/** The task a creation made (or found by its idempotency key), or the HTTP error saying why there is none. */
export function createdTask(result: CreateResult, refusal: Refusing): TaskRecord {
  if (result.kind === 'created' || result.kind === 'existing') return result.task;
  throw refusalError(result as Refusal, refusal);
}

/** What a refusal's error says beside the result: the route's own error for no solver online, the task's type. */
interface Refusing {
  priceFromRequest?: boolean;
  noSolver: () => ApiError;
  taskType: string;
}

/** The HTTP error of a task that was not created. */
function refusalError(result: Refusal, refusal: Refusing): ApiError {
  switch (result.kind) {
    case 'insufficient_balance':
      return insufficientBalance(result.requiredPoints, refusal.priceFromRequest);
    case 'key_spend_limit_reached':
      return keySpendLimitReached(result);
    case 'no_solver_online':
      return refusal.noSolver();
    case 'checks_unfunded':
      return solverChecksUnfunded(refusal.taskType, result.solvers);
    case 'no_solver_within_price':
      return noSolverWithinPrice(result.limit);
    case 'solvers_busy':
      return solversBusy(result.retryAfterSeconds, result.waiting);
    case 'idempotency_key_reused':
      return idempotencyKeyReused();
    case 'not_started':
      return new ApiError('service_unavailable', 'The task could not be started; nothing was charged. Retry shortly.', {
        task_id: result.taskId,
      });
  }
}

/** 410 result_expired: the task completed, and its result was removed after the retention window. */
export const resultExpired = (task: { task_id: string; result_expired_at: string | null }) =>
  new ApiError(
    'result_expired',
    `The result of task ${task.task_id} was removed at ${task.result_expired_at}, at the end of ` +
      `its retention; the task record keeps its state and cost.`,
    {
      task_id: task.task_id,
      result_expired_at: task.result_expired_at,
    },
  );

/** The HTTP error of a task that did not complete (see `clientFailure`); a web task's names it. */
export function failureError(
  kind: 'web' | 'chat',
  task: { task_id: string; timeout_seconds: number },
  verdict: { status: TaskState; error?: { type?: string; message?: string; solver_error_type?: string } | null } | null,
): ApiError {
  const failure = clientFailure(kind, task, verdict);
  return new ApiError(failure.type, failure.message, {
    ...(kind === 'web' ? { task_id: task.task_id } : {}),
    ...(failure.solverErrorType ? { solver_error_type: failure.solverErrorType } : {}),
  });
}

export interface WebTaskDeps {
  artifacts: ArtifactStore;
  tasks: TaskEngine;
  domainPolicy: DomainGuard;
}

export interface WebTaskInput {
  accountId: string;
  /** The request's API key (its spend limit applies). */
  keyId?: string;
  taskType: WebTaskType;
  payload: Record<string, unknown>;
  maxPricePoints?: string | null;
  /** The request can set max_price_points (POST /v1/tasks). */
  priceFromRequest?: boolean;
  timeoutSeconds?: number | null;
  /** The request's Idempotency-Key, as the task stores it, and the request's fingerprint (src/http/idempotency.ts). */
  idempotency?: Idempotency;
  /** Where the payload's url sits in the request, for the 422 of a URL that does not parse. */
  urlLoc: (string | number)[];
  /** Told of the task's terminal state (POST /v1/tasks); without it the account's default webhook, if any, is. */
  webhook?: { url: string; events?: readonly WebhookEvent[] } | null;
  /** The strict order the client asked matching for (`provider.sort`). */
  routingSort?: RoutingSort;
  /** The country the page must be fetched from (Firecrawl's location.country). */
  country?: string;
}

export type CompletedTask = TaskRecord & { result: Record<string, any> };

/**
 * What a finished request cost, as response headers: every convenience, scrape and JSON chat answer
 * carries them (a stream says it in its final chunk instead, its headers being long sent).
 */
export const costHeaders = (cost: { charged_points: string; held_points: string | null }) => ({
  'X-Points-Charged': cost.charged_points,
  'X-Points-Held': cost.held_points ?? '0',
});

async function assertTargetAllowed(deps: WebTaskDeps, input: WebTaskInput): Promise<void> {
  const url = input.payload.url;
  if (typeof url === 'string') await assertAllowedTarget(deps.domainPolicy, url, input.urlLoc);
}

const toCreateInput = ({ urlLoc: _loc, priceFromRequest: _price, ...input }: WebTaskInput) => input;

/**
 * No solver of the type that declares the country a task asks for is online (Firecrawl's location.country):
 * the request asks for what this marketplace may not have at all, so it is the client's 400, not a 503.
 */
export const noSolverInCountry = (taskType: WebTaskType, country: string) =>
  new ApiError(
    'location_unavailable',
    `No solver for ${taskType} that fetches from ${country} (location.country) is online; ` +
      `scrape without location, or later.`,
    { option: 'location', country },
  );

/**
 * Creates a web task (it runs on its own; the caller polls, or is told by its webhook). A webhook's
 * subscription is stored before the task, under the task's id, so the task cannot finish unobserved.
 */
export async function createWebTask(deps: WebTaskDeps, input: WebTaskInput): Promise<TaskRecord> {
  await assertTargetAllowed(deps, input);
  if (input.webhook) await assertAllowedTarget(deps.domainPolicy, input.webhook.url, ['body', 'webhook', 'url']);
  const result = await deps.tasks.create(toCreateInput(input));
  return withArtifacts(
    deps.artifacts,
    createdTask(result, {
      priceFromRequest: input.priceFromRequest,
      noSolver: () => noSolverOnline(input.taskType),
      taskType: input.taskType,
    }),
  );
}

/**
 * Creates the task, waits for its verdict, and maps failure and timeout to 502 / 504 with the task id.
 * `onCreated` sees the task as soon as it exists (to name it in a response header).
 */
export async function runWebTask(
  deps: WebTaskDeps,
  input: WebTaskInput,
  onCreated: (task: TaskRecord) => void = () => undefined,
): Promise<{ task: CompletedTask; elapsedMs: number }> {
  await assertTargetAllowed(deps, input);
  // 503 when no solver for the type is online at all; checked as the task is created, which then does not happen.
  const run = await deps.tasks.run(toCreateInput(input), onCreated);
  const noSolver = () =>
    input.country ? noSolverInCountry(input.taskType, input.country) : noSolverOnline(input.taskType);
  if (run.kind !== 'ended')
    throw refusalError(run, { priceFromRequest: input.priceFromRequest, noSolver, taskType: input.taskType });
  const { created, task: finished, elapsedMs } = run;
  // The same request sent again (its Idempotency-Key) after its result's retention.
  if (finished?.result_expired_at) throw resultExpired(finished);
  if (finished?.status !== 'completed' || !finished.result) throw failureError('web', created, finished);
  return { task: finished as CompletedTask, elapsedMs };
}

/**
 * The safety verdict a stored result carries (accounts with prompt_safety_scan on), as a response
 * field. `shown` keeps only findings about parts of the result the response actually contains.
 */
export function safetyOf(result: Record<string, unknown>, shown: (location: string) => boolean = () => true) {
  const safety = result.safety as ScanResult | undefined;
  if (!safety) return {};
  const findings = safety.findings.filter((finding) => shown(finding.location ?? ''));
  return { safety: { flagged: findings.length > 0, findings } };
}
