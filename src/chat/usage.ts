import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import type { BilledUsage } from '../schemas/domain';

/**
 * The usage a chat is billed for (docs/decisions.md, "How a chat is billed"). The service counts the
 * prompt it sent the solver and the text the solver delivered, with OpenAI's o200k tokenizer, and bills
 * the smaller of the solver's report and a bound: the count times USAGE_TOLERANCE.factor plus
 * USAGE_TOLERANCE.slack, which admits the other models' tokenizers. A report above the bound is evidence
 * against the solver (src/trust/usage-inflation.ts).
 */

/**
 * 1.5×: the strong models' own tokenizers (Claude, Gemini, Llama 3, Qwen, DeepSeek) need up to about 1.35
 * times o200k's tokens for the same text; 32 tokens: a chat template's framing, a default system
 * preamble (Llama 3.1's date lines), and the end-of-turn and reasoning tags a model counts but never sends.
 */
export const USAGE_TOLERANCE = { factor: 1.5, slack: 32 } as const;
/** Framing of each prompt message (role and delimiters), as OpenAI counts it, and of the reply's start. */
const MESSAGE_TOKENS = 4;
const REPLY_TOKENS = 3;
/**
 * An image, audio or file part, not counted: the largest image the strong models take is about 1,600 tokens
 * (Claude).
 */
const NON_TEXT_PART_TOKENS = 2000;
/** A prompt with tools: providers add a tool-use system prompt of their own (Anthropic documents 313–346 tokens). */
const TOOL_USE_TOKENS = 400;
/** Delivered text is counted in pieces of about this many characters, cut at whitespace, so memory stays small. */
const PIECE_CHARS = 4096;
/** A long prompt is counted in pieces of this many characters (about 1 ms each), the event loop served between them. */
const YIELD_CHARS = 16_384;

// Text that renders as nothing (zero-width and format characters, variation selectors, tag characters,
// controls other than tab and line breaks) is not counted: a model has no reason to send runs of it, and
// a solver could pad its deltas with it to raise the bound unseen.
const INVISIBLE = /[\p{Cf}\u{FE00}-\u{FE0F}\u{E0100}-\u{E01EF}\u0000-\u0008\u000B\u000C\u000E-\u001F\u007F]/gu;
// Special-token text (`<|endoftext|>`) counts as the text it is; the tokenizer refuses it by default.
const AS_TEXT = { disallowedSpecial: new Set<string>() };

export function textTokens(text: string): number {
  if (text.length === 0) return 0;
  return countTokens(text.replace(INVISIBLE, ''), AS_TEXT as never);
}

export const boundOf = (counted: number): number => Math.ceil(counted * USAGE_TOLERANCE.factor) + USAGE_TOLERANCE.slack;

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** What a chat task's prompt is counted from: its texts, and the tokens allowed for without counting. */
function promptParts(payload: Record<string, unknown>): { texts: string[]; allowed: number } {
  const texts: string[] = [];
  let allowed = REPLY_TOKENS;
  const messages = Array.isArray(payload.messages) ? payload.messages : [];
  for (const message of messages) {
    if (!isRecord(message)) continue;
    const { role: _role, content, ...rest } = message;
    allowed += MESSAGE_TOKENS;
    if (typeof content === 'string') texts.push(content);
    else if (Array.isArray(content)) {
      for (const part of content) {
        if (typeof part === 'string') texts.push(part);
        else if (isRecord(part) && typeof part.text === 'string') texts.push(part.text);
        else allowed += NON_TEXT_PART_TOKENS;
      }
    }
    // A message's name, tool calls or tool call id are sent to the model too.
    if (Object.keys(rest).length > 0) texts.push(JSON.stringify(rest));
  }
  const tools = payload.tools;
  if (Array.isArray(tools) && tools.length > 0) {
    texts.push(JSON.stringify(tools));
    allowed += TOOL_USE_TOKENS;
  }
  if (isRecord(payload.response_format)) texts.push(JSON.stringify(payload.response_format));
  return { texts, allowed };
}

/**
 * Characters of a prompt's text that an estimate counts token by token; the rest is counted at the same
 * tokens per character. Counting costs up to ~2 ms per 1,000 characters of random text: this bounds it per request.
 */
export const PROMPT_CHARS_COUNTED = 32_000;

/**
 * A chat request's prompt tokens as offers are priced for it (docs/queue.md, "What a chat pays"): the
 * texts that `promptTokens` counts, without its allowances for what is sent but not counted (framing,
 * images, a provider's tool-use prompt), which only widen the billing bound. At least 1.
 */
