/**
 * A chat request's completion budget, as offers are priced for it (docs/queue.md, "What a chat pays");
 * its prompt is counted by `estimatePromptTokens` (src/chat/usage.ts), with the counter billing uses.
 */

/**
 * The completion budget of a request that names no max_tokens (nor max_completion_tokens): the common
 * output limit of chat models. Its estimate, and so its hold, prices this many completion tokens.
 */
export const DEFAULT_COMPLETION_TOKENS = 4096;

// A budget counts at most this many tokens (no model writes more in one answer), so it fits its int column.
const MAX_COMPLETION_BUDGET = 1_000_000;

/** The completion's token budget: the request's max_completion_tokens or max_tokens, else the default. */
export function completionBudget(body: { max_tokens?: number | null; max_completion_tokens?: number | null }): number {
  const named = body.max_completion_tokens ?? body.max_tokens;
  return Math.min(named ?? DEFAULT_COMPLETION_TOKENS, MAX_COMPLETION_BUDGET);
}
