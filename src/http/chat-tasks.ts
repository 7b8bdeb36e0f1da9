import crypto from 'node:crypto';
import { MessageAssembler, normalizeUsage, type Usage } from '../chat/openai-format';
import type { RelayEvent } from '../chat/relay';
import { completionBudget } from '../chat/request-estimate';
import { estimatePromptTokens } from '../chat/usage';
import { chatWorkflowId } from '../contract/workflows';
import { ApiError } from '../errors';
import { CHAT_TASK_TYPE } from '../schemas/domain';
import type { AppDeps } from './deps';
import { createdTask, failureError } from './web-tasks';

/**
 * How a route runs a chat completion as a market task (POST /v1/chat/completions, and the scrape's json
 * and summary formats): the completion's deltas come over the relay to the node that created it; the
 * task's verdict and billing come from its workflow.
 */

// After the solver's final result, its last deltas may still be in flight on the relay.
export const END_GRACE_MS = 10_000;

export const withTimeout = <T>(promise: Promise<T>, ms: number): Promise<T | null> =>
  Promise.race([promise, new Promise<null>((resolve) => setTimeout(() => resolve(null), ms).unref())]);

/** Receives one completion's relay events; resolves `ended` when the solver's final result has been relayed. */
export function relayListener(
  deps: Pick<AppDeps, 'relay'>,
  completionId: string,
  onDelta: (delta: Record<string, unknown>) => void,
) {
  let resolveEnd!: (event: Extract<RelayEvent, { type: 'end' }>) => void;
  const ended = new Promise<Extract<RelayEvent, { type: 'end' }>>((resolve) => {
    resolveEnd = resolve;
  });
  const stop = deps.relay.listen(completionId, (event) => {
    if (event.type === 'chunk') onDelta(event.delta);
    else if (event.type === 'end') resolveEnd(event);
  });
  return { ended, stop };
}

export const newChatTaskId = () => `chat_${crypto.randomBytes(12).toString('hex')}`;

/** 402 no_strong_solver_available: no strong-tier solver is online (the contract's error for a chat). */
export const noStrongSolver = () =>
  new ApiError('no_strong_solver_available', 'No strong-tier solver is online right now; retry in a little while.');

export interface CompletedChat {
  taskId: string;
  content: string;
  usage: Usage;
}

/**
 * Runs one chat completion (not streamed) for the account and waits for its whole answer: created like
 * POST /v1/chat/completions creates it (matched to strong-tier solvers, held, verified and refunded as
 * any chat), its deltas assembled from the relay. A completion that fails is its chat's HTTP error.
 */
export async function completeChat(
  deps: AppDeps,
  input: {
    accountId: string;
    keyId?: string;
    payload: Record<string, unknown>;
    /** The chat's maximum (default: the service's chat maximum): no offer whose estimate is above it serves it. */
    maxPricePoints?: string;
    clientGone?: AbortSignal;
    onCreated?: (taskId: string) => void;
  },
): Promise<CompletedChat> {
  const taskId = newChatTaskId();
  const completionId = chatWorkflowId(taskId);
  const assembler = new MessageAssembler();
  const listener = relayListener(deps, completionId, (delta) => assembler.add(delta));
  let stopCancel = () => undefined as void;
  try {
    const created = await deps.tasks.create({
      taskId,
      accountId: input.accountId,
      keyId: input.keyId,
      taskType: CHAT_TASK_TYPE,
      payload: input.payload,
      maxPricePoints: input.maxPricePoints,
      timeoutSeconds: deps.config.chatTimeoutSeconds,
      chat: {
        strongModels: deps.strongModels(),
        clientNodeId: deps.nodeId,
        clientGone: input.clientGone,
        figures: {
          promptTokens: estimatePromptTokens(input.payload),
          completionTokens: completionBudget(input.payload),
          maxPricePrompt: null,
          maxPriceCompletion: null,
          maxPriceRequest: null,
        },
      },
      requireOnline: true,
    });
    const task = createdTask(created, { noSolver: noStrongSolver, taskType: CHAT_TASK_TYPE });
    input.onCreated?.(task.task_id);
    // A client that goes away cancels the completion and stops its solver, as a chat client's does.
    const cancel = () => void deps.tasks.clientGone(task.task_id, completionId).catch(() => undefined);
    if (input.clientGone?.aborted) cancel();
    else input.clientGone?.addEventListener('abort', cancel, { once: true });
    stopCancel = () => input.clientGone?.removeEventListener('abort', cancel);
    const verdict = await deps.tasks.waitForResult(task).catch(() => null);
    if (verdict && verdict.status !== 'completed' && !verdict.error)
      verdict.error = (await deps.taskViews.getTaskRecord(task.task_id))?.error ?? undefined;
    const end = verdict?.status === 'completed' ? await withTimeout(listener.ended, END_GRACE_MS) : null;
    if (!end)
      throw verdict?.status === 'completed'
        ? new ApiError('solver_failed', 'The completion stream was interrupted.')
        : failureError('chat', task, verdict);
    return { taskId: task.task_id, content: assembler.message().content ?? '', usage: normalizeUsage(end.usage) };
  } finally {
    stopCancel();
    listener.stop();
  }
}