export function estimatePromptTokens(payload: Record<string, unknown>): number {
  let left = PROMPT_CHARS_COUNTED;
  let tokens = 0;
  let counted = 0;
  let skipped = 0;
  for (const text of promptParts(payload).texts) {
    const part = text.slice(0, left);
    tokens += textTokens(part);
    counted += part.length;
    left -= part.length;
    skipped += text.length - part.length;
  }
  return Math.max(1, tokens + (skipped > 0 && counted > 0 ? Math.ceil((skipped * tokens) / counted) : 0));
}

/**
 * The tokens of the prompt a chat task sends its solver: messages (text parts counted, others allowed for),
 * tools, response format.
 */
export function promptTokens(payload: Record<string, unknown>): number {
  const { texts, allowed } = promptParts(payload);
  return texts.reduce((sum, text) => sum + textTokens(text), allowed);
}

/**
 * The same count, yielding to the event loop between pieces of YIELD_CHARS: a prompt may be as large as
 * the body limit (1 MB, some 120–300 ms to count), and the node counting it relays other chats' deltas.
 */
async function promptTokensYielding(payload: Record<string, unknown>): Promise<number> {
  const { texts, allowed } = promptParts(payload);
  let tokens = allowed;
  for (const text of texts) tokens += await tokensYielding(text);
  return tokens;
}

/**
 * The tokens of `text`, counted in pieces of at most YIELD_CHARS cut at whitespace, the event loop served
 * between them.
 */
async function tokensYielding(text: string): Promise<number> {
  let tokens = 0;
  let rest = text;
  while (rest.length > YIELD_CHARS) {
    const cut = lastWhitespace(rest.slice(0, YIELD_CHARS));
    const end = cut > 0 ? cut : YIELD_CHARS;
    tokens += textTokens(rest.slice(0, end));
    rest = rest.slice(end);
    await new Promise((resolve) => setImmediate(resolve));
  }
  return tokens + textTokens(rest);
}

/** What the service counted of one attempt: its prompt, and the text its deltas delivered. */
export interface CountedUsage {
  prompt_tokens: number;
  completion_tokens: number;
  /** Of completion_tokens, those of streamed reasoning text. */
  reasoning_tokens: number;
}

/**
 * Counts an attempt's delivered deltas: content, refusal, tool calls' names and arguments, and streamed
 * reasoning (`reasoning_content`, `reasoning`). A delta's text is only appended on its way; each piece
 * of about PIECE_CHARS, cut before whitespace (where the tokenizer cuts anyway), is counted after it, in
 * slices that let the node serve its other streams between them. So the relay path costs a string
 * append, memory stays small, and the count is that of the text as a whole, however it was split.
 */
export class DeliveredTokens {
  private readonly pending = { answer: '', reasoning: '' };
  private readonly tokens = { answer: 0, reasoning: 0 };
  private counting: Promise<void> = Promise.resolve();

  constructor(private readonly payload: Record<string, unknown>) {}

  readonly add = (delta: Record<string, unknown>): void => {
    let answer = '';
    if (typeof delta.content === 'string') answer += delta.content;
    if (typeof delta.refusal === 'string') answer += delta.refusal;
    if (Array.isArray(delta.tool_calls)) {
      for (const call of delta.tool_calls) {
        const fn = isRecord(call) && isRecord(call.function) ? call.function : undefined;
        if (typeof fn?.name === 'string') answer += fn.name;
        if (typeof fn?.arguments === 'string') answer += fn.arguments;
      }
    }
    let reasoning = '';
    if (typeof delta.reasoning_content === 'string') reasoning += delta.reasoning_content;
    if (typeof delta.reasoning === 'string') reasoning += delta.reasoning;
    if (answer) this.append('answer', answer);
    if (reasoning) this.append('reasoning', reasoning);
  };

  private append(kind: 'answer' | 'reasoning', text: string): void {
    const pending = this.pending[kind] + text;
    if (pending.length < PIECE_CHARS) {
      this.pending[kind] = pending;
      return;
    }
    // Cut before the last whitespace; a long stretch without any is taken whole.
    const cut = lastWhitespace(pending);
    if (cut <= 0 && pending.length < PIECE_CHARS * 4) {
      this.pending[kind] = pending;
      return;
    }
    const end = cut > 0 ? cut : pending.length;
    this.pending[kind] = pending.slice(end);
    this.countLater(kind, pending.slice(0, end));
  }

