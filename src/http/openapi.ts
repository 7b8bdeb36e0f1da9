import { OpenAPIRegistry, OpenApiGeneratorV31 } from '@asteasolutions/zod-to-openapi';
import { z } from '../schemas/zod';
import { ErrorBody, FreeForm, StringMap, ValidationErrorBody } from '../schemas/common';
import * as bodies from '../schemas/requests';

/** The OpenAPI 3.1.0 document, generated from the same zod schemas that validate requests. */

type Auth = 'none' | 'bearer' | 'admin';
interface RouteDoc {
  method: 'get' | 'post' | 'patch';
  path: string;
  summary: string;
  tag: string;
  auth: Auth;
  body?: z.ZodTypeAny;
  params?: Record<string, string>;
  response?: z.ZodTypeAny;
  headers?: Record<string, string>;
}

const ROUTES: RouteDoc[] = [
  { method: 'get', path: '/health', summary: 'Liveness', tag: 'health', auth: 'none', response: StringMap },
  { method: 'post', path: '/v1/register', summary: 'Register an account; returns account_id and api_key (shown once)', tag: 'account', auth: 'none', response: StringMap },
  { method: 'get', path: '/v1/profile', summary: 'The calling account', tag: 'account', auth: 'bearer' },
  { method: 'get', path: '/v1/balance', summary: 'Points balance', tag: 'account', auth: 'bearer', response: StringMap },
  { method: 'patch', path: '/v1/account/settings', summary: 'Change account settings', tag: 'account', auth: 'bearer', body: bodies.AccountSettingsBody, response: bodies.AccountSettingsBody },
  { method: 'post', path: '/v1/tasks', summary: 'Create a web task', tag: 'tasks', auth: 'bearer', body: bodies.CreateTaskBody, headers: { 'Idempotency-Key': 'Retrying with the same key returns the first task' } },
  { method: 'get', path: '/v1/tasks/{task_id}', summary: 'Poll a task', tag: 'tasks', auth: 'bearer', params: { task_id: 'Task id' } },
  { method: 'post', path: '/v1/fetch', summary: 'Fetch a page as markdown or HTML (no browser)', tag: 'convenience', auth: 'bearer', body: bodies.FetchBody },
  { method: 'post', path: '/v1/search', summary: 'Web search', tag: 'convenience', auth: 'bearer', body: bodies.SearchBody },
  { method: 'post', path: '/v1/screenshot', summary: 'PNG screenshot of the rendered page (JSON, or raw PNG with Accept: image/png)', tag: 'convenience', auth: 'bearer', body: bodies.ScreenshotBody },
  { method: 'post', path: '/v1/snapshot', summary: 'Structured snapshot of the rendered page', tag: 'convenience', auth: 'bearer', body: bodies.SnapshotBody },
  { method: 'post', path: '/v1/chat/completions', summary: 'OpenAI-compatible chat completion (JSON or SSE)', tag: 'inference', auth: 'bearer', body: bodies.ChatCompletionBody, headers: { 'X-Service-Trust-Mode': 'standard (default) or strict' } },
  { method: 'post', path: '/v1/inference/chat/completions', summary: 'Temporary alias of /v1/chat/completions', tag: 'inference', auth: 'bearer', body: bodies.ChatCompletionBody, headers: { 'X-Service-Trust-Mode': 'standard (default) or strict' } },
  { method: 'get', path: '/v1/models', summary: 'Public models', tag: 'inference', auth: 'none' },
  { method: 'get', path: '/v1/models/{model}', summary: 'A model descriptor (service/strong or strong)', tag: 'inference', auth: 'none', params: { model: 'service/strong or strong' } },
  { method: 'post', path: '/v1/compat/scraper/scrape', summary: 'Firecrawl v1 compatible scrape', tag: 'compatibility', auth: 'bearer', body: bodies.ScrapeBody, headers: { 'Idempotency-Key': 'Retrying with the same key returns the first scrape\'s tasks' } },
  { method: 'post', path: '/v1/compat/scraper/v1/scrape', summary: 'The same scrape at the path Firecrawl SDKs build (apiUrl = {base_url}/v1/compat/scraper)', tag: 'compatibility', auth: 'bearer', body: bodies.ScrapeBody },
  { method: 'post', path: '/v1/solver/capabilities', summary: 'Register or replace solver capabilities', tag: 'solver', auth: 'bearer', body: bodies.SolverCapabilitiesBody },
  { method: 'get', path: '/v1/solver/stats', summary: 'Solver statistics', tag: 'solver', auth: 'bearer' },
  { method: 'get', path: '/v1/solver/connect', summary: 'WebSocket upgrade for solver protocol v1 (see docs/solver-protocol.md)', tag: 'solver', auth: 'bearer' },
  { method: 'post', path: '/v1/admin/deposit', summary: 'Deposit points', tag: 'admin', auth: 'admin', body: bodies.DepositBody, response: StringMap },
  { method: 'post', path: '/v1/admin/domain-policy/reload', summary: 'Reload the domain policy on every node', tag: 'admin', auth: 'admin' },
  { method: 'post', path: '/v1/admin/reset-rate-limit', summary: 'Clear an account\'s rate-limit counter and simulation', tag: 'admin', auth: 'admin', body: bodies.AccountIdBody },
  { method: 'post', path: '/v1/admin/simulate-rate-limit', summary: 'Rate-limit an account after N more requests', tag: 'admin', auth: 'admin', body: bodies.SimulateRateLimitBody },
  { method: 'get', path: '/v1/admin/status', summary: 'Database and Temporal reachability, counts', tag: 'admin', auth: 'admin' },
  { method: 'post', path: '/v1/admin/tasks/{task_id}/complete', summary: 'Complete a task manually and pay the named solver', tag: 'admin', auth: 'admin', body: bodies.AdminCompleteTaskBody, params: { task_id: 'Task id' } },
];

