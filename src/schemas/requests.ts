import { z } from './zod';
import { pydanticIssue } from './issues';
import { Int, NonNegativeNumeric, PositiveInt, PositiveNumeric } from './common';
import { TERMINAL_STATES, type TerminalState } from '../tasks/lifecycle';
import { BILLING_TYPES, CAPABILITY_TASK_TYPES, FULFILLMENT_PATHS, MAX_CONCURRENT_LIMIT, ROUTING_SORTS, SPEND_LIMIT_PERIODS, TIERS, WEB_TASK_TYPES, type WebTaskType } from './domain';

/** One schema per request body; types are inferred from them and OpenAPI is generated from them. */

export const AccountSettingsBody = z
  .object({ prompt_safety_scan: z.boolean() })
  .strict()
  .openapi('AccountSettings');

// A deadline is a timer in the workflow and in the waiting request, and a task's hold should not outlive a day.
export const MAX_TIMEOUT_SECONDS = 86_400;
const TimeoutSeconds = PositiveInt.max(MAX_TIMEOUT_SECONDS);
// Larger than any screen; a browser asked for more fails rather than renders.
export const MAX_VIEWPORT_PIXELS = 16_384;
const ViewportPixels = PositiveInt.max(MAX_VIEWPORT_PIXELS);
// The simulation counts in a bigint column; a billion requests is beyond any test.
export const MAX_SIMULATED_REQUESTS = 1_000_000_000;

/** A target the service fetches: an absolute http(s) URL (422 url_parsing otherwise, 403 for other schemes). */
const TargetUrl = () => z.string().min(1).openapi({ format: 'uri' });

export const SpendLimit = z
  .object({
    points: NonNegativeNumeric.openapi({ description: 'Points the key\'s tasks may hold and be charged in the period' }),
    period: z.enum(SPEND_LIMIT_PERIODS).openapi({ description: 'day (UTC) or total' }),
  })
  .strict()
  .openapi('SpendLimit');

const KeyName = z.string().min(1).max(100).openapi({ description: 'What the key is for, e.g. "ci" or "laptop"' });

export const CreateApiKeyBody = z
  .object({
    name: KeyName,
    spend_limit: SpendLimit.nullable().optional(),
    restricted: z.boolean().optional().openapi({
      description: 'A restricted key cannot create, list, change or revoke keys (it may revoke itself); true by default when spend_limit is given, else false',
    }),
  })
  .strict()
  .openapi('CreateApiKeyRequest');

export const UpdateApiKeyBody = z
  .object({ name: KeyName.optional(), spend_limit: SpendLimit.nullable().optional().openapi({ description: 'null removes the limit' }) })
  .strict()
  .openapi('UpdateApiKeyRequest');
export type SpendLimitRequest = z.infer<typeof SpendLimit>;
export type CreateApiKeyRequest = z.infer<typeof CreateApiKeyBody>;
export type UpdateApiKeyRequest = z.infer<typeof UpdateApiKeyBody>;

export const FetchBody = z
  .object({
    url: TargetUrl(),
    raw_html: z.boolean().default(false),
    timeout: TimeoutSeconds.nullable().optional(),
  })
  .strict()
  .openapi('FetchRequest');

export const SearchBody = z
  .object({
    query: z.string().min(1),
    count: Int().min(1).max(10).default(5),
  })
  .strict()
  .openapi('SearchRequest');

export const Viewport = z.object({ width: ViewportPixels, height: ViewportPixels }).strict().openapi('Viewport');

/** Longest wait after a page's load before its screenshot: within the default attempt deadline (30 s). */
export const MAX_SCREENSHOT_WAIT_MS = 20_000;

export const ScreenshotBody = z
  .object({
    url: TargetUrl(),
    full_page: z.boolean().default(false),
    viewport: Viewport.nullable().optional(),
    viewport_width: ViewportPixels.nullable().optional(),
    viewport_height: ViewportPixels.nullable().optional(),
    // Milliseconds to wait after the page has loaded, so that content its scripts render is captured.
    wait_ms: Int().min(0).max(MAX_SCREENSHOT_WAIT_MS).nullable().optional(),
  })
  .strict()
  .openapi('ScreenshotRequest');

