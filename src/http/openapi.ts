import { OpenAPIRegistry, OpenApiGeneratorV31, type ResponseConfig } from '@asteasolutions/zod-to-openapi';
import { FIRECRAWL_STATUS } from '../compat/firecrawl';
import { ERROR_STATUS, type ErrorType } from '../errors';
import { z } from '../schemas/zod';
import {
  errorBodyOf,
  errorTypesOf,
  FreeForm,
  openAiErrorBodyOf,
  OpenAIValidationErrorBody,
  ValidationErrorBody,
} from '../schemas/common';
import { STORABLE_TEXT_PATTERN } from '../schemas/text';
import type { Auth, Route } from './route';

/**
 * The OpenAPI 3.1.0 document, generated from the routes the app mounts (src/http/route.ts) and the zod
 * schemas that validate their requests. Each route names the error types it answers itself; those of its
 * authentication, rate limit and body parsing
 * are added here, and every status gets the one error schema generated from ERROR_STATUS.
 */

// rate_limited: per account once authenticated, per client address for a missing or unknown key.
const AUTH_ERRORS: Record<Auth, ErrorType[]> = {
  none: [],
  bearer: ['authentication_required', 'invalid_api_key', 'rate_limited'],
  admin: ['admin_authentication_required', 'invalid_admin_key', 'admin_disabled', 'rate_limited'],
  metrics: ['metrics_authentication_required', 'invalid_metrics_token', 'metrics_disabled'],
};
// The body is read (and limited) before any route runs, so every route that takes one can answer these:
// a Content-Encoding it does not decode is 415, a body that does not decode as its encoding says is 400.
const BODY_ERRORS: ErrorType[] = ['bad_request', 'payload_too_large', 'unsupported_media_type'];
const ADMIN_HEADERS = ['Authorization', 'ADMIN_API_KEY', 'X-Admin-API-Key'];

const firecrawlStatus = (status: number) => FIRECRAWL_STATUS[status] ?? status;

const firecrawlErrorBodies = new Map<number, z.ZodTypeAny>();

/** Firecrawl's failure body `{success:false, error, code}`, `code` one of the types answered with that status. */
function firecrawlErrorBodyOf(status: number): z.ZodTypeAny {
  const body =
    firecrawlErrorBodies.get(status) ??
    z
      .object({
        success: z.literal(false),
        error: z.string(),
        code: z.enum(errorTypesOf(status, firecrawlStatus) as [ErrorType, ...ErrorType[]]),
      })
      .passthrough()
      .openapi(`ScrapeError${status}`);
  firecrawlErrorBodies.set(status, body);
  return body;
}

const ScrapeValidationError = ValidationErrorBody.extend({ success: z.literal(false), error: z.string() }).openapi(
  'ScrapeValidationError',
);

/** One server-sent event of a streamed completion (one `data:` line each). */
const SseEvent = z
  .object({
    data: z.string().openapi({
      description:
        'A chat.completion.chunk, an {"error":{"message","type","param","code"}} object when the ' +
        'stream fails, or [DONE] at its end',
    }),
  })
  .passthrough()
  .openapi('ChatCompletionEvent');

/** One event of GET /v1/admin/events (`event:` names it, `data:` is one JSON object). */
const MarketEventSchema = z
  .object({
    event: z.enum(['history', 'status', 'task_finished']),
    data: z.string().openapi({
      description:
        'history: {samples:[{at, queues}]}; status: {at, queues} (queues as in GET ' +
        '/v1/admin/status); task_finished: {task_id, status}',
    }),
  })
  .openapi('MarketEvent');

type Header = { description: string; required?: boolean; schema: { type: 'string' | 'integer' } };
const requestIdHeader: Header = {
  description: "The request id (the caller's X-Request-Id when it is sane)",
  required: true,
  schema: { type: 'string' },
};
const rateLimitHeaders = (required: boolean): Record<string, Header> => ({
  'X-RateLimit-Limit': { description: 'Requests allowed per window', required, schema: { type: 'integer' } },
  'X-RateLimit-Remaining': { description: 'Requests left in this window', required, schema: { type: 'integer' } },
  'X-RateLimit-Reset': {
    description: 'Unix time (seconds) at which the window ends',
    required,
    schema: { type: 'integer' },
  },
});