  /** Counts a piece after the delta that completed it has gone on, one piece after another. */
  private countLater(kind: 'answer' | 'reasoning', piece: string): void {
    this.counting = this.counting.then(async () => {
      await new Promise((resolve) => setImmediate(resolve));
      this.tokens[kind] += await tokensYielding(piece);
    });
  }

  /** The counts so far; the prompt is counted here, once, after the answer has streamed. */
  async counted(): Promise<CountedUsage> {
    await this.counting;
    const answer = this.tokens.answer + (await tokensYielding(this.pending.answer));
    const reasoning = this.tokens.reasoning + (await tokensYielding(this.pending.reasoning));
    return {
      prompt_tokens: await promptTokensYielding(this.payload),
      completion_tokens: answer + reasoning,
      reasoning_tokens: reasoning,
    };
  }
}

/** A chunk handler that counts each delta before handing it on. */
export function countedChunks(
  delivered: DeliveredTokens | undefined,
  onChunk: ((delta: Record<string, unknown>) => void) | undefined,
): ((delta: Record<string, unknown>) => void) | undefined {
  if (!delivered) return onChunk;
  return (delta) => {
    delivered.add(delta);
    onChunk?.(delta);
  };
}

function lastWhitespace(text: string): number {
  for (let index = text.length - 1; index > 0; index -= 1) {
    const code = text.charCodeAt(index);
    if (code === 32 || code === 10 || code === 9 || code === 13) return index;
  }
  return -1;
}

/**
 * What an attempt stopped while it ran (its client cancelled or went away) is billed for, when its deltas
 * delivered anything: the prompt and the completion as the service counted them (the solver's final
 * report never came; each count is within its bound), as OpenAI bills a stream its client closed. Null
 * when nothing was delivered: nothing is charged.
 */
export function deliveredUsage(counted: CountedUsage): BilledUsage | null {
  if (counted.completion_tokens === 0) return null;
  return {
    prompt_tokens: counted.prompt_tokens,
    completion_tokens: counted.completion_tokens,
    total_tokens: counted.prompt_tokens + counted.completion_tokens,
  };
}

/** An attempt's usage: what its solver reported, what was counted, the bound, and what is billed. */
export interface MeteredUsage {
  reported: {
    prompt_tokens: number | null;
    completion_tokens: number | null;
    total_tokens: number | null;
    reasoning_tokens: number | null;
  };
  counted: CountedUsage;
  bound: { prompt_tokens: number; completion_tokens: number };
  billed: BilledUsage;
  /** The report exceeds the bound: the prompt or the completion (less hidden reasoning it declared). */
  inflated: boolean;
}

const tokenCount = (value: unknown): number | null => {
  const number = typeof value === 'string' && value.trim() !== '' ? Number(value) : value;
  return typeof number === 'number' && Number.isFinite(number) && number >= 0 ? Math.floor(number) : null;
};

/**
 * Bills the smaller of each reported count and its bound. Reasoning a model did not stream is not
 * billed (it is above the bound of what was delivered), and declared as `reasoning_tokens` it is not
 * held against the solver either. A total below the sum of the billed counts is billed as reported.
 */
export function meterUsage(report: unknown, counted: CountedUsage): MeteredUsage {
  const raw = isRecord(report) ? report : {};
  const details = isRecord(raw.completion_tokens_details) ? raw.completion_tokens_details : {};
  const reported = {
    prompt_tokens: tokenCount(raw.prompt_tokens),
    completion_tokens: tokenCount(raw.completion_tokens),
    total_tokens: tokenCount(raw.total_tokens),
    reasoning_tokens: tokenCount(details.reasoning_tokens),
  };
  const bound = {
    prompt_tokens: boundOf(counted.prompt_tokens),
    completion_tokens: boundOf(counted.completion_tokens),
  };
  // Declared reasoning that was not streamed was hidden: not billed, and not a claim about what was delivered.
  const hidden = counted.reasoning_tokens === 0 ? (reported.reasoning_tokens ?? 0) : 0;
  const prompt = reported.prompt_tokens ?? 0;
  const completion = reported.completion_tokens ?? 0;
  const inflated = prompt > bound.prompt_tokens || Math.max(0, completion - hidden) > bound.completion_tokens;
  const billedPrompt = Math.min(prompt, bound.prompt_tokens);
  const billedCompletion = Math.min(completion, bound.completion_tokens);
  const total = Math.min(reported.total_tokens ?? Number.POSITIVE_INFINITY, billedPrompt + billedCompletion);
  return {
    reported,
    counted,
    bound,
    billed: { prompt_tokens: billedPrompt, completion_tokens: billedCompletion, total_tokens: total },
    inflated,
  };
}