export const SnapshotBody = z
  .object({
    url: TargetUrl().refine((value) => /^https?:\/\//i.test(value), 'URL scheme should be \'http\' or \'https\''),
    mode: z.enum(['ai', 'aria']).nullable().optional(),
    selector: z.string().min(1).nullable().optional(),
  })
  .strict()
  .openapi('SnapshotRequest');

/** Task payloads are validated with the fields of the matching convenience body. */
export const PAYLOAD_SCHEMAS: Record<WebTaskType, z.ZodTypeAny> = {
  proxy_fetch: FetchBody,
  web_search: SearchBody,
  screenshot: ScreenshotBody,
  page_snapshot: SnapshotBody,
};

export const WebhookSubscription = z
  .object({
    url: z.string().min(1).openapi({ description: 'http(s) URL that receives the signed POSTs; the domain policy applies' }),
    events: z
      .array(z.enum(TERMINAL_STATES as [TerminalState, ...TerminalState[]]))
      .min(1)
      .optional()
      .openapi({ description: 'Terminal states to be told about (default: all)' }),
  })
  .strict()
  .openapi('WebhookSubscription');

/** The account's default webhook: the same fields as a task's. */
export const AccountWebhookBody = WebhookSubscription;
export type AccountWebhookRequest = z.infer<typeof AccountWebhookBody>;

const ProviderSort = z.enum(ROUTING_SORTS).nullable().optional().openapi({
  description:
    'Match by this strict order instead of sharing work among equal offers: price (cheapest, then the better score, then the lower latency), latency (the lowest measured latency first) or throughput (the most tasks per second the offer can still take first); docs/queue.md, "Sharing work"',
});

/** Routing preferences, as OpenRouter's `provider` object; a web task takes `sort` only. */
export const ProviderPreferences = z.object({ sort: ProviderSort }).strict().openapi('ProviderPreferences');

/** provider.max_price, as OpenRouter names it, in points; other keys (image, …) are accepted and ignored. */
export const MaxPrice = z
  .object({
    prompt: NonNegativeNumeric.nullable().optional().openapi({ description: 'The most a prompt token may cost: points per million prompt tokens' }),
    completion: NonNegativeNumeric.nullable().optional().openapi({ description: 'The most a completion token may cost: points per million completion tokens' }),
    request: NonNegativeNumeric.nullable().optional().openapi({ description: 'The most an offer may ask per request (its min_price_points), in points' }),
  })
  .passthrough()
  .openapi('MaxPrice');

/**
 * A chat's `provider`: `sort`, `max_price` and `allow_fallbacks` are read (docs/queue.md, "What a chat
 * pays"); its other fields pass through to the solver like any extra field.
 */
export const ChatProviderPreferences = z
  .object({
    sort: ProviderSort,
    max_price: MaxPrice.nullable().optional().openapi({
      description: 'Only offers within these rates serve the completion; when no strong solver online is, it is refused (422 no_solver_within_price, naming the limit)',
    }),
    allow_fallbacks: z.boolean().nullable().optional().openapi({
      description: 'false: the best offer with a free slot now serves the completion alone: no wait in the queue (429 solvers_busy) and no second solver after a failure. Default true',
    }),
  })
  .passthrough()
  .openapi('ChatProviderPreferences');

export const CreateTaskBody = z
  .object({
    task_type: z.enum(WEB_TASK_TYPES),
    payload: z.record(z.any()),
    max_price_points: NonNegativeNumeric.nullable().optional(),
    timeout_seconds: TimeoutSeconds.nullable().optional(),
    webhook: WebhookSubscription.nullable().optional(),
    provider: ProviderPreferences.nullable().optional(),
  })
  .strict()
  .openapi('CreateTaskRequest');

export const ChatMessage = z
  .object({
    role: z.enum(['system', 'user', 'assistant', 'tool', 'developer']),
    content: z.union([z.string(), z.array(z.any())]),
  })
  .passthrough()
  .openapi('ChatMessage');

export const ChatCompletionBody = z
  .object({
    model: z.string().min(1).openapi({ example: 'service/strong' }),
    messages: z.array(ChatMessage).min(1),
    stream: z.boolean().default(false),
    temperature: z.number().min(0).max(2).nullable().optional(),
    max_tokens: PositiveInt.nullable().optional(),
    max_completion_tokens: PositiveInt.nullable().optional().openapi({ description: 'OpenAI\'s newer name for max_tokens; either bounds the estimate an offer is ranked and held by' }),
    tools: z.array(z.record(z.any())).nullable().optional(),
    tool_choice: z.union([z.string(), z.record(z.any())]).nullable().optional(),
    parallel_tool_calls: z.boolean().nullable().optional(),
    provider: ChatProviderPreferences.nullable().optional(),
  })
  .passthrough()
  .openapi('ChatCompletionRequest');

/** The Firecrawl v1 scrape formats this service can produce; others (LLM extraction...) are refused. */
export const SCRAPE_FORMATS = ['markdown', 'html', 'rawHtml', 'links', 'screenshot', 'screenshot@fullPage'] as const;

// Extra Firecrawl keys (origin, waitFor, headers...) are accepted and ignored, so existing clients work.
export const ScrapeBody = z
  .object({
    url: z.string().min(1),
    formats: z.array(z.enum(SCRAPE_FORMATS)).optional(),
    onlyMainContent: z.boolean().nullable().optional(),
    // Milliseconds, as Firecrawl takes it.
    timeout: PositiveInt.max(MAX_TIMEOUT_SECONDS * 1000).nullable().optional(),
  })
  .passthrough()
  .openapi('ScrapeRequest');

/** Firecrawl v2 scrape formats this service serves; any other (json, summary, …) is refused naming it. */
export const SCRAPE_V2_FORMATS = ['markdown', 'html', 'rawHtml', 'links', 'screenshot'] as const;

// v2 formats are names or objects ({"type":"screenshot","fullPage":true,"viewport":{…}}); which of them
// this service serves is decided by the route, so that an unserved one is named in Firecrawl's error body.
const ScrapeV2Format = z.union([z.string().min(1), z.object({ type: z.string().min(1) }).passthrough()]);

const ScrapeOptionsV2 = {
  formats: z.array(ScrapeV2Format).nullable().optional(),
  onlyMainContent: z.boolean().nullable().optional(),
  includeTags: z.array(z.string().min(1)).nullable().optional(),
  excludeTags: z.array(z.string().min(1)).nullable().optional(),
  waitFor: Int().min(0).max(MAX_SCREENSHOT_WAIT_MS).nullable().optional(),
  timeout: PositiveInt.max(MAX_TIMEOUT_SECONDS * 1000).nullable().optional(),
  headers: z.record(z.string()).nullable().optional(),
  mobile: z.boolean().nullable().optional(),
};

/** A v2 screenshot format object; `quality` is accepted, and has no effect on PNG images. */
export const ScreenshotFormatV2 = z
  .object({
    type: z.literal('screenshot'),
    fullPage: z.boolean().nullable().optional(),
    quality: Int().min(0).max(100).nullable().optional(),
    viewport: Viewport.nullable().optional(),
  })
  .passthrough();

// Other Firecrawl keys (origin, maxAge, proxy, parsers…) are accepted and ignored, so existing clients work.
export const ScrapeV2Body = z
  .object({ url: z.string().min(1), ...ScrapeOptionsV2 })
  .passthrough()
  .openapi('ScrapeV2Request');

/** Firecrawl's search `limit` goes to 100; a web_search task returns at most 10 results. */
export const FIRECRAWL_SEARCH_LIMIT_MAX = 100;

export const FirecrawlSearchBody = z
  .object({
    query: z.string().min(1),
    limit: Int().min(1).max(FIRECRAWL_SEARCH_LIMIT_MAX).nullable().optional(),
    timeout: PositiveInt.max(MAX_TIMEOUT_SECONDS * 1000).nullable().optional(),
    // v2: web, news, images (names or {type}); only web is served.
    sources: z.array(z.union([z.string().min(1), z.object({ type: z.string().min(1) }).passthrough()])).nullable().optional(),
    scrapeOptions: z.object({ formats: z.array(ScrapeV2Format).nullable().optional() }).passthrough().nullable().optional(),
  })
  .passthrough()
  .openapi('FirecrawlSearchRequest');

export const SolverCapability = z
  .object({
    task_type: z.enum(CAPABILITY_TASK_TYPES),
    tier: z.enum(TIERS),
    billing_type: z.enum(BILLING_TYPES),
    fulfillment_path: z.enum(FULFILLMENT_PATHS),
    provider_name: z.string().min(1),
    model_name: z.string().min(1),
    marginal_cost: NonNegativeNumeric.openapi({ description: 'per_token: points per 1,000 tokens, prompt and completion alike unless prompt_cost / completion_cost name them apart' }),
    prompt_cost: NonNegativeNumeric.optional().openapi({ description: 'per_token: points per 1,000 prompt tokens (default: marginal_cost)' }),
    completion_cost: NonNegativeNumeric.optional().openapi({ description: 'per_token: points per 1,000 completion tokens (default: marginal_cost)' }),
    min_price_points: NonNegativeNumeric,
    max_concurrent: PositiveInt.max(MAX_CONCURRENT_LIMIT),
  })
  .strict()
  .openapi('SolverCapability');

export const SolverCapabilitiesBody = z.array(SolverCapability).openapi('SolverCapabilities');

export const DepositBody = z
  .object({
    account_id: z.string().min(1),
    amount_points: PositiveNumeric,
  })
  .strict()
  .openapi('DepositRequest');

export const AccountIdBody = z.object({ account_id: z.string().min(1) }).openapi('AccountRef');

export const SimulateRateLimitBody = z
  .object({ account_id: z.string().min(1), trigger_after_n_requests: Int().min(0).max(MAX_SIMULATED_REQUESTS) })
  .openapi('SimulateRateLimitRequest');

export const AdminCompleteTaskBody = z
  .object({ solver_id: z.string().min(1), result: z.record(z.any()) })
  .strict()
  .openapi('AdminCompleteTaskRequest');

export const TaskIdParams = z.object({ task_id: z.string().openapi({ description: 'Task id' }) });
export const SolverIdParams = z.object({ solver_id: z.string().openapi({ description: 'Solver (account) id' }) });
export const ClearQuarantineBody = z
  .object({ note: z.string().max(2000).nullable().optional().openapi({ description: 'Why the quarantine is cleared (kept with it)' }) })
  .strict()
  .openapi('ClearQuarantineRequest');
export const KeyIdParams = z.object({ key_id: z.string().openapi({ description: 'Key id' }) });

export type FetchRequest = z.infer<typeof FetchBody>;
export type SearchRequest = z.infer<typeof SearchBody>;
export type ScreenshotRequest = z.infer<typeof ScreenshotBody>;
export type SnapshotRequest = z.infer<typeof SnapshotBody>;
export type CreateTaskRequest = z.infer<typeof CreateTaskBody>;
export type ChatCompletionRequest = z.infer<typeof ChatCompletionBody>;
export type ScrapeRequest = z.infer<typeof ScrapeBody>;
export type ScrapeV2Request = z.infer<typeof ScrapeV2Body>;
export type FirecrawlSearchRequest = z.infer<typeof FirecrawlSearchBody>;
export type SolverCapabilityInput = z.infer<typeof SolverCapability>;