const retryAfterHeader: Header = {
  description:
    'Seconds until the rate-limit window ends (at least 1), or (solvers_busy) until a solver ' + 'slot is likely free',
  required: true,
  schema: { type: 'integer' },
};

const COST_HEADERS: Record<string, Header> = {
  'X-Points-Charged': {
    description: 'Points charged for this request (decimal string; a stream says it in its finish chunk)',
    required: false,
    schema: { type: 'string' },
  },
  'X-Points-Held': {
    description: 'Points held while it ran (its maximum price; the rest was released)',
    required: false,
    schema: { type: 'string' },
  },
};

/** The headers of one answer of a route: the request id always, the rate-limit ones once authenticated. */
function headersOf(route: Route, status: number): Record<string, Header> {
  // The upgrade is answered on the socket, outside the app (src/http/ws-server.ts); only a plain GET reaches it.
  if (route.success === 'websocket')
    return status === 404
      ? { 'X-Request-Id': requestIdHeader }
      : status === 429
        ? { ...rateLimitHeaders(true), 'Retry-After': retryAfterHeader }
        : {};
  const headers: Record<string, Header> = { 'X-Request-Id': requestIdHeader };
  // 401 is before the count; 413, 415, a body that does not decode (a 400) and malformed JSON (a 422) are
  // refused before authentication.
  if (route.auth === 'bearer' && ![401, 413, 415].includes(status))
    Object.assign(headers, rateLimitHeaders(status !== 422 && !(status === 400 && route.method !== 'get')));
  // A per-address refusal carries the address's counter in the same headers.
  if (status === 429)
    Object.assign(headers, route.auth === 'bearer' ? {} : rateLimitHeaders(true), { 'Retry-After': retryAfterHeader });
  if (status === 503 && route.errors?.includes('no_solver_available'))
    headers['Retry-After'] = {
      description: 'Seconds after which a solver is likely online (no_solver_available)',
      required: false,
      schema: { type: 'integer' },
    };
  if (route.cost && status === 200) Object.assign(headers, COST_HEADERS);
  if (route.serverTiming && status === 200)
    headers['Server-Timing'] = {
      description:
        'How long each step before the first byte took, in milliseconds (W3C Server-Timing): auth (the ' +
        'body read, the key and the rate limit), validate, store (the statement that holds the points and ' +
        'matches a solver), send (the task sent to a solver connected to this node), start (the workflow ' +
        'started); a step not ended before the first byte is left out',
      required: false,
      schema: { type: 'string' },
    };
  if (route.taskHeader && [200, 502, 504].includes(status))
    headers['X-Task-Id'] = {
      description: 'The task that served the request',
      required: status === 200,
      schema: { type: 'string' },
    };
  return headers;
}

function successOf(route: Route): [string, ResponseConfig] {
  const json = { 'application/json': { schema: route.response ?? FreeForm } };
  const headers = headersOf(route, 200);
  if (route.success === 'websocket') return ['101', { description: 'Switching Protocols: the solver WebSocket' }];
  if (route.success === 'png')
    return [
      '200',
      {
        description: 'The screenshot as JSON, or the raw PNG with Accept: image/png',
        headers,
        content: { ...json, 'image/png': { schema: z.string().openapi({ format: 'binary' }) } },
      },
    ];
  if (route.success === 'artifact') {
    const binary = { schema: z.string().openapi({ format: 'binary' }) };
    return [
      '200',
      {
        description: 'The bytes, with the content type they were stored with',
        headers,
        content: { 'image/png': binary, 'text/html': binary, 'text/markdown': binary },
      },
    ];
  }
  if (route.success === 'prometheus')
    return [
      '200',
      {
        description: 'Prometheus text exposition format 0.0.4',
        headers,
        content: { 'text/plain': { schema: z.string() } },
      },
    ];
  if (route.success === 'events')
    return [
      '200',
      {
        description:
          'With Accept: text/event-stream, a stream that stays open (`: keep-alive` comments every ' +
          "SSE_KEEPALIVE_MS); otherwise {samples} as JSON: the last hour's snapshots and one taken " +
          'now',
        headers,
        content: { ...json, 'text/event-stream': { schema: MarketEventSchema } },
      },
    ];
  if (route.success === 'sse')
    return [
      '200',
      {
        description: 'The completion as JSON, or server-sent events with stream: true',
        headers,
        content: { ...json, 'text/event-stream': { schema: SseEvent } },
      },
    ];
  return ['200', { description: 'Success', headers, content: json }];
}

