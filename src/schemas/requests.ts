import { z } from './zod';
import { pydanticIssue } from './issues';
import { Int, NonNegativeNumeric, PositiveInt, PositiveNumeric } from './common';
import { CRAWL_EVENTS } from '../contract/crawl-events';
import { WEBHOOK_EVENTS, type WebhookEvent } from '../contract/lifecycle';
import {
  BILLING_TYPES,
  billingTypesOf,
  CAPABILITY_TASK_TYPES,
  TOKEN_BILLED_TASK_TYPES,
  FULFILLMENT_PATHS,
  MAX_CONCURRENT_LIMIT,
  ROUTING_SORTS,
  SPEND_LIMIT_PERIODS,
  TIERS,
  WEB_TASK_TYPES,
  type WebTaskType,
} from './domain';

/** One schema per request body; types are inferred from them and OpenAPI is generated from them. */

export const AccountSettingsBody = z.object({ prompt_safety_scan: z.boolean() }).strict().openapi('AccountSettings');

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
    points: NonNegativeNumeric.openapi({ description: "Points the key's tasks may hold and be charged in the period" }),
    period: z.enum(SPEND_LIMIT_PERIODS).openapi({ description: 'day (UTC) or total' }),
  })
  .strict()
  .openapi('SpendLimit');

const KeyName = z.string().min(1).max(100).openapi({ description: 'What the key is for, e.g. "ci" or "laptop"' });

export const CreateApiKeyBody = z
  .object({
    name: KeyName,
    spend_limit: SpendLimit.nullable().optional(),
    restricted: z
      .boolean()
      .optional()
      .openapi({
        description:
          'A restricted key cannot create, list, change or revoke keys (it may revoke itself); true ' +
          'by default when spend_limit is given, else false',
      }),
  })
  .strict()
  .openapi('CreateApiKeyRequest');

export const UpdateApiKeyBody = z
  .object({
    name: KeyName.optional(),
    spend_limit: SpendLimit.nullable().optional().openapi({ description: 'null removes the limit' }),
  })
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

/** Firecrawl's limit on the actions of one scrape. */
export const MAX_PAGE_ACTIONS = 50;
/** waitFor and every wait action together: within the default attempt deadline (30 s), as a screenshot's wait. */
export const MAX_PAGE_WAIT_MS = MAX_SCREENSHOT_WAIT_MS;
/** A selector wait counts this much towards the total, as Firecrawl counts it. */
export const SELECTOR_WAIT_MS = 1_000;
export const MAX_ACTION_SCRIPT_CHARS = 16_384;
export const MAX_ACTION_TEXT_CHARS = 16_384;
/** Each screenshot is a PNG in the result frame (32 MiB at most): a few full pages fit, fifty do not. */
export const MAX_SCREENSHOT_ACTIONS = 5;
export const PAGE_ACTION_TYPES = [
  'wait',
  'click',
  'write',
  'press',
  'scroll',
  'screenshot',
  'scrape',
  'executeJavascript',
] as const;

const ActionSelector = z.string().min(1).max(2_000);

/** One step of a rendered page's script, in Firecrawl's shape (its `actions` entries). */
export const PageAction = z
  .discriminatedUnion('type', [
    z
      .object({
        type: z.literal('wait'),
        milliseconds: PositiveInt.max(MAX_PAGE_WAIT_MS).optional(),
        selector: ActionSelector.optional(),
      })
      .strict(),
    z.object({ type: z.literal('click'), selector: ActionSelector, all: z.boolean().optional() }).strict(),
    z.object({ type: z.literal('write'), text: z.string().max(MAX_ACTION_TEXT_CHARS) }).strict(),
    z.object({ type: z.literal('press'), key: z.string().min(1).max(64) }).strict(),
    z
      .object({
        type: z.literal('scroll'),
        direction: z.enum(['up', 'down']).optional(),
        selector: ActionSelector.optional(),
      })
      .strict(),
    // quality applies to JPEG and the images are PNG: accepted, with no effect.
    z
      .object({
        type: z.literal('screenshot'),
        fullPage: z.boolean().optional(),
        quality: Int().min(1).max(100).optional(),
        viewport: Viewport.optional(),
      })
      .strict(),
    z.object({ type: z.literal('scrape') }).strict(),
    z.object({ type: z.literal('executeJavascript'), script: z.string().min(1).max(MAX_ACTION_SCRIPT_CHARS) }).strict(),
  ])
  .openapi('PageAction');
