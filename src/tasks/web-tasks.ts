import type { Db } from '../db/pool';
import { getTaskRecord, type TaskRecord } from '../db/tasks';
import { ApiError } from '../errors';
import type { DomainGuard } from '../policy/guard';
import type { ScanResult } from '../safety/scanner';
import { isTerminalState, type WebTaskType } from '../schemas/domain';
import { noSolverOnline, type TaskService } from './service';

/**
 * How the HTTP routes create and run web tasks (POST /v1/tasks, the convenience endpoints, the scrape
 * compatibility endpoint): the domain policy judges the target first, then the task is created through
 * TaskService, and the convenience forms wait for its verdict.
 */

export interface WebTaskDeps {
  db: Db;
  tasks: TaskService;
  domainPolicy: DomainGuard;
}

export interface WebTaskInput {
  accountId: string;
  taskType: WebTaskType;
  payload: Record<string, unknown>;
  maxPricePoints?: string | null;
  /** The request can set max_price_points (POST /v1/tasks). */
  priceFromRequest?: boolean;
  timeoutSeconds?: number | null;
  idempotencyKey?: string;
  /** Where the payload's url sits in the request, for the 422 of a URL that does not parse. */
  urlLoc: (string | number)[];
}

export type CompletedTask = TaskRecord & { result: Record<string, any> };

/** Idempotency keys longer than this are ignored rather than stored. */
export const idempotencyKeyOf = (header: string | undefined) => (header && header.length <= 255 ? header : undefined);

async function assertTargetAllowed(deps: WebTaskDeps, input: WebTaskInput): Promise<void> {
  const url = input.payload.url;
  if (typeof url === 'string') await deps.domainPolicy.assertAllowed(url, input.urlLoc);
}

const toCreateInput = ({ urlLoc: _loc, ...input }: WebTaskInput) => input;

/** Creates a web task (it runs on its own; the caller polls). */
export async function createWebTask(deps: WebTaskDeps, input: WebTaskInput): Promise<TaskRecord> {
  await assertTargetAllowed(deps, input);
  return deps.tasks.create(toCreateInput(input));
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
  const started = Date.now();
  // 503 when no solver for the type is online at all; checked as the task is created, which then does not happen.
  const task = await deps.tasks.create({ ...toCreateInput(input), unavailable: () => noSolverOnline(input.taskType) });
  onCreated(task);
  const verdict = isTerminalState(task.status) ? task : await deps.tasks.waitForResult(task);
  const finished = verdict ? await getTaskRecord(deps.db, task.task_id) : null;
  if (!finished || finished.status === 'timed_out' || !['completed', 'failed'].includes(finished.status)) {
    throw new ApiError('task_timeout', `The task did not finish in ${task.timeout_seconds} s; poll GET /v1/tasks/${task.task_id}.`, { task_id: task.task_id });
  }
  if (finished.status === 'failed') {
    throw new ApiError('solver_failed', `The task failed on every attempt: ${finished.error?.message ?? 'unknown error'}`, { task_id: task.task_id });
  }
  return { task: finished as CompletedTask, elapsedMs: Date.now() - started };
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
