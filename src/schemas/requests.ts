import { z } from './zod';
import { pydanticIssue } from './issues';
import { DECIMAL_PATTERN, Int, NonNegativeNumeric, Numeric, PositiveInt } from './common';
import { BILLING_TYPES, CAPABILITY_TASK_TYPES, FULFILLMENT_PATHS, MAX_CONCURRENT_LIMIT, TIERS, WEB_TASK_TYPES, type WebTaskType } from './domain';

/** One schema per request body; types are inferred from them and OpenAPI is generated from them. */

export const AccountSettingsBody = z
  .object({ prompt_safety_scan: z.boolean() })
  .strict()
  .openapi('AccountSettings');

export const FetchBody = z
  .object({
    url: z.string().min(1),
    raw_html: z.boolean().default(false),
    timeout: PositiveInt.nullable().optional(),
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

export const Viewport = z.object({ width: PositiveInt, height: PositiveInt }).strict().openapi('Viewport');

export const ScreenshotBody = z
  .object({
    url: z.string().min(1),
    full_page: z.boolean().default(false),
    viewport: Viewport.nullable().optional(),
    viewport_width: PositiveInt.nullable().optional(),
    viewport_height: PositiveInt.nullable().optional(),
  })
  .strict()
  .openapi('ScreenshotRequest');

export const SnapshotBody = z
  .object({
    url: z
      .string()
      .min(1)
      .refine((value) => /^https?:\/\//i.test(value), 'URL scheme should be \'http\' or \'https\''),
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

export const CreateTaskBody = z
  .object({
    task_type: z.enum(WEB_TASK_TYPES),
    payload: z.record(z.any()),
    max_price_points: NonNegativeNumeric.nullable().optional(),
    timeout_seconds: PositiveInt.nullable().optional(),
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
    tools: z.array(z.record(z.any())).nullable().optional(),
    tool_choice: z.union([z.string(), z.record(z.any())]).nullable().optional(),
    parallel_tool_calls: z.boolean().nullable().optional(),
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
    timeout: PositiveInt.nullable().optional(),
  })
  .passthrough()
  .openapi('ScrapeRequest');

export const SolverCapability = z
  .object({
    task_type: z.enum(CAPABILITY_TASK_TYPES),
    tier: z.enum(TIERS),
    billing_type: z.enum(BILLING_TYPES),
    fulfillment_path: z.enum(FULFILLMENT_PATHS),
    provider_name: z.string().min(1),
    model_name: z.string().min(1),
    marginal_cost: NonNegativeNumeric,
    min_price_points: NonNegativeNumeric,
    max_concurrent: PositiveInt.max(MAX_CONCURRENT_LIMIT),
  })
  .strict()
  .openapi('SolverCapability');

export const SolverCapabilitiesBody = z.array(SolverCapability).openapi('SolverCapabilities');

export const DepositBody = z
  .object({
    account_id: z.string().min(1),
    // Only a well-formed amount is checked for sign; a malformed one already has its own error.
    amount_points: Numeric.refine((value) => (typeof value === 'string' && !DECIMAL_PATTERN.test(value)) || Number(value) > 0, {
      ...pydanticIssue('greater_than', 'Input should be greater than 0', { gt: 0 }),
    }),
  })
  .strict()
  .openapi('DepositRequest');

export const AccountIdBody = z.object({ account_id: z.string().min(1) }).openapi('AccountRef');

export const SimulateRateLimitBody = z
  .object({ account_id: z.string().min(1), trigger_after_n_requests: Int().min(0) })
  .openapi('SimulateRateLimitRequest');

export const AdminCompleteTaskBody = z
  .object({ solver_id: z.string().min(1), result: z.record(z.any()) })
  .strict()
  .openapi('AdminCompleteTaskRequest');

export type FetchRequest = z.infer<typeof FetchBody>;
export type SearchRequest = z.infer<typeof SearchBody>;
export type ScreenshotRequest = z.infer<typeof ScreenshotBody>;
export type SnapshotRequest = z.infer<typeof SnapshotBody>;
export type CreateTaskRequest = z.infer<typeof CreateTaskBody>;
export type ChatCompletionRequest = z.infer<typeof ChatCompletionBody>;
export type ScrapeRequest = z.infer<typeof ScrapeBody>;
export type SolverCapabilityInput = z.infer<typeof SolverCapability>;