export type PageActionStep = z.infer<typeof PageAction>;

/** What the actions make the page wait, as Firecrawl counts it (a selector wait is one second). */
export function actionsWaitMs(actions: readonly PageActionStep[]): number {
  return actions.reduce(
    (total, action) =>
      total + (action.type === 'wait' ? (action.milliseconds ?? (action.selector ? SELECTOR_WAIT_MS : 0)) : 0),
    0,
  );
}

/** The checks that span actions: a wait names one thing, the total wait and the screenshots are bounded. */
export function pageActionProblems(
  actions: readonly PageActionStep[],
  waitForMs = 0,
): Array<{ index: number; message: string }> {
  const problems: Array<{ index: number; message: string }> = [];
  actions.forEach((action, index) => {
    if (action.type === 'wait' && (action.milliseconds === undefined) === (action.selector === undefined)) {
      problems.push({ index, message: 'give either milliseconds or selector, not both' });
    }
  });
  const waited = actionsWaitMs(actions) + waitForMs;
  if (waited > MAX_PAGE_WAIT_MS) {
    const last = actions.map((action) => action.type).lastIndexOf('wait');
    problems.push({
      index: Math.max(last, 0),
      message: `waitFor and wait actions add up to ${waited} ms; at most ${MAX_PAGE_WAIT_MS} ms are ` + `allowed`,
    });
  }
  const shots = actions.flatMap((action, index) => (action.type === 'screenshot' ? [index] : []));
  if (shots.length > MAX_SCREENSHOT_ACTIONS)
    problems.push({
      index: shots[MAX_SCREENSHOT_ACTIONS]!,
      message: `at most ${MAX_SCREENSHOT_ACTIONS} screenshot actions are allowed`,
    });
  return problems;
}

export const PageActions = z
  .array(PageAction)
  .max(MAX_PAGE_ACTIONS)
  .superRefine((actions, context) => {
    for (const problem of pageActionProblems(actions))
      context.addIssue({ code: z.ZodIssueCode.custom, path: [problem.index], message: problem.message });
  });

