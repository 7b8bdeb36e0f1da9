/**
 * The task types canaries can be sent for: a page the service serves can check them (a screenshot by
 * its pixels); chat, whose canaries are audit prompts with known answers (strong-tier capabilities
 * only, src/trust/chat-audit.ts); and web_search, whose canaries are queries compared with a search
 * oracle's answer (src/trust/search-oracle.ts), sent only when one is configured (activeCanaryTypes in
 * src/db/reputation.ts). Here, in the leaf layer, because the canary workflows name them.
 */
export const CANARY_TASK_TYPES = [
  'proxy_fetch',
  'page_snapshot',
  'screenshot',
  'chat_completion',
  'web_search',
] as const;

export type CanaryTaskType = (typeof CANARY_TASK_TYPES)[number];
