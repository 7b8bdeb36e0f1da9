/**
 * OpenAI chat-completions wire format: stream chunks, and the assembly of deltas into one message for
 * non-streaming responses (content concatenated, tool-call deltas merged by index).
 */

export interface CompletionMeta {
  id: string;
  created: number;
  model: string;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export function normalizeUsage(raw: Record<string, unknown> | null | undefined): Usage {
  const prompt = Number(raw?.prompt_tokens ?? 0) || 0;
  const completion = Number(raw?.completion_tokens ?? 0) || 0;
  const total = Number(raw?.total_tokens ?? prompt + completion) || prompt + completion;
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: total };
}

export function chunk(
  meta: CompletionMeta,
  delta: Record<string, unknown>,
  finishReason: string | null = null,
  includeUsage = false,
) {
  return {
    id: meta.id,
    object: 'chat.completion.chunk',
    created: meta.created,
    model: meta.model,
    system_fingerprint: null,
    choices: [{ index: 0, delta, logprobs: null, finish_reason: finishReason }],
    ...(includeUsage ? { usage: null } : {}),
  };
}

export function usageChunk(meta: CompletionMeta, usage: Usage) {
  return {
    id: meta.id,
    object: 'chat.completion.chunk',
    created: meta.created,
    model: meta.model,
    system_fingerprint: null,
    choices: [],
    usage,
  };
}

interface ToolCall {
  id?: string;
  type?: string;
  function: { name: string; arguments: string };
}

/** Accumulates streamed deltas into the assistant message a non-streaming response returns. */
export class MessageAssembler {
  private content = '';
  private sawContent = false;
  private refusal: string | null = null;
  // Streamed reasoning is counted and billed as delivered text, so a JSON answer delivers it too.
  private reasoning: string | null = null;
  private readonly toolCalls = new Map<number, ToolCall>();

  add(delta: Record<string, any>) {
    if (typeof delta.content === 'string') {
      this.content += delta.content;
      this.sawContent = true;
    }
    if (typeof delta.refusal === 'string') this.refusal = (this.refusal ?? '') + delta.refusal;
    for (const field of ['reasoning_content', 'reasoning'] as const)
      if (typeof delta[field] === 'string') this.reasoning = (this.reasoning ?? '') + delta[field];
    if (Array.isArray(delta.tool_calls)) {
      for (const part of delta.tool_calls) {
        const index = Number(part.index ?? 0);
        const call = this.toolCalls.get(index) ?? { function: { name: '', arguments: '' } };
        if (part.id) call.id = part.id;
        if (part.type) call.type = part.type;
        if (part.function?.name) call.function.name += part.function.name;
        if (typeof part.function?.arguments === 'string') call.function.arguments += part.function.arguments;
        this.toolCalls.set(index, call);
      }
    }
  }

  message() {
    const toolCalls = [...this.toolCalls.entries()]
      .sort(([a], [b]) => a - b)
      .map(([, call]) => ({ id: call.id ?? '', type: call.type ?? 'function', function: call.function }));
    return {
      role: 'assistant' as const,
      content: this.sawContent || toolCalls.length === 0 ? this.content : null,
      refusal: this.refusal,
      // DeepSeek's field for a reply's reasoning, which OpenAI-compatible clients read as an extra one.
      ...(this.reasoning !== null ? { reasoning_content: this.reasoning } : {}),
      ...(toolCalls.length ? { tool_calls: toolCalls } : {}),
    };
  }
}

/**
 * Where a chat attempt's deltas go: forwarded to its client (`forward`) and assembled (`assembled`), to
 * either that is there.
 */
export function chatSink(
  forward: { onChunk: (delta: Record<string, unknown>) => void } | undefined,
  assembled: MessageAssembler | undefined,
): ((delta: Record<string, unknown>) => void) | undefined {
  if (!assembled) return forward?.onChunk;
  if (!forward) return (delta) => assembled.add(delta);
  return (delta) => {
    forward.onChunk(delta);
    assembled.add(delta);
  };
}

export function completionBody(
  meta: CompletionMeta,
  message: ReturnType<MessageAssembler['message']>,
  finishReason: string | null,
  usage: Usage,
) {
  return {
    id: meta.id,
    object: 'chat.completion',
    created: meta.created,
    model: meta.model,
    system_fingerprint: null,
    choices: [{ index: 0, message, logprobs: null, finish_reason: finishReason ?? 'stop' }],
    usage,
  };
}

/** The `type` of the OpenAI error object a validation failure (422) carries beside its `detail`. */
export const OPENAI_VALIDATION_ERROR_TYPE = 'invalid_request_error';

interface ValidationIssue {
  type: string;
  loc: (string | number)[];
  msg: string;
}

/** A validation issue's field as OpenAI names a `param` (`messages[0].content`); null for the body as a whole. */
function paramOf(loc: (string | number)[]): string | null {
  const [where, ...path] = loc;
  if (where === 'header') return path.length > 0 ? String(path[0]) : null;
  // A malformed body's location is a byte offset, not a field.
  if (path.length === 0 || typeof path[0] === 'number') return null;
  return path.map((key, index) => (typeof key === 'number' ? `[${key}]` : index === 0 ? key : `.${key}`)).join('');
}

/**
 * An error body as OpenAI's error object `{"error":{"message","type","param","code"}}`, which the openai SDKs
 * read (`e.code`): `code` is our error type, also kept as `type`, and the other fields stay. A validation
 * error keeps its `detail` and gains the object, `code` the first issue's type and `param` its field.
 */
export function openAiErrorBody(body: unknown): unknown {
  if (typeof body !== 'object' || body === null) return body;
  const { error, detail } = body as { error?: { type?: unknown; message?: unknown }; detail?: ValidationIssue[] };
  if (error && typeof error.type === 'string') {
    const { type, message, ...extra } = error;
    return { ...body, error: { message, type, param: null, code: type, ...extra } };
  }
  if (Array.isArray(detail) && detail.length > 0) {
    const [first] = detail;
    const param = paramOf(first.loc);
    const more = detail.length > 1 ? ` (and ${detail.length - 1} more; see detail)` : '';
    return {
      ...body,
      error: {
        message: `${param ? `${param}: ` : ''}${first.msg}${more}`,
        type: OPENAI_VALIDATION_ERROR_TYPE,
        param,
        code: first.type,
      },
    };
  }
  return body;
}