/** A snapshot's fields; SnapshotBody adds the check that spans them (the solver parses with these). */
export const SnapshotFields = z
  .object({
    url: TargetUrl().refine((value) => /^https?:\/\//i.test(value), "URL scheme should be 'http' or 'https'"),
    mode: z
      .enum(['ai', 'aria', 'html'])
      .nullable()
      .optional()
      .openapi({
        description:
          "ai or aria: an ARIA snapshot; html: the rendered page's HTML; none: markdown of the " + 'rendered page',
      }),
    selector: z.string().min(1).nullable().optional(),
    // Milliseconds to wait after the page has loaded (and before any action), so that its scripts render.
    wait_ms: Int().min(0).max(MAX_PAGE_WAIT_MS).nullable().optional(),
    viewport: Viewport.nullable().optional(),
    actions: PageActions.nullable()
      .optional()
      .openapi({
        description:
          "html mode only: steps run in order on the loaded page (Firecrawl's actions); their " +
          "screenshots, scrapes and script values come back in the result's actions",
      }),
  })
  .strict();

export const SnapshotBody = SnapshotFields.superRefine((body, context) => {
  if (body.actions?.length && body.mode !== 'html')
    context.addIssue({ code: z.ZodIssueCode.custom, path: ['actions'], message: 'actions need mode "html"' });
}).openapi('SnapshotRequest');

/** Task payloads are validated with the fields of the matching convenience body. */
export const PAYLOAD_SCHEMAS: Record<WebTaskType, z.ZodTypeAny> = {
  proxy_fetch: FetchBody,
  web_search: SearchBody,
  screenshot: ScreenshotBody,
  page_snapshot: SnapshotBody,
};

export const WebhookSubscription = z
  .object({
    url: z
      .string()
      .min(1)
      .openapi({ description: 'http(s) URL that receives the signed POSTs; the domain policy applies' }),
    events: z
      .array(z.enum(WEBHOOK_EVENTS as [WebhookEvent, ...WebhookEvent[]]))
      .min(1)
      .optional()
      .openapi({
        description:
          'Terminal states to be told about, and `refunded` (the task was refunded: `task.refunded`); ' +
          'default: all',
      }),
  })
  .strict()
  .openapi('WebhookSubscription');

/** The account's default webhook: the same fields as a task's. */
export const AccountWebhookBody = WebhookSubscription;
export type AccountWebhookRequest = z.infer<typeof AccountWebhookBody>;

const ProviderSort = z
  .enum(ROUTING_SORTS)
  .nullable()
  .optional()
  .openapi({
    description:
      'Match by this strict order instead of sharing work among equal offers: price (cheapest, ' +
      'then the better score, then the lower latency), latency (the lowest measured latency ' +
      'first) or throughput (the most tasks per second the offer can still take first); ' +
      'docs/queue.md, "Sharing work"',
  });

/** Routing preferences, as OpenRouter's `provider` object; a web task takes `sort` only. */
export const ProviderPreferences = z.object({ sort: ProviderSort }).strict().openapi('ProviderPreferences');

/** provider.max_price, as OpenRouter names it, in points; other keys (image, …) are accepted and ignored. */
export const MaxPrice = z
  .object({
    prompt: NonNegativeNumeric.nullable()
      .optional()
      .openapi({ description: 'The most a prompt token may cost: points per million prompt tokens' }),
    completion: NonNegativeNumeric.nullable()
      .optional()
      .openapi({ description: 'The most a completion token may cost: points per million completion tokens' }),
    request: NonNegativeNumeric.nullable()
      .optional()
      .openapi({ description: 'The most an offer may ask per request (its min_price_points), in points' }),
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
    max_price: MaxPrice.nullable()
      .optional()
      .openapi({
        description:
          'Only offers within these rates serve the completion; when no strong solver online is, it ' +
          'is refused (422 no_solver_within_price, naming the limit)',
      }),
    allow_fallbacks: z
      .boolean()
      .nullable()
      .optional()
      .openapi({
        description:
          'false: the best offer with a free slot now serves the completion alone: no wait in the ' +
          'queue (429 solvers_busy) and no second solver after a failure. Default true',
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
    max_completion_tokens: PositiveInt.nullable()
      .optional()
      .openapi({
        description:
          "OpenAI's newer name for max_tokens; either bounds the estimate an offer is ranked and " + 'held by',
      }),
    tools: z.array(z.record(z.any())).nullable().optional(),
    tool_choice: z
      .union([z.string(), z.record(z.any())])
      .nullable()
      .optional(),
    parallel_tool_calls: z.boolean().nullable().optional(),
    provider: ChatProviderPreferences.nullable().optional(),
  })
  .passthrough()
  .openapi('ChatCompletionRequest');

/** The Firecrawl v1 scrape formats this service can produce; others (LLM extraction...) are refused. */
export const SCRAPE_FORMATS = ['markdown', 'html', 'rawHtml', 'links', 'screenshot', 'screenshot@fullPage'] as const;

/** Firecrawl v2 scrape formats this service serves; any other (json, summary, …) is refused naming it. */
export const SCRAPE_V2_FORMATS = ['markdown', 'html', 'rawHtml', 'links', 'screenshot'] as const;

/**
 * v1 scrape formats: the page's, and the LLM formats json and extract (a strong-tier chat on the page,
 * src/compat/extraction.ts).
 */
export const SCRAPE_V1_FORMATS = [...SCRAPE_FORMATS, 'json', 'extract'] as const;

// A json format's options (v2's format object, v1's jsonOptions and extract), as the OpenAPI document shows them.
const ExtractionOptions = z
  .object({
    schema: z
      .record(z.any())
      .nullable()
      .optional()
      .openapi({ description: 'A JSON Schema the answer must match (data.json)' }),
    prompt: z.string().nullable().optional(),
    systemPrompt: z.string().nullable().optional(),
  })
  .passthrough();

// v2 formats are names or objects ({"type":"screenshot","fullPage":true,"viewport":{…}}); which of them
// this service serves is decided by the route, so that an unserved one is named in Firecrawl's error body.
const ScrapeV2Format = z.union([z.string().min(1), z.object({ type: z.string().min(1) }).passthrough()]);

// Firecrawl's page cache options (docs/crawl.md, "Page cache"), for scrapes, batch scrapes and crawl pages.
const PageCacheOptions = {
  maxAge: Int()
    .min(0)
    .nullable()
    .optional()
    .openapi({
      description:
        'Milliseconds: a page fetched less long ago is answered from the page cache, without a ' +
        'solver, free (metadata.cacheState "hit", cachedAt); 0 fetches it fresh. Default 172800000 ' +
        '(two days), as Firecrawl',
    }),
  storeInCache: z
    .boolean()
    .nullable()
    .optional()
    .openapi({ description: "false: this scrape's page is not kept in the page cache (default true)" }),
};

// The options both versions serve. Every other Firecrawl option is judged by src/compat/scrape-options.ts
// (accepted or refused, naming it), so the bodies pass them through to it.
const ScrapeOptions = {
  onlyMainContent: z.boolean().nullable().optional(),
  includeTags: z.array(z.string().min(1)).nullable().optional(),
  excludeTags: z.array(z.string().min(1)).nullable().optional(),
  waitFor: Int().min(0).max(MAX_PAGE_WAIT_MS).nullable().optional(),
  // Milliseconds, as Firecrawl takes it.
  timeout: PositiveInt.max(MAX_TIMEOUT_SECONDS * 1000)
    .nullable()
    .optional(),
  mobile: z.boolean().nullable().optional(),
  removeBase64Images: z.boolean().nullable().optional(),
  location: z
    .object({
      country: z
        .string()
        .regex(/^([A-Za-z]{2}|US-generic)$/, 'an ISO 3166-1 alpha-2 country code, e.g. "DE"')
        .optional(),
      languages: z.array(z.string()).nullable().optional(),
    })
    .strict()
    .nullable()
    .optional()
    .openapi({
      description:
        "country: only solvers that declare fetching from it take the scrape (Firecrawl's default: " +
        'US); languages are refused',
    }),
  // Each action is checked by the route, so that a refused one is a 400 naming it (src/compat/firecrawl-actions.ts).
  actions: z
    .array(z.any())
    .nullable()
    .optional()
    .openapi({ description: 'Firecrawl actions (PageAction), run in the rendered page' }),
  ...PageCacheOptions,
};

/** A v2 scrape's options without its URL: the scrape options of crawls and batch scrapes. */
const ScrapeOptionsV2 = { formats: z.array(ScrapeV2Format).nullable().optional(), ...ScrapeOptions };

/** This service's own scrape option (no Firecrawl option sets a price): the request's total limit. */
const ScrapeMaxPrice = NonNegativeNumeric.nullable()
  .optional()
  .openapi({
    description:
      "This service's own option: the most the scrape may charge, its page's tasks and its json " +
      'and summary completions together (docs/decisions.md, "json and summary", Bound). Default: ' +
      "each task's default maximum",
  });

export const ScrapeBody = z
  .object({
    url: z.string().min(1),
    formats: z.array(z.enum(SCRAPE_V1_FORMATS)).optional(),
    jsonOptions: ExtractionOptions.nullable().optional().openapi({
      description: "The json format's schema and prompt: a strong-tier chat fills data.json from the page",
    }),
    extract: ExtractionOptions.nullable()
      .optional()
      .openapi({
        description: "The extract format's schema and prompt: a strong-tier chat fills data.extract from the " + 'page',
      }),
    maxPricePoints: ScrapeMaxPrice,
    ...ScrapeOptions,
  })
  .passthrough()
  .openapi('ScrapeRequest');

/** A v2 screenshot format object; `quality` is accepted, and has no effect on PNG images. */
export const ScreenshotFormatV2 = z
  .object({
    type: z.literal('screenshot'),
    fullPage: z.boolean().nullable().optional(),
    quality: Int().min(0).max(100).nullable().optional(),
    viewport: Viewport.nullable().optional(),
  })
  .passthrough();

export const ScrapeV2Body = z
  .object({
    url: z.string().min(1),
    formats: z
      .array(ScrapeV2Format)
      .nullable()
      .optional()
      .openapi({
        description:
          'markdown, html, rawHtml, links, screenshot (or {type: "screenshot", fullPage, viewport}); ' +
          '{type: "json", schema, prompt}: a strong-tier chat fills data.json from the page\'s ' +
          'markdown, validated against the schema; "summary": data.summary. Both are billed with the ' +
          'page (metadata.costParts)',
      }),
    maxPricePoints: ScrapeMaxPrice,
    ...ScrapeOptions,
  })
  .passthrough()
  .openapi('ScrapeV2Request');

/** Firecrawl's search `limit` goes to 100; a web_search task returns at most 10 results. */
export const FIRECRAWL_SEARCH_LIMIT_MAX = 100;

export const FirecrawlSearchBody = z
  .object({
    query: z.string().min(1),
    limit: Int().min(1).max(FIRECRAWL_SEARCH_LIMIT_MAX).nullable().optional(),
    timeout: PositiveInt.max(MAX_TIMEOUT_SECONDS * 1000)
      .nullable()
      .optional(),
    // v2: web, news, images (names or {type}); only web is served.
    sources: z
      .array(z.union([z.string().min(1), z.object({ type: z.string().min(1) }).passthrough()]))
      .nullable()
      .optional(),
    scrapeOptions: z
      .object({ formats: z.array(ScrapeV2Format).nullable().optional() })
      .passthrough()
      .nullable()
      .optional(),
  })
  .passthrough()
  .openapi('FirecrawlSearchRequest');

/** An ISO 3166-1 alpha-2 country code, upper case. */
export const CountryCode = z
  .string()
  .regex(/^[A-Z]{2}$/, 'an ISO 3166-1 alpha-2 country code in upper case, e.g. "DE"');

export const SolverCapability = z
  .object({
    task_type: z.enum(CAPABILITY_TASK_TYPES),
    tier: z.enum(TIERS),
    billing_type: z.enum(BILLING_TYPES),
    fulfillment_path: z.enum(FULFILLMENT_PATHS),
    provider_name: z.string().min(1),
    model_name: z.string().min(1),
    marginal_cost: NonNegativeNumeric.openapi({
      description:
        'per_token: points per 1,000 tokens, prompt and completion alike unless prompt_cost / ' +
        'completion_cost name them apart',
    }),
    prompt_cost: NonNegativeNumeric.optional().openapi({
      description: 'per_token: points per 1,000 prompt tokens (default: marginal_cost)',
    }),
    completion_cost: NonNegativeNumeric.optional().openapi({
      description: 'per_token: points per 1,000 completion tokens (default: marginal_cost)',
    }),
    min_price_points: NonNegativeNumeric,
    max_concurrent: PositiveInt.max(MAX_CONCURRENT_LIMIT),
    country: CountryCode.nullable()
      .optional()
      .openapi({
        description:
          'The country this capability fetches from, as the solver declares it (ISO 3166-1 alpha-2, ' +
          'e.g. "DE"); tasks that ask for a country (Firecrawl\'s location.country) go only to ' +
          'capabilities that declare it',
      }),
  })
  .strict()
  // Only chat is billed by tokens: the service counts a chat's tokens, and a web task has none to count.
  .superRefine((capability, context) => {
    const allowed = billingTypesOf(capability.task_type);
    if (allowed.includes(capability.billing_type)) return;
    const expected = allowed.map((type) => `'${type}'`).join(' or ');
    context.addIssue({
      code: z.ZodIssueCode.custom,
      path: ['billing_type'],
      message: 'billing_type',
      ...pydanticIssue(
        'literal_error',
        `Input should be ${expected}: task_type "${capability.task_type}" is billed per request; ` +
          `only ${TOKEN_BILLED_TASK_TYPES.join(', ')} is billed per token`,
        { expected },
      ),
    });
  })
  .openapi('SolverCapability', {
    description:
      `billing_type per_token is for task_type ${TOKEN_BILLED_TASK_TYPES.join(', ')} only; every ` +
      `other task type is billed per_request`,
    allOf: [
      {
        if: { properties: { task_type: { not: { enum: [...TOKEN_BILLED_TASK_TYPES] } } }, required: ['task_type'] },
        then: { properties: { billing_type: { const: 'per_request' } } },
      },
    ],
  } as never);

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
export const TaskArtifactParams = z.object({
  task_id: z.string().openapi({ description: 'Task id' }),
  name: z
    .string()
    .regex(/^[a-z][a-z_0-9]*(\.[a-z_0-9]+)*$/)
    .openapi({
      description:
        'The result field that holds it: image_base64 (a screenshot), snapshot, content (a fetch), ' +
        'actions.screenshots.<i>, actions.scrapes.<i>.html',
      example: 'image_base64',
    }),
});
export const WebhookDeliveryParams = z.object({
  task_id: z.string().openapi({ description: 'Task id' }),
  event: z
    .enum(WEBHOOK_EVENTS as [WebhookEvent, ...WebhookEvent[]])
    .openapi({ description: "The delivery's event (one delivery per task and event)" }),
});
export const SolverIdParams = z.object({ solver_id: z.string().openapi({ description: 'Solver (account) id' }) });
export const ClearQuarantineBody = z
  .object({
    note: z
      .string()
      .max(2000)
      .nullable()
      .optional()
      .openapi({ description: 'Why the quarantine is cleared (kept with it)' }),
  })
  .strict()
  .openapi('ClearQuarantineRequest');
export const SetVerifierBody = z
  .object({
    verifier: z.boolean().openapi({
      description:
        'true marks the solver a verifier: it re-runs sampled client tasks, and its disagreement ' +
        'proves a result wrong (docs/trust.md, "Verified client tasks"); false unmarks it',
    }),
  })
  .strict()
  .openapi('SetVerifierRequest');
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

/** A crawl's or batch scrape's pages, at most (Firecrawl's own crawl limit). */
export const CRAWL_LIMIT_MAX = 10_000;
/** Pages of one job fetched at once, at most: politeness towards the site, fairness towards other clients. */
export const CRAWL_CONCURRENCY_MAX = 50;
/** Firecrawl's `delay` between two pages, seconds, at most. */
const CRAWL_DELAY_MAX_SECONDS = 60;
/** A map lists at most this many URLs (Firecrawl's own maximum). */
export const MAP_LIMIT_MAX = 100_000;

const Flag = z.boolean().nullable().optional();
const Patterns = z.array(z.string()).nullable().optional();
// A webhook's own headers are sent with each delivery: HTTP's token names and printable values, and none
// that would change where or how the body goes.
const HEADER_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;
const RESERVED_HEADERS = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'content-type']);
const WebhookHeaderName = z
  .string()
  .regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, 'Value error, not a valid HTTP header name')
  .refine(
    (name) => !RESERVED_HEADERS.has(name.toLowerCase()) && !name.toLowerCase().startsWith('webhook-'),
    'Value error, a header the delivery sets itself',
  );
