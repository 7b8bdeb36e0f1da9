import type { ErrorRequestHandler, Request, Response } from 'express';
import {
  chunk,
  completionBody,
  MessageAssembler,
  normalizeUsage,
  openAiErrorBody,
  usageChunk,
  type CompletionMeta,
} from '../../chat/openai-format';
import { completionBudget } from '../../chat/request-estimate';
import { estimatePromptTokens } from '../../chat/usage';
import { scanChatMessages } from '../../safety/scanner';
import { ApiError } from '../../errors';
import { CHAT_TASK_TYPE, MODEL_ALIASES, PUBLIC_MODEL_ID } from '../../schemas/domain';
import { ChatCompletionBody, type ChatCompletionRequest } from '../../schemas/requests';
import { chatWorkflowId } from '../../contract/workflows';
import type { ErrorType } from '../../errors';
import { accountOf } from '../auth';
import type { AppDeps } from '../deps';
import { route, type Route } from '../route';
import { sendStepTimes, stepTimesOf } from '../server-timing';
import { chatTaskPayload } from '../../chat/task-payload';
import { END_GRACE_MS, newChatTaskId, noStrongSolver, relayListener, withTimeout } from '../chat-tasks';
import { costHeaders, createdTask, failureError } from '../web-tasks';

export const TRUST_MODES = ['standard', 'strict'] as const;

function trustModeOf(req: Request): (typeof TRUST_MODES)[number] {
  const raw = req.header('x-service-trust-mode');
  if (raw === undefined || raw.trim() === '') return 'standard';
  const mode = raw.trim().toLowerCase();
  if (!(TRUST_MODES as readonly string[]).includes(mode)) {
    throw new ApiError('invalid_trust_mode', `X-Service-Trust-Mode must be "standard" or "strict", got "${raw}".`);
  }
  return mode as (typeof TRUST_MODES)[number];
}

const decimalOrNull = (value: string | number | null | undefined) =>
  value === null || value === undefined ? null : String(value);

const CHAT_ERRORS: ErrorType[] = [
  'invalid_trust_mode',
  'prompt_safety_violation',
  'insufficient_balance',
  'key_spend_limit_reached',
  'no_strong_solver_available',
  'solver_checks_unfunded',
  'no_solver_within_price',
  'solvers_busy',
  'model_not_found',
  'solver_failed',
  'service_unavailable',
  'task_timeout',
  'task_cancelled',
];

