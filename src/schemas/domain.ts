/** Domain vocabularies, each defined once and used by schemas, SQL and workflows alike. */

export const WEB_TASK_TYPES = ['web_search', 'proxy_fetch', 'screenshot', 'page_snapshot'] as const;
export type WebTaskType = (typeof WEB_TASK_TYPES)[number];

export const CHAT_TASK_TYPE = 'chat_completion' as const;
export const CAPABILITY_TASK_TYPES = [...WEB_TASK_TYPES, CHAT_TASK_TYPE] as const;
export type CapabilityTaskType = (typeof CAPABILITY_TASK_TYPES)[number];

export const TIERS = ['strong', 'standard', 'basic'] as const;
export const BILLING_TYPES = ['per_request', 'per_token'] as const;
export type BillingType = (typeof BILLING_TYPES)[number];
/**
 * The task types billed per token: chat only, whose usage the service counts (src/chat/usage.ts). A web
 * task's work is not measured in tokens, so every other type is billed per request.
 */
export const TOKEN_BILLED_TASK_TYPES: readonly CapabilityTaskType[] = [CHAT_TASK_TYPE];
/** The billing types an offer of `taskType` may have. */
export const billingTypesOf = (taskType: string): readonly BillingType[] =>
  (TOKEN_BILLED_TASK_TYPES as readonly string[]).includes(taskType) ? BILLING_TYPES : ['per_request'];
/** The periods a key's spend limit counts over: the UTC day, or the key's whole life. */
export const SPEND_LIMIT_PERIODS = ['day', 'total'] as const;
export type SpendLimitPeriod = (typeof SPEND_LIMIT_PERIODS)[number];
export const FULFILLMENT_PATHS = ['http', 'browser', 'search_api', 'local_model', 'provider_api'] as const;

// Task states and attempt outcomes: src/contract/lifecycle.ts.

/**
 * The strict orders a client may ask matching for (`provider.sort`, as OpenRouter names it), instead of
 * the default that shares work among equal offers (docs/queue.md, "Sharing work"): `price` cheapest, then
 * the better score, then the lower latency; `latency` the lowest measured latency first; `throughput`
 * the most tasks per second the offer can still take first.
 */
export const ROUTING_SORTS = ['price', 'latency', 'throughput'] as const;
export type RoutingSort = (typeof ROUTING_SORTS)[number];

export const PUBLIC_MODEL_ID = 'service/strong';
export const MODEL_ALIASES: Record<string, string> = { strong: PUBLIC_MODEL_ID, [PUBLIC_MODEL_ID]: PUBLIC_MODEL_ID };

export const SNAPSHOT_FORMATS = ['markdown', 'ai', 'aria', 'role', 'html'] as const;
export const SOLVER_PROTOCOL_VERSION = 1;

// Each unit of a capability's concurrency is a row (a slot) that matching takes and frees.
export const MAX_CONCURRENT_LIMIT = 10_000;

/** The tokens of a chat a client sees and is billed for (src/chat/usage.ts meters them). */
export interface BilledUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}