// Firecrawl's webhook: a URL, or {url, headers, metadata, events}; told of the job's events (docs/crawl.md).
const CrawlWebhook = z
  .union([
    z.string().min(1),
    z
      .object({
        url: z.string().min(1),
        headers: z
          .record(WebhookHeaderName, z.string().regex(HEADER_VALUE, 'Value error, not a valid HTTP header value'))
          .nullable()
          .optional(),
        metadata: z.record(z.any()).nullable().optional(),
        events: z.array(z.enum(CRAWL_EVENTS)).nullable().optional(),
      })
      .passthrough(),
  ])
  .openapi({
    description:
      "Told of the job's events (`started`, `page`, `completed`, `failed`; default all), signed " +
      'with Standard Webhooks',
  });
export type CrawlWebhookRequest = z.infer<typeof CrawlWebhook>;

export const CrawlV2Body = z
  .object({
    url: z.string().min(1),
    limit: PositiveInt.max(CRAWL_LIMIT_MAX).nullable().optional(),
    maxDiscoveryDepth: Int().min(0).nullable().optional(),
    includePaths: Patterns,
    excludePaths: Patterns,
    crawlEntireDomain: Flag,
    allowSubdomains: Flag,
    allowExternalLinks: Flag,
    ignoreQueryParameters: Flag,
    regexOnFullURL: Flag,
    sitemap: z.enum(['include', 'skip', 'only']).nullable().optional(),
    delay: z.number().min(0).max(CRAWL_DELAY_MAX_SECONDS).nullable().optional(),
    maxConcurrency: PositiveInt.max(CRAWL_CONCURRENCY_MAX).nullable().optional(),
    scrapeOptions: z.object(ScrapeOptionsV2).passthrough().nullable().optional(),
    webhook: CrawlWebhook.nullable().optional(),
  })
  .passthrough()
  .openapi('CrawlV2Request');