const ADMIN_HEADERS = ['Authorization', 'ADMIN_API_KEY', 'X-Admin-API-Key'];

let cached: object | undefined;

export function openApiDocument(): object {
  if (cached) return cached;
  const registry = new OpenAPIRegistry();
  registry.register('Error', ErrorBody);
  registry.register('HTTPValidationError', ValidationErrorBody);
  registry.registerComponent('securitySchemes', 'bearer', { type: 'http', scheme: 'bearer', description: 'API key from POST /v1/register' });

  for (const route of ROUTES) {
    const headerParams = {
      ...(route.auth === 'admin' ? Object.fromEntries(ADMIN_HEADERS.map((name) => [name, z.string().optional()])) : {}),
      ...(route.auth === 'bearer' ? { Authorization: z.string().optional() } : {}),
      ...Object.fromEntries(Object.entries(route.headers ?? {}).map(([name, description]) => [name, z.string().optional().openapi({ description })])),
    };
    const responses: Record<string, { description: string; content?: Record<string, { schema: z.ZodTypeAny }> }> = {
      '200': { description: 'Success', content: { 'application/json': { schema: route.response ?? FreeForm } } },
    };
    if (route.body || route.params) {
      responses['422'] = { description: 'Validation error', content: { 'application/json': { schema: ValidationErrorBody } } };
    }
    if (route.auth !== 'none') {
      responses['401'] = { description: 'Missing or invalid credential', content: { 'application/json': { schema: ErrorBody } } };
    }
    if (route.auth === 'bearer') {
      responses['429'] = { description: 'rate_limited (Retry-After and X-RateLimit-* headers)', content: { 'application/json': { schema: ErrorBody } } };
    }
    if (route.path.includes('chat/completions')) {
      responses['402'] = { description: 'no_strong_solver_available or insufficient_balance', content: { 'application/json': { schema: ErrorBody } } };
    }
    registry.registerPath({
      method: route.method,
      path: route.path,
      summary: route.summary,
      tags: [route.tag],
      ...(route.auth === 'bearer' ? { security: [{ bearer: [] }] } : {}),
      request: {
        ...(Object.keys(headerParams).length ? { headers: z.object(headerParams) } : {}),
        ...(route.params ? { params: z.object(Object.fromEntries(Object.entries(route.params).map(([name, description]) => [name, z.string().openapi({ description })]))) } : {}),
        ...(route.body ? { body: { required: true, content: { 'application/json': { schema: route.body } } } } : {}),
      },
      responses,
    });
  }

  cached = new OpenApiGeneratorV31(registry.definitions).generateDocument({
    openapi: '3.1.0',
    info: {
      title: 'Task Marketplace API',
      version: '0.1.0',
      description: 'Web tasks, chat completions and solver agents. Errors are {"error":{"type","message"}}; validation errors are 422 {"detail":[...]}.',
    },
  });
  return cached;
}