function responsesOf(route: Route): Record<string, ResponseConfig> {
  const takesBody = route.method !== 'get';
  const types = [...AUTH_ERRORS[route.auth], ...(takesBody ? BODY_ERRORS : []), ...(route.errors ?? [])];
  const statusOf = (type: ErrorType) => (route.firecrawl ? firecrawlStatus(ERROR_STATUS[type]) : ERROR_STATUS[type]);
  const byStatus = new Map<number, ErrorType[]>();
  for (const type of types) byStatus.set(statusOf(type), [...(byStatus.get(statusOf(type)) ?? []), type]);

  const [successStatus, success] = successOf(route);
  const responses: Record<string, ResponseConfig> = { [successStatus]: success };
  for (const [status, own] of [...byStatus].sort(([a], [b]) => a - b)) {
    const schema = route.firecrawl
      ? firecrawlErrorBodyOf(status)
      : route.openai
        ? openAiErrorBodyOf(status)
        : errorBodyOf(status);
    responses[String(status)] = {
      description: own.join(', '),
      headers: headersOf(route, status),
      content: { 'application/json': { schema } },
    };
  }
  for (const [status, answer] of Object.entries(route.otherAnswers ?? {})) {
    responses[status] = {
      description: answer.description,
      headers: headersOf(route, Number(status)),
      content: { 'application/json': { schema: answer.schema } },
    };
  }
  // Any body can be malformed JSON, and every body and path parameter is validated; a route's own 422
  // (idempotency_key_reused) is the other shape that status can have.
  if (takesBody || route.params || route.query) {
    const validation = route.firecrawl
      ? ScrapeValidationError
      : route.openai
        ? OpenAIValidationErrorBody
        : ValidationErrorBody;
    const own = byStatus.get(422);
    const errorBody =
      own && (route.firecrawl ? firecrawlErrorBodyOf(422) : route.openai ? openAiErrorBodyOf(422) : errorBodyOf(422));
    responses['422'] = {
      description: own ? `Validation error, or ${own.join(', ')}` : 'Validation error',
      headers: headersOf(route, 422),
      content: { 'application/json': { schema: errorBody ? z.union([validation, errorBody]) : validation } },
    };
  }
  return responses;
}

type JsonSchema = Record<string, any>;

/** Any JSON value PostgreSQL can store: the free-form parts of request bodies. */
const STORABLE_JSON: JsonSchema = {
  description:
    'Any JSON value whose strings and object keys hold no NUL (and no unpaired UTF-16 ' +
    'surrogate, 422 string_unicode)',
  anyOf: [
    { type: 'string', pattern: STORABLE_TEXT_PATTERN },
    { type: 'number' },
    { type: 'boolean' },
    { type: 'null' },
    { type: 'array', items: { $ref: '#/components/schemas/StorableJson' } },
    {
      type: 'object',
      propertyNames: { pattern: STORABLE_TEXT_PATTERN },
      additionalProperties: { $ref: '#/components/schemas/StorableJson' },
    },
  ],
};

const isEmptySchema = (schema: unknown) =>
  schema === true || (typeof schema === 'object' && schema !== null && Object.keys(schema).length === 0);

/**
 * Writes the text rule of src/schemas/text.ts into a request schema: every free string gets its
 * pattern, every object its propertyNames, and every free-form value becomes StorableJson.
 */