export type CrawlV2Request = z.infer<typeof CrawlV2Body>;

export const CrawlV1Body = z
  .object({
    url: z.string().min(1),
    limit: PositiveInt.max(CRAWL_LIMIT_MAX).nullable().optional(),
    maxDepth: Int().min(0).nullable().optional(),
    maxDiscoveryDepth: Int().min(0).nullable().optional(),
    includePaths: Patterns,
    excludePaths: Patterns,
    allowBackwardLinks: Flag,
    crawlEntireDomain: Flag,
    allowSubdomains: Flag,
    allowExternalLinks: Flag,
    ignoreQueryParameters: Flag,
    regexOnFullURL: Flag,
    ignoreSitemap: Flag,
    delay: z.number().min(0).max(CRAWL_DELAY_MAX_SECONDS).nullable().optional(),
    maxConcurrency: PositiveInt.max(CRAWL_CONCURRENCY_MAX).nullable().optional(),
    scrapeOptions: z
      .object({
        formats: z.array(z.enum(SCRAPE_FORMATS)).nullable().optional(),
        onlyMainContent: Flag,
        includeTags: z.array(z.string().min(1)).nullable().optional(),
        excludeTags: z.array(z.string().min(1)).nullable().optional(),
        timeout: PositiveInt.max(MAX_TIMEOUT_SECONDS * 1000)
          .nullable()
          .optional(),
        ...PageCacheOptions,
      })
      .passthrough()
      .nullable()
      .optional(),
    webhook: CrawlWebhook.nullable().optional(),
  })
  .passthrough()
  .openapi('CrawlV1Request');
