import type { Response, Request } from 'express';
import { deliveryIdOf, type WebhookEvent } from '../../db/webhooks';
import { artifactOf } from '../../artifacts/results';
import { ArtifactMissingError } from '../../artifacts/store';
import { ApiError } from '../../errors';
import type { WebTaskType } from '../../schemas/domain';
import {
  AdminCompleteTaskBody,
  CreateTaskBody,
  FetchBody,
  PAYLOAD_SCHEMAS,
  ScreenshotBody,
  SearchBody,
  SnapshotBody,
  TaskArtifactParams,
  TaskIdParams,
  WebhookDeliveryParams,
  type CreateTaskRequest,
  type FetchRequest,
  type ScreenshotRequest,
  type SearchRequest,
  type SnapshotRequest,
} from '../../schemas/requests';
import { decimalText } from '../../schemas/common';
import { RESULT_SCHEMAS } from '../../schemas/frames';
import { ListTasksQuery } from '../../schemas/queries';
import { idempotencyOf } from '../idempotency';
import { costHeaders, createWebTask, resultExpired, runWebTask, safetyOf } from '../web-tasks';
import { accountOf } from '../auth';
import { taskListFilter, taskListPage } from '../pagination';
import * as responses from '../../schemas/responses';
import type { AppDeps } from '../deps';
import { CREATES_TASK, IDEMPOTENT_RUN, idempotent, route, type Route } from '../route';
import { parseOrThrow } from '../validation';

const TASK_KEY = idempotent('returns the first task');
const RUN_KEY = idempotent("answers with the first request's task");

