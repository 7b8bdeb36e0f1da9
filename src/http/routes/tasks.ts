import { Router, type Response } from 'express';
import { findAccount } from '../../db/accounts';
import { listTasks } from '../../db/task-listing';
import { deliveryIdOf, deliveryLog, type WebhookEvent } from '../../db/webhooks';
import { WorkflowNotFoundError } from '@temporalio/client';
import { finishTask, getTaskRecord } from '../../db/tasks';
import { artifactOf } from '../../artifacts/results';
import { ArtifactMissingError } from '../../artifacts/store';
import { readTaskRecord } from '../../tasks/records';
import { ApiError } from '../../errors';
import type { WebTaskType } from '../../schemas/domain';
import { isTerminalState, taskFailure } from '../../contract/lifecycle';
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
import type { TaskService } from '../../tasks/service';
import { idempotencyOf } from '../idempotency';
import { costHeaders, createWebTask, resultExpired, runWebTask, safetyOf } from '../web-tasks';
import { adminCompleteSignal, cancelTaskSignal } from '../../contract/workflows';
import { accountOf, requireAccount, requireAdmin } from '../auth';
import { taskListFilter, taskListPage } from '../pagination';
import type { AppDeps } from '../deps';
import { parseOrThrow, validateBody, validateParams } from '../validation';