export type CrawlV1Request = z.infer<typeof CrawlV1Body>;

const BatchUrls = z.array(z.string().min(1)).min(1).max(CRAWL_LIMIT_MAX);

export const BatchScrapeV2Body = z
  .object({
    urls: BatchUrls,
    ...ScrapeOptionsV2,
    ignoreInvalidURLs: Flag,
    maxConcurrency: PositiveInt.max(CRAWL_CONCURRENCY_MAX).nullable().optional(),
    webhook: CrawlWebhook.nullable().optional(),
  })
  .passthrough()
  .openapi('BatchScrapeV2Request');
export type BatchScrapeV2Request = z.infer<typeof BatchScrapeV2Body>;

export const BatchScrapeV1Body = z
  .object({
    urls: BatchUrls,
    formats: z.array(z.enum(SCRAPE_FORMATS)).nullable().optional(),
    onlyMainContent: Flag,
    includeTags: z.array(z.string().min(1)).nullable().optional(),
    excludeTags: z.array(z.string().min(1)).nullable().optional(),
    timeout: PositiveInt.max(MAX_TIMEOUT_SECONDS * 1000)
      .nullable()
      .optional(),
    ...PageCacheOptions,
    ignoreInvalidURLs: Flag,
    webhook: CrawlWebhook.nullable().optional(),
  })
  .passthrough()
  .openapi('BatchScrapeV1Request');
export type BatchScrapeV1Request = z.infer<typeof BatchScrapeV1Body>;

export const MapBody = z
  .object({
    url: z.string().min(1),
    search: z.string().nullable().optional(),
    sitemap: z.enum(['include', 'skip', 'only']).nullable().optional(),
    // v1's names for the same choice.
    ignoreSitemap: Flag,
    sitemapOnly: Flag,
    includeSubdomains: Flag,
    ignoreQueryParameters: Flag,
    limit: PositiveInt.max(MAP_LIMIT_MAX).nullable().optional(),
    timeout: PositiveInt.max(MAX_TIMEOUT_SECONDS * 1000)
      .nullable()
      .optional(),
  })
  .passthrough()
  .openapi('MapRequest');
export type MapRequest = z.infer<typeof MapBody>;

/** A crawl's or batch scrape's id, as its start answered it. */
export const JobIdParams = z.object({ id: z.string().min(1).max(100) });