export function taskRoutes(deps: AppDeps): Route[] {
  const routes: Route[] = [];

  async function postTasks(req: Request, res: Response) {
    const body = req.body as CreateTaskRequest;
    // The payload is checked with the fields of the matching convenience body; errors point into it.
    const payload = parseOrThrow(PAYLOAD_SCHEMAS[body.task_type], body.payload, ['body', 'payload']);
    const task = await createWebTask(deps, {
      accountId: accountOf(res).account_id,
      keyId: accountOf(res).key_id,
      taskType: body.task_type,
      payload,
      maxPricePoints: body.max_price_points == null ? null : decimalText(body.max_price_points),
      priceFromRequest: true,
      timeoutSeconds: body.timeout_seconds,
      idempotency: idempotencyOf(req, 'tasks'),
      urlLoc: ['body', 'payload', 'url'],
      webhook: body.webhook,
      routingSort: body.provider?.sort ?? undefined,
    });
    res.json(task);
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/tasks',
      summary: 'Create a web task, optionally with a webhook told of its end',
      tag: 'tasks',
      auth: 'bearer',
      body: CreateTaskBody,
      response: responses.TaskRecord,
      headers: TASK_KEY,
      errors: ['domain_blocked', 'idempotency_key_reused', ...CREATES_TASK],
      handler: postTasks,
    }),
  );

  async function getTasks(req: Request, res: Response) {
    const query = parseOrThrow(ListTasksQuery, req.query, ['query']);
    const page = await deps.taskViews.listTasks(accountOf(res).account_id, taskListFilter(query));
    res.json(taskListPage(page));
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/tasks',
      summary: "The account's tasks, newest first, filtered and paged by cursor (records without result)",
      tag: 'tasks',
      auth: 'bearer',
      query: ListTasksQuery,
      response: responses.TaskListResponse,
      handler: getTasks,
    }),
  );

  async function getTask(req: Request, res: Response) {
    const task = await deps.tasks.read(req.params.task_id as string, accountOf(res).account_id);
    if (!task) throw new ApiError('task_not_found', `No task "${req.params.task_id}" on this account.`);
    res.json(task);
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/tasks/{task_id}',
      summary: 'Poll a task',
      tag: 'tasks',
      auth: 'bearer',
      params: TaskIdParams,
      response: responses.TaskRecord,
      errors: ['task_not_found'],
      handler: getTask,
    }),
  );

  async function getTaskArtifact(req: Request, res: Response) {
    const { task_id: taskId, name } = req.params as { task_id: string; name: string };
    const task = await deps.taskViews.getTaskRecord(taskId, accountOf(res).account_id);
    if (!task) throw new ApiError('task_not_found', `No task "${taskId}" on this account.`);
    if (task.result_expired_at) throw resultExpired(task);
    const artifact = task.result
      ? await artifactOf(deps.artifacts, task.task_type, task.result, name).catch(async (error) => {
          // Removed by the retention purge since the row was read.
          const expired = error instanceof ArtifactMissingError ? await deps.taskViews.getTaskRecord(taskId) : null;
          if (expired?.result_expired_at) throw resultExpired(expired);
          throw error;
        })
      : null;
    if (!artifact)
      throw new ApiError('artifact_not_found', `Task ${taskId} has no result part "${name}".`, {
        task_id: taskId,
        name,
      });
    // An artifact never changes once written; its digest is its validator.
    if (artifact.sha256) res.setHeader('ETag', `"${artifact.sha256}"`);
    res.setHeader('Cache-Control', 'private, max-age=3600');
    res.type(artifact.contentType).send(artifact.bytes);
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/tasks/{task_id}/artifacts/{name}',
      summary:
        "One large part of a completed task's result as its own bytes (a screenshot's PNG, a " +
        "page's HTML), for the account's key; Firecrawl scrapes answer `screenshot` with this URL",
      tag: 'tasks',
      auth: 'bearer',
      params: TaskArtifactParams,
      errors: ['task_not_found', 'artifact_not_found', 'result_expired'],
      success: 'artifact',
      handler: getTaskArtifact,
    }),
  );

  async function getTaskWebhooks(req: Request, res: Response) {
    const log = await deps.taskViews.deliveryLog(req.params.task_id as string, accountOf(res).account_id);
    if (!log) throw new ApiError('task_not_found', `No task "${req.params.task_id}" on this account.`);
    res.json(log);
  }

  routes.push(
    route({
      method: 'get',
      path: '/v1/tasks/{task_id}/webhooks',
      summary: "The task's webhook and the log of its deliveries, every attempt included",
      tag: 'tasks',
      auth: 'bearer',
      params: TaskIdParams,
      response: responses.WebhookLog,
      errors: ['task_not_found'],
      handler: getTaskWebhooks,
    }),
  );

  async function postTaskWebhookResend(req: Request, res: Response) {
    const { task_id: taskId, event } = req.params as { task_id: string; event: WebhookEvent };
    const resent = await deps.webhooks.resend({ taskId, accountId: accountOf(res).account_id, event });
    if (resent.outcome === 'task_not_found')
      throw new ApiError('task_not_found', `No task "${taskId}" on this account.`);
    if (resent.outcome === 'delivery_not_found')
      throw new ApiError('webhook_delivery_not_found', `Task ${taskId} has no "${event}" webhook delivery.`);
    if (resent.outcome === 'not_failed') {
      throw new ApiError(
        'webhook_delivery_not_failed',
        `The "${event}" delivery of task ${taskId} is ${resent.status}; only a failed delivery is ` + `sent again.`,
        { status: resent.status },
      );
    }
    res.locals.log.info({ task_id: taskId, event, attempts: resent.attempts }, 'webhook delivery resent');
    res.json({
      delivery_id: deliveryIdOf(taskId, event),
      task_id: taskId,
      event,
      status: 'pending',
      attempts: resent.attempts,
    });
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/tasks/{task_id}/webhooks/{event}/resend',
      summary:
        'Send a failed webhook delivery again: it goes back to the durable delivery path with a new ' +
        'retry window (a delivered or pending one is refused, so two resends at once send it once)',
      tag: 'tasks',
      auth: 'bearer',
      params: WebhookDeliveryParams,
      response: responses.WebhookResent,
      errors: ['task_not_found', 'webhook_delivery_not_found', 'webhook_delivery_not_failed'],
      handler: postTaskWebhookResend,
    }),
  );

  async function postTaskCancel(req: Request, res: Response) {
    const taskId = req.params.task_id as string;
    const cancelled = await deps.tasks.cancel(taskId, accountOf(res).account_id);
    switch (cancelled.kind) {
      case 'task_not_found':
        throw new ApiError('task_not_found', `No task "${taskId}" on this account.`);
      case 'already_finished':
        throw new ApiError(
          'task_already_finished',
          cancelled.before
            ? `Task ${taskId} is already ${cancelled.status}; only a queued or running task can be ` + `cancelled.`
            : `Task ${taskId} finished as ${cancelled.status} before the cancel arrived.`,
          { status: cancelled.status },
        );
      case 'cancelled':
        res.json(cancelled.task);
    }
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/tasks/{task_id}/cancel',
      summary:
        'Cancel a queued or running task: its solver is stopped, its hold released (a chat is ' +
        'charged for the content it had delivered), its state cancelled (idempotent)',
      tag: 'tasks',
      auth: 'bearer',
      params: TaskIdParams,
      response: responses.TaskRecord,
      errors: ['task_not_found', 'task_already_finished'],
      handler: postTaskCancel,
    }),
  );

  /**
   * Runs a convenience task for the calling account; the response names the task in X-Task-Id and its
   * cost in X-Points-Charged and X-Points-Held.
   */
  const runToCompletion = async (
    res: Response,
    taskType: WebTaskType,
    payload: Record<string, unknown>,
    timeoutSeconds?: number | null,
  ) => {
    const run = await runWebTask(
      deps,
      {
        accountId: accountOf(res).account_id,
        keyId: accountOf(res).key_id,
        taskType,
        payload,
        timeoutSeconds,
        idempotency: idempotencyOf(res.req, `convenience:${taskType}`),
        urlLoc: ['body', 'url'],
      },
      (task) => res.setHeader('X-Task-Id', task.task_id),
    );
    res.set(costHeaders(run.task));
    return run;
  };

  async function postFetch(req: Request, res: Response) {
    const body = req.body as FetchRequest;
    const { task, elapsedMs } = await runToCompletion(res, 'proxy_fetch', body, body.timeout);
    const result = task.result;
    res.json({
      url: body.url,
      final_url: result.final_url,
      status_code: result.status_code,
      content_type: result.content_type,
      content: result.content,
      title: result.title ?? null,
      elapsed_ms: elapsedMs,
      task_id: task.task_id,
      ...safetyOf(result),
    });
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/fetch',
      cost: true,
      summary: 'Fetch a page as markdown or HTML (no browser)',
      tag: 'convenience',
      auth: 'bearer',
      headers: RUN_KEY,
      body: FetchBody,
      errors: ['domain_blocked', ...IDEMPOTENT_RUN],
      taskHeader: true,
      handler: postFetch,
    }),
  );

  async function postSearch(req: Request, res: Response) {
    const body = req.body as SearchRequest;
    const { task, elapsedMs } = await runToCompletion(res, 'web_search', body);
    const shown = (location: string) => Number(/^results\[(\d+)\]/.exec(location)?.[1] ?? 0) < body.count;
    res.json({
      query: body.query,
      results: task.result.results.slice(0, body.count),
      elapsed_ms: elapsedMs,
      task_id: task.task_id,
      ...safetyOf(task.result, shown),
    });
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/search',
      cost: true,
      summary: 'Web search',
      tag: 'convenience',
      auth: 'bearer',
      headers: RUN_KEY,
      body: SearchBody,
      errors: IDEMPOTENT_RUN,
      taskHeader: true,
      handler: postSearch,
    }),
  );

  async function postScreenshot(req: Request, res: Response) {
    const body = req.body as ScreenshotRequest;
    const { task, elapsedMs } = await runToCompletion(res, 'screenshot', body);
    const result = task.result;
    // Raw PNG only when the client prefers it over JSON (Accept: image/png).
    if (req.accepts(['application/json', 'image/png']) === 'image/png') {
      res.type('image/png').setHeader('X-Elapsed-Ms', String(elapsedMs));
      res.send(Buffer.from(result.image_base64, 'base64'));
      return;
    }
    res.json({
      url: body.url,
      mime_type: 'image/png',
      image_base64: result.image_base64,
      width: result.width,
      height: result.height,
      full_page: body.full_page,
      elapsed_ms: elapsedMs,
      task_id: task.task_id,
      ...safetyOf(result),
    });
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/screenshot',
      cost: true,
      summary: 'PNG screenshot of the rendered page (JSON, or raw PNG with Accept: image/png)',
      tag: 'convenience',
      auth: 'bearer',
      headers: RUN_KEY,
      body: ScreenshotBody,
      errors: ['domain_blocked', ...IDEMPOTENT_RUN],
      taskHeader: true,
      success: 'png',
      handler: postScreenshot,
    }),
  );

  async function postSnapshot(req: Request, res: Response) {
    const body = req.body as SnapshotRequest;
    const { task, elapsedMs } = await runToCompletion(res, 'page_snapshot', body);
    const result = task.result;
    res.json({
      url: result.url,
      snapshot: result.snapshot,
      snapshot_format: result.snapshot_format,
      title: result.title ?? null,
      elapsed_ms: elapsedMs,
      task_id: task.task_id,
      ...safetyOf(result),
    });
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/snapshot',
      cost: true,
      summary: 'Structured snapshot of the rendered page',
      tag: 'convenience',
      auth: 'bearer',
      headers: RUN_KEY,
      body: SnapshotBody,
      errors: ['domain_blocked', ...IDEMPOTENT_RUN],
      taskHeader: true,
      handler: postSnapshot,
    }),
  );

  async function postAdminTaskComplete(req: Request, res: Response) {
    const taskId = req.params.task_id as string;
    const body = req.body as { solver_id: string; result: Record<string, unknown> };
    // The result must be one a solver could have returned: clients read it as the type's result.
    const checkResult = (taskType: string) => {
      const schema = RESULT_SCHEMAS[taskType as keyof typeof RESULT_SCHEMAS];
      if (schema) parseOrThrow(schema, body.result, ['body', 'result']);
    };
    const completed = await deps.tasks.adminComplete(
      { taskId, solverId: body.solver_id, result: body.result },
      checkResult,
    );
    switch (completed.kind) {
      case 'task_not_found':
        throw new ApiError('task_not_found', `No task "${taskId}".`);
      case 'already_finished':
        throw new ApiError(
          'task_already_finished',
          completed.before
            ? `Task ${taskId} is already ${completed.status}.`
            : `Task ${taskId} finished as ${completed.status} before the completion arrived.`,
          { status: completed.status },
        );
      case 'solver_not_found':
        throw new ApiError('account_not_found', `No solver "${body.solver_id}".`);
      case 'completed':
        res.json(completed.task);
    }
  }

  routes.push(
    route({
      method: 'post',
      path: '/v1/admin/tasks/{task_id}/complete',
      summary:
        "Complete a task manually and pay the named solver; the result must match the task type's " +
        'result schema (docs/solver-schemas.json), 422 at its loc otherwise',
      tag: 'admin',
      auth: 'admin',
      body: AdminCompleteTaskBody,
      params: TaskIdParams,
      errors: ['task_not_found', 'account_not_found', 'task_already_finished'],
      handler: postAdminTaskComplete,
    }),
  );

  return routes;
}