export function taskRoutes(deps: AppDeps & { tasks: TaskService }): Router {
  const router = Router();
  const auth = requireAccount();

  router.post('/v1/tasks', auth, validateBody(CreateTaskBody), async (req, res) => {
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
  });

  router.get('/v1/tasks', auth, async (req, res) => {
    const query = parseOrThrow(ListTasksQuery, req.query, ['query']);
    const page = await listTasks(deps.db, accountOf(res).account_id, taskListFilter(query));
    res.json(taskListPage(page));
  });

  router.get('/v1/tasks/:task_id', auth, validateParams(TaskIdParams), async (req, res) => {
    const task = await readTaskRecord(deps, req.params.task_id as string, accountOf(res).account_id);
    if (!task) throw new ApiError('task_not_found', `No task "${req.params.task_id}" on this account.`);
    res.json(task);
  });

  router.get('/v1/tasks/:task_id/artifacts/:name', auth, validateParams(TaskArtifactParams), async (req, res) => {
    const { task_id: taskId, name } = req.params as { task_id: string; name: string };
    const task = await getTaskRecord(deps.db, taskId, accountOf(res).account_id);
    if (!task) throw new ApiError('task_not_found', `No task "${taskId}" on this account.`);
    if (task.result_expired_at) throw resultExpired(task);
    const artifact = task.result
      ? await artifactOf(deps.artifacts, task.task_type, task.result, name).catch(async (error) => {
          // Removed by the retention purge since the row was read.
          const expired = error instanceof ArtifactMissingError ? await getTaskRecord(deps.db, taskId) : null;
          if (expired?.result_expired_at) throw resultExpired(expired);
          throw error;
        })
      : null;
    if (!artifact) throw new ApiError('artifact_not_found', `Task ${taskId} has no result part "${name}".`, { task_id: taskId, name });
    // An artifact never changes once written; its digest is its validator.
    if (artifact.sha256) res.setHeader('ETag', `"${artifact.sha256}"`);
    res.setHeader('Cache-Control', 'private, max-age=3600');
    res.type(artifact.contentType).send(artifact.bytes);
  });

  router.get('/v1/tasks/:task_id/webhooks', auth, validateParams(TaskIdParams), async (req, res) => {
    const log = await deliveryLog(deps.db, req.params.task_id as string, accountOf(res).account_id);
    if (!log) throw new ApiError('task_not_found', `No task "${req.params.task_id}" on this account.`);
    res.json(log);
  });

  router.post('/v1/tasks/:task_id/webhooks/:event/resend', auth, validateParams(WebhookDeliveryParams), async (req, res) => {
    const { task_id: taskId, event } = req.params as { task_id: string; event: WebhookEvent };
    const resent = await deps.webhooks.resend({ taskId, accountId: accountOf(res).account_id, event });
    if (resent.outcome === 'task_not_found') throw new ApiError('task_not_found', `No task "${taskId}" on this account.`);
    if (resent.outcome === 'delivery_not_found') throw new ApiError('webhook_delivery_not_found', `Task ${taskId} has no "${event}" webhook delivery.`);
    if (resent.outcome === 'not_failed') {
      throw new ApiError('webhook_delivery_not_failed', `The "${event}" delivery of task ${taskId} is ${resent.status}; only a failed delivery is sent again.`, { status: resent.status });
    }
    res.locals.log.info({ task_id: taskId, event, attempts: resent.attempts }, 'webhook delivery resent');
    res.json({ delivery_id: deliveryIdOf(taskId, event), task_id: taskId, event, status: 'pending', attempts: resent.attempts });
  });

  router.post('/v1/tasks/:task_id/cancel', auth, validateParams(TaskIdParams), async (req, res) => {
    const taskId = req.params.task_id as string;
    const task = await getTaskRecord(deps.db, taskId, accountOf(res).account_id);
    if (!task) throw new ApiError('task_not_found', `No task "${taskId}" on this account.`);
    // Cancelling a cancelled task answers it again.
    if (task.status === 'cancelled') return void res.json(task);
    if (isTerminalState(task.status)) {
      throw new ApiError('task_already_finished', `Task ${taskId} is already ${task.status}; only a queued or running task can be cancelled.`, { status: task.status });
    }
    const ending = taskFailure('task_cancelled', 'Cancelled by its client.');
    try {
      await deps.temporal.workflow.getHandle(task.workflow_id).signal(cancelTaskSignal);
    } catch (error) {
      if (!(error instanceof WorkflowNotFoundError)) throw error;
      // Its workflow is not started yet (its node died in between): end the task here; the sweep starts
      // only tasks still active, so none will start for it.
      const finished = await finishTask(deps.db, taskId, { failure: ending });
      deps.handoffs.deliver(finished.handoffs);
      deps.webhooks.send(finished.webhooks);
    }
    // The signal first, so that the stopped attempt is not taken for a failed one and reassigned.
    await deps.stops.stop(taskId).catch((error) => res.locals.log.warn({ err: error }, 'could not stop the attempt of a cancelled task'));
    await deps.tasks.waitForResult(task, 30_000);
    const finished = await getTaskRecord(deps.db, taskId);
    if (finished?.status !== 'cancelled') {
      throw new ApiError('task_already_finished', `Task ${taskId} finished as ${finished?.status} before the cancel arrived.`, { status: finished?.status });
    }
    res.json(finished);
  });

  /**
   * Runs a convenience task for the calling account; the response names the task in X-Task-Id and its
   * cost in X-Points-Charged and X-Points-Held.
   */
  const runToCompletion = async (res: Response, taskType: WebTaskType, payload: Record<string, unknown>, timeoutSeconds?: number | null) => {
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

  router.post('/v1/fetch', auth, validateBody(FetchBody), async (req, res) => {
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
  });

  router.post('/v1/search', auth, validateBody(SearchBody), async (req, res) => {
    const body = req.body as SearchRequest;
    const { task, elapsedMs } = await runToCompletion(res, 'web_search', body);
    const shown = (location: string) => Number(/^results\[(\d+)\]/.exec(location)?.[1] ?? 0) < body.count;
    res.json({ query: body.query, results: task.result.results.slice(0, body.count), elapsed_ms: elapsedMs, task_id: task.task_id, ...safetyOf(task.result, shown) });
  });

  router.post('/v1/screenshot', auth, validateBody(ScreenshotBody), async (req, res) => {
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
  });

  router.post('/v1/snapshot', auth, validateBody(SnapshotBody), async (req, res) => {
    const body = req.body as SnapshotRequest;
    const { task, elapsedMs } = await runToCompletion(res, 'page_snapshot', body);
    const result = task.result;
    res.json({ url: result.url, snapshot: result.snapshot, snapshot_format: result.snapshot_format, title: result.title ?? null, elapsed_ms: elapsedMs, task_id: task.task_id, ...safetyOf(result) });
  });

  router.post('/v1/admin/tasks/:task_id/complete', requireAdmin(deps.config.adminApiKey), validateParams(TaskIdParams), validateBody(AdminCompleteTaskBody), async (req, res) => {
    const taskId = req.params.task_id as string;
    const body = req.body as { solver_id: string; result: Record<string, unknown> };
    const task = await getTaskRecord(deps.db, taskId);
    if (!task) throw new ApiError('task_not_found', `No task "${taskId}".`);
    if (isTerminalState(task.status)) {
      throw new ApiError('task_already_finished', `Task ${taskId} is already ${task.status}.`, { status: task.status });
    }
    // The result must be one a solver could have returned: clients read it as the type's result.
    const schema = RESULT_SCHEMAS[task.task_type as keyof typeof RESULT_SCHEMAS];
    if (schema) parseOrThrow(schema, body.result, ['body', 'result']);
    if (!(await findAccount(deps.db, body.solver_id))) throw new ApiError('account_not_found', `No solver "${body.solver_id}".`);
    await deps.temporal.workflow.getHandle(task.workflow_id).signal(adminCompleteSignal, { solverId: body.solver_id, result: body.result });
    // The signal first: a solver still at work is then stopped now, not at its activity's next heartbeat.
    await deps.stops.stop(taskId).catch((error) => res.locals.log.warn({ err: error }, 'could not stop the attempt of a task completed by an admin'));
    const verdict = await deps.tasks.waitForResult(task, 30_000);
    const finished = await readTaskRecord(deps, taskId);
    if (verdict && finished?.status !== 'completed') {
      throw new ApiError('task_already_finished', `Task ${taskId} finished as ${finished?.status} before the completion arrived.`, { status: finished?.status });
    }
    res.json(finished);
  });

  return router;
}