function constrainText(schema: JsonSchema, components: Record<string, JsonSchema>, seen: Set<string>): void {
  if (typeof schema.$ref === 'string') {
    const name = schema.$ref.split('/').pop()!;
    if (!seen.has(name) && components[name]) {
      seen.add(name);
      constrainText(components[name], components, seen);
    }
    return;
  }
  const types: string[] = Array.isArray(schema.type) ? schema.type : schema.type ? [schema.type] : [];
  if (types.includes('string') && !schema.pattern && !schema.enum && !schema.format && schema.const === undefined)
    schema.pattern = STORABLE_TEXT_PATTERN;
  if (types.includes('object')) {
    schema.propertyNames = { pattern: STORABLE_TEXT_PATTERN };
    for (const property of Object.values<JsonSchema>(schema.properties ?? {}))
      constrainText(property, components, seen);
    if (schema.additionalProperties === undefined || isEmptySchema(schema.additionalProperties))
      schema.additionalProperties = { $ref: '#/components/schemas/StorableJson' };
    else if (typeof schema.additionalProperties === 'object')
      constrainText(schema.additionalProperties, components, seen);
  }
  if (types.includes('array')) {
    if (schema.items === undefined || isEmptySchema(schema.items))
      schema.items = { $ref: '#/components/schemas/StorableJson' };
    else constrainText(schema.items, components, seen);
  }
  for (const key of ['anyOf', 'oneOf', 'allOf'])
    for (const branch of schema[key] ?? []) constrainText(branch, components, seen);
}

function constrainRequests(document: JsonSchema): void {
  const components = document.components.schemas as Record<string, JsonSchema>;
  components.StorableJson = STORABLE_JSON;
  const seen = new Set<string>(['StorableJson']);
  for (const operations of Object.values<JsonSchema>(document.paths)) {
    for (const operation of Object.values<JsonSchema>(operations)) {
      for (const media of Object.values<JsonSchema>(operation.requestBody?.content ?? {}))
        constrainText(media.schema, components, seen);
      for (const parameter of operation.parameters ?? [])
        if (parameter.in === 'path') constrainText(parameter.schema, components, seen);
    }
  }
}

const documents = new WeakMap<Route[], object>();

/** The document of the routes the app mounts (each list is generated once). */
export function openApiDocument(routes: Route[]): object {
  const cached = documents.get(routes);
  if (cached) return cached;
  const registry = new OpenAPIRegistry();
  registry.register('HTTPValidationError', ValidationErrorBody);
  registry.registerComponent('securitySchemes', 'bearer', {
    type: 'http',
    scheme: 'bearer',
    description: 'API key from POST /v1/register',
  });

  for (const route of routes) {
    const headerParams = {
      ...(route.auth === 'admin' || route.auth === 'metrics'
        ? Object.fromEntries(ADMIN_HEADERS.map((name) => [name, z.string().optional()]))
        : {}),
      ...(route.auth === 'bearer' ? { Authorization: z.string().optional() } : {}),
      ...Object.fromEntries(
        Object.entries(route.headers ?? {}).map(([name, description]) => [
          name,
          z.string().optional().openapi({ description }),
        ]),
      ),
    };
    registry.registerPath({
      method: route.method,
      path: route.path,
      summary: route.summary,
      tags: [route.tag],
      ...(route.auth === 'bearer' ? { security: [{ bearer: [] }] } : {}),
      request: {
        ...(Object.keys(headerParams).length ? { headers: z.object(headerParams) } : {}),
        ...(route.params ? { params: route.params } : {}),
        ...(route.query ? { query: route.query } : {}),
        ...(route.body ? { body: { required: true, content: { 'application/json': { schema: route.body } } } } : {}),
      },
      responses: responsesOf(route),
    });
  }

  const document = new OpenApiGeneratorV31(registry.definitions).generateDocument({
    openapi: '3.1.0',
    info: {
      title: 'Task Marketplace API',
      version: '0.1.0',
      description:
        'Web tasks, chat completions and solver agents. Errors are {"error":{"type","message"}} ' +
        '(one schema per status, ErrorNNN, whose `type` lists the types of that status); validation ' +
        'errors are 422 {"detail":[...]}. On the OpenAI-compatible routes (chat completions, ' +
        'models) an error is OpenAI\'s error object {"error":{"message","type","param","code"}}, ' +
        '`code` the same as `type` (OpenAIErrorNNN), and a 422 keeps its `detail` and adds that ' +
        'object for its first issue. Strings hold no NUL (422 string_pattern_mismatch) and no ' +
        'unpaired UTF-16 surrogate (422 string_unicode).',
    },
  });
  constrainRequests(document as unknown as JsonSchema);
  documents.set(routes, document);
  return document;
}
