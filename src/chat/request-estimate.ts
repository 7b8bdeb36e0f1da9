import { countTokens } from 'gpt-tokenizer';

/**
 * A chat request's token figures, as offers are priced for it (docs/queue.md, "What a chat pays"): the
 * prompt's tokens counted with gpt-tokenizer (o200k, the GPT-4o encoding: other models' tokenizers count
 * within a few tens of percent of it), and the completion's budget.
 */

/**
 * The completion budget of a request that names no max_tokens (nor max_completion_tokens): the common
 * output limit of chat models. Its estimate, and so its hold, prices this many completion tokens.
 */
export const DEFAULT_COMPLETION_TOKENS = 4096;

// A budget counts at most this many tokens (no model writes more in one answer), so it fits its int column.
const MAX_COMPLETION_BUDGET = 1_000_000;

/**
 * Characters of the prompt's text counted token by token; the rest is counted at the same tokens per
 * character. Counting costs up to ~2 ms per 1,000 characters of random text: this bounds it per request.
 */
export const PROMPT_CHARS_COUNTED = 32_000;

// Special-token text in a prompt (`<|endoftext|>`) is counted as plain text, never refused.
const PLAIN = { disallowedSpecial: new Set<string>() };

/** The text of the prompt a solver reads: every message's text parts and tool definitions. */
function promptText(body: { messages: { content: unknown }[]; tools?: unknown }): string {
  const parts: string[] = [];
  const add = (value: unknown) => {
    if (typeof value === 'string') parts.push(value);
    else if (Array.isArray(value)) for (const part of value) add(part && typeof part === 'object' && 'text' in part ? (part as { text: unknown }).text : undefined);
  };
  for (const message of body.messages) add(message.content);
  if (Array.isArray(body.tools) && body.tools.length > 0) parts.push(JSON.stringify(body.tools));
  return parts.join('\n');
}

/** The prompt's estimated tokens (at least 1). */
export function estimatePromptTokens(body: { messages: { content: unknown }[]; tools?: unknown }): number {
  const text = promptText(body);
  const counted = text.slice(0, PROMPT_CHARS_COUNTED);
  const tokens = countTokens(counted, PLAIN);
  const rest = text.length - counted.length;
  return Math.max(1, tokens + (rest > 0 ? Math.ceil((rest * tokens) / counted.length) : 0));
}

/** The completion's token budget: the request's max_completion_tokens or max_tokens, else the default. */
export function completionBudget(body: { max_tokens?: number | null; max_completion_tokens?: number | null }): number {
  const named = body.max_completion_tokens ?? body.max_tokens;
  return Math.min(named ?? DEFAULT_COMPLETION_TOKENS, MAX_COMPLETION_BUDGET);
}
