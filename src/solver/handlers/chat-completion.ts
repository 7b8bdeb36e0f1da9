import { ChatCompletionBody } from '../../schemas/requests';
import type { ChatResultData } from '../../schemas/frames';
import { SolverError, firstLine, toSolverError } from '../errors';
import { readSseData } from '../sse';
import { parsePayload, type ChatDelta, type TaskHandler } from './types';

export type ChatCompletionOptions = {
  /** Base URL of an OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1. */
  upstreamUrl: string;
  apiKey?: string;
  /** Upstream model names this solver serves; the first one is used unless the payload names another. */
  models: string[];
};

/** Upstream answers that mean the request itself is wrong: another solver would get the same answer. */
const REJECTED_STATUSES = new Set([400, 413, 422]);

type UpstreamChunk = {
  model?: string;
  usage?: {
    prompt_tokens?: number;
    completion_tokens?: number;
    total_tokens?: number;
    completion_tokens_details?: { reasoning_tokens?: number } | null;
  } | null;
  choices?: Array<{ index?: number; delta?: ChatDelta; finish_reason?: string | null }>;
  error?: { message?: string };
};

/**
 * Streams a chat completion from the upstream: every delta of the first choice (content, role,
 * tool-call fragments, anything else the upstream sends) becomes a `chunk` frame as it arrives, and the
 * result carries the finish reason, token usage and model.
 */
export function createChatCompletionHandler(options: ChatCompletionOptions): TaskHandler {
  return async (payload, { signal, emitChunk }) => {
    const request = parsePayload(ChatCompletionBody, { model: options.models[0], ...payload }, 'keep');
    const {
      stream: _stream,
      stream_options: _streamOptions,
      ...rest
    } = request as typeof request & { stream_options?: unknown };
    const model = options.models.includes(request.model) ? request.model : options.models[0]!;
    const body = { ...rest, model, stream: true, stream_options: { include_usage: true } };

    let streamed = false;
    try {
      const response = await fetch(`${options.upstreamUrl}/chat/completions`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'text/event-stream',
          ...(options.apiKey && { authorization: `Bearer ${options.apiKey}` }),
        },
        body: JSON.stringify(body),
        signal,
      });
      if (!response.ok || !response.body) throw await upstreamFailure(response);

      let finishReason: string | null = null;
      let usage: UpstreamChunk['usage'] = null;
      let upstreamModel = model;
      let completionChars = 0;
      for await (const data of readSseData(response.body)) {
        if (data.trim() === '[DONE]') break;
        let chunk: UpstreamChunk;
        try {
          chunk = JSON.parse(data) as UpstreamChunk;
        } catch {
          continue;
        }
        if (chunk.error)
          throw new SolverError(
            'upstream_error',
            `the model upstream failed: ${chunk.error.message ?? 'unknown error'}`,
          );
        if (chunk.model) upstreamModel = chunk.model;
        if (chunk.usage) usage = chunk.usage;
        for (const choice of chunk.choices ?? []) {
          if ((choice.index ?? 0) !== 0) continue;
          if (choice.delta && Object.keys(choice.delta).length > 0) {
            completionChars += outputChars(choice.delta);
            emitChunk?.(choice.delta);
            streamed = true;
          }
          if (choice.finish_reason) finishReason = choice.finish_reason;
        }
      }
      return {
        finish_reason: finishReason,
        usage: tokenUsage(usage, body.messages, completionChars),
        model: upstreamModel,
      } satisfies ChatResultData;
    } catch (error) {
      const failure = toSolverError(error, signal);
      // Deltas already reached the client: a retry elsewhere would repeat them.
      if (streamed && failure.retryable && !signal.aborted) throw new SolverError(failure.type, failure.message, false);
      if (failure.type === 'internal_error')
        throw new SolverError('upstream_error', `the model upstream failed: ${failure.message}`);
      throw failure;
    }
  };
}

async function upstreamFailure(response: Response): Promise<SolverError> {
  const detail = firstLine(await response.text().catch(() => '')).slice(0, 300);
  const message = `the model upstream answered HTTP ${response.status}${detail ? `: ${detail}` : ''}`;
  return new SolverError(REJECTED_STATUSES.has(response.status) ? 'upstream_rejected' : 'upstream_error', message);
}

/** The characters a delta adds to the answer (text, refusal, tool names and arguments), not its JSON framing. */
function outputChars(delta: ChatDelta): number {
  let chars = 0;
  if (typeof delta.content === 'string') chars += delta.content.length;
  if (typeof delta.refusal === 'string') chars += delta.refusal.length;
  if (Array.isArray(delta.tool_calls)) {
    for (const call of delta.tool_calls as { function?: { name?: unknown; arguments?: unknown } }[]) {
      if (typeof call.function?.name === 'string') chars += call.function.name.length;
      if (typeof call.function?.arguments === 'string') chars += call.function.arguments.length;
    }
  }
  return chars;
}

/** Upstreams that ignore stream_options.include_usage get an estimate (about 4 characters a token), marked as such. */
function tokenUsage(
  usage: UpstreamChunk['usage'],
  messages: unknown,
  completionChars: number,
): ChatResultData['usage'] {
  if (usage && typeof usage.prompt_tokens === 'number' && typeof usage.completion_tokens === 'number') {
    const reasoning = usage.completion_tokens_details?.reasoning_tokens;
    return {
      prompt_tokens: usage.prompt_tokens,
      completion_tokens: usage.completion_tokens,
      total_tokens: usage.total_tokens ?? usage.prompt_tokens + usage.completion_tokens,
      // Chat audits leave reasoning out of the tokens they expect for the output (docs/trust.md).
      ...(typeof reasoning === 'number' ? { completion_tokens_details: { reasoning_tokens: reasoning } } : {}),
    };
  }
  const prompt = Math.ceil(JSON.stringify(messages).length / 4);
  const completion = Math.ceil(completionChars / 4);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, estimated: true };
}