export function chatRoutes(deps: AppDeps): Route[] {
  const handler = async (req: Request, res: Response) => {
    const body = req.body as ChatCompletionRequest & Record<string, unknown>;
    const trustMode = trustModeOf(req);
    // strict scans this request whatever the account says; standard follows the account setting.
    if (trustMode === 'strict' || accountOf(res).prompt_safety_scan) {
      const scan = scanChatMessages(body.messages);
      if (scan.flagged) {
        throw new ApiError(
          'prompt_safety_violation',
          'The request was refused by the prompt safety scan; remove the flagged content and retry.',
          {
            findings: scan.findings,
          },
        );
      }
    }
    if (!MODEL_ALIASES[body.model]) {
      throw new ApiError('model_not_found', `No model "${body.model}". Use "${PUBLIC_MODEL_ID}" (alias "strong").`);
    }
    const strongModels = deps.strongModels();
    const maxPrice = body.provider?.max_price;
    const { stream, stream_options: streamOptions } = body as ChatCompletionRequest & {
      stream_options?: { include_usage?: boolean };
    };
    const payload = chatTaskPayload(body);
    const taskId = newChatTaskId();
    const meta: CompletionMeta = {
      id: chatWorkflowId(taskId),
      created: Math.floor(Date.now() / 1000),
      model: PUBLIC_MODEL_ID,
    };
    const includeUsage = Boolean(streamOptions?.include_usage);

    const assembler = new MessageAssembler();
    let streamed = 0;
    const send = (data: unknown) => res.write(`data: ${JSON.stringify(data)}\n\n`);
    const sendDelta = (delta: Record<string, unknown>) => {
      send(chunk(meta, streamed === 0 ? { role: 'assistant', ...delta } : delta, null, includeUsage));
      streamed += 1;
    };
    let keepAlive: NodeJS.Timeout | undefined;
    // The stream opens once the completion has surely started, so a failed start is still a plain 503 the
    // SDKs retry; but a first delta never waits for the workflow start (the solver may answer while it
    // runs): the stream opens then, and a start that fails after that is reported in the stream.
    const openStream = () => {
      if (res.headersSent) return;
      sendStepTimes(res);
      res.status(200).set({
        'Content-Type': 'text/event-stream; charset=utf-8',
        'Cache-Control': 'no-cache',
        Connection: 'keep-alive',
        'X-Accel-Buffering': 'no',
      });
      res.flushHeaders();
      keepAlive = setInterval(() => res.write(': keep-alive\n\n'), deps.config.sseKeepAliveMs);
    };
    const listener = relayListener(deps, meta.id, (delta) => {
      if (stream) {
        openStream();
        sendDelta(delta);
      } else assembler.add(delta);
    });
    // A client that goes away cancels the workflow and stops the solver's attempt at once (the workflow's
    // cancellation would reach it only at its activity's next heartbeat); one sent before the workflow took
    // it over is cancelled at once too.
    const clientGone = new AbortController();
    let started = false;
    let finished = false;
    const cancel = () => {
      if (!started || finished) return;
      deps.tasks
        .clientGone(taskId, meta.id)
        .catch((error) => res.locals.log.warn({ err: error }, 'could not stop the attempt of a client that went away'));
    };
    res.on('close', () => {
      clientGone.abort();
      cancel();
    });
    try {
      const created = await deps.tasks.create({
        taskId,
        accountId: accountOf(res).account_id,
        keyId: accountOf(res).key_id,
        taskType: CHAT_TASK_TYPE,
        payload,
        timeoutSeconds: deps.config.chatTimeoutSeconds,
        chat: {
          strongModels,
          clientNodeId: deps.nodeId,
          clientGone: clientGone.signal,
          figures: {
            promptTokens: estimatePromptTokens(body),
            completionTokens: completionBudget(body),
            maxPricePrompt: decimalOrNull(maxPrice?.prompt),
            maxPriceCompletion: decimalOrNull(maxPrice?.completion),
            maxPriceRequest: decimalOrNull(maxPrice?.request),
          },
          noFallbacks: body.provider?.allow_fallbacks === false,
        },
        // Checked as the task is created (nothing is created then), before any SSE header is sent.
        requireOnline: true,
        routingSort: body.provider?.sort ?? undefined,
        onStep: (step) => stepTimesOf(res)?.mark(step),
      });
      const task = createdTask(created, {
        noSolver: noStrongSolver,
        taskType: CHAT_TASK_TYPE,
      });
      started = true;
      // The client may have gone while the completion was being created (or even before this handler ran).
      if (res.closed) {
        clientGone.abort();
        cancel();
      }
      if (stream) openStream();
      const verdict = await deps.tasks.waitForResult(task).catch(() => null);
      // The announced state carries no message; a failure's is on the task.
      if (verdict && verdict.status !== 'completed' && !verdict.error)
        verdict.error = (await deps.taskViews.getTaskRecord(task.task_id))?.error ?? undefined;
      const end = verdict?.status === 'completed' ? await withTimeout(listener.ended, END_GRACE_MS) : null;
      finished = true;
      if (!end) {
        const failure =
          verdict?.status === 'completed'
            ? new ApiError('solver_failed', 'The completion stream was interrupted.')
            : failureError('chat', task, verdict);
        if (!stream) throw failure;
        send(openAiErrorBody(failure.toBody()));
        res.end();
        return;
      }
      const usage = normalizeUsage(end.usage);
      // Settled with the terminal state, so the cost is final here.
      const cost = await deps.ledger.costOfTasks([task.task_id]);
      if (!stream) {
        sendStepTimes(res);
        res.set(costHeaders(cost)).json(completionBody(meta, assembler.message(), end.finish_reason, usage));
        return;
      }
      if (streamed === 0) send(chunk(meta, { role: 'assistant', content: '' }, null, includeUsage));
      send({ ...chunk(meta, {}, end.finish_reason ?? 'stop', includeUsage), cost });
      if (includeUsage) send(usageChunk(meta, usage));
      res.write('data: [DONE]\n\n');
      res.end();
    } catch (error) {
      if (!res.headersSent) throw error;
      // The stream has begun: report the failure in-band rather than cutting the stream silently.
      const failure =
        error instanceof ApiError ? error : new ApiError('internal_error', 'The completion failed on our side; retry.');
      if (!(error instanceof ApiError)) res.locals.log.error({ err: error }, 'chat stream failed');
      send(openAiErrorBody(failure.toBody()));
      res.end();
    } finally {
      finished = true;
      clearInterval(keepAlive);
      listener.stop();
      clientGone.abort();
    }
  };

  const completion = {
    method: 'post',
    tag: 'inference',
    auth: 'bearer',
    cost: true,
    body: ChatCompletionBody,
    headers: { 'X-Service-Trust-Mode': 'standard (default) or strict' },
    errors: CHAT_ERRORS,
    success: 'sse',
    openai: true,
    serverTiming: true,
    handler,
  } as const;
  return [
    route({ ...completion, path: '/v1/chat/completions', summary: 'OpenAI-compatible chat completion (JSON or SSE)' }),
    // Temporary alias during the migration window; same behaviour.
    route({
      ...completion,
      path: '/v1/inference/chat/completions',
      summary: 'Temporary alias of /v1/chat/completions',
    }),
  ];
}

/** The OpenAI-compatible paths (completions, its alias, models), whose errors are OpenAI's error object. */
export const OPENAI_PATHS = ['/v1/chat/completions', '/v1/inference/chat/completions', '/v1/models'];

/**
 * Mounted on OPENAI_PATHS before the common error renderer: that renderer still decides status and
 * message, and this gives its body OpenAI's `code` and `param` (src/chat/openai-format.ts).
 */
export function openAiErrorDialect(): ErrorRequestHandler {
  return (error, _req, res, next) => {
    const json = res.json.bind(res);
    res.json = (body: unknown) => json(openAiErrorBody(body));
    next(error);
  };
}
