import { Router, type RequestHandler } from 'express';
import type { ErrorType } from '../errors';
import type { z } from '../schemas/zod';
import { markStep } from './server-timing';
import { validateBody, validateParams } from './validation';

/**
 * One declaration per route: the router is mounted from it (`mount`) and the OpenAPI document is
 * generated from it (src/http/openapi.ts), so no route is served undocumented or documented unserved.
 */

export type Auth = 'none' | 'bearer' | 'admin' | 'metrics';
export type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

export interface Route {
  method: Method;
  /** OpenAPI syntax (`/v1/tasks/{task_id}`); mounted as `/v1/tasks/:task_id`. */
  path: string;
  summary: string;
  tag: string;
  auth: Auth;
  /** Validated before the handler runs (422 otherwise); req.body is the parsed value. */
  body?: z.ZodTypeAny;
  /** Validated before the body. */
  params?: z.AnyZodObject;
  /** Parsed by the handler (parseOrThrow), which needs its typed value. */
  query?: z.AnyZodObject;
  /** The answer says what the request cost (X-Points-Charged, X-Points-Held). */
  cost?: true;
  response?: z.ZodTypeAny;
  /** Request headers the route reads, with what they do. */
  headers?: Record<string, string>;
  /** The error types the route's own code answers; those of its authentication and body are added by the document. */
  errors?: ErrorType[];
  /** Answers that are neither its success nor an error type, each with its own JSON body (a probe's 503). */
  otherAnswers?: Record<number, { description: string; schema: z.ZodTypeAny }>;
  /** The success answer when it is not JSON only. */
  success?: 'png' | 'artifact' | 'sse' | 'websocket' | 'prometheus' | 'events';
  /** The answer tells its steps' durations in Server-Timing (src/http/server-timing.ts). */
  serverTiming?: true;
  /** Convenience routes name their task in X-Task-Id. */
  taskHeader?: boolean;
  /** Errors in Firecrawl's shape and statuses (src/compat/firecrawl.ts). */
  firecrawl?: boolean;
  /** Errors as OpenAI's error object (src/chat/openai-format.ts). */
  openai?: boolean;
  /** Checks run after authentication and before validation (a restricted key is refused before its body is read). */
  use?: RequestHandler[];
  /**
   * Mounted at this pattern instead of `path` when `path` cannot say it (a parameter holding slashes);
   * its groups are unnamed, so `params` then only documents them and the handler reads req.params[0].
   */
  expressPath?: RegExp;
  /**
   * After authentication, checks and validation; absent when the app does not answer the route (the solver
   * socket's upgrade).
   */
  handler?: RequestHandler | RequestHandler[];
}

export const route = (spec: Route): Route => spec;

/** The same route at several paths (the Firecrawl paths), each documented and mounted. */
export const routesAt = (paths: string[], spec: Omit<Route, 'path'>): Route[] =>
  paths.map((path) => ({ ...spec, path }));

export const expressPathOf = (path: string) => path.replace(/\{([^}]+)\}/g, ':$1');

/**
 * Mounts the routes in their order on `router` (with any guards it already has): authentication, checks,
 * validation, handler.
 */
export function mount(
  routes: Route[],
  authentication: Record<Auth, RequestHandler[]>,
  router: Router = Router(),
): Router {
  for (const entry of routes) {
    if (!entry.handler) continue;
    router[entry.method](
      entry.expressPath ?? expressPathOf(entry.path),
      ...authentication[entry.auth],
      ...(entry.serverTiming ? [markStep('auth')] : []),
      ...(entry.use ?? []),
      ...(entry.params && !entry.expressPath ? [validateParams(entry.params)] : []),
      ...(entry.body ? [validateBody(entry.body)] : []),
      ...(entry.serverTiming ? [markStep('validate')] : []),
      ...[entry.handler].flat(),
    );
  }
  return router;
}

/** The methods declared for a concrete request path (a 405's Allow header), empty when none is. */
export function declaredMethods(routes: Route[], requestPath: string): string[] {
  const matches = (template: string) => new RegExp(`^${template.replace(/\{[^}]+\}/g, '[^/]+')}$`).test(requestPath);
  // A concrete path is matched before a templated one (OpenAPI's rule): /v2/crawl/active is not /v2/crawl/{id}.
  const concrete = routes.filter((entry) => entry.path === requestPath);
  const candidates = concrete.length > 0 ? concrete : routes.filter((entry) => matches(entry.path));
  return [...new Set(candidates.map((entry) => entry.method.toUpperCase()))];
}

// Error sets several routes share.
/** Creating a task holds points and starts its workflow, or is refused when the queue for its type is full. */
export const CREATES_TASK: ErrorType[] = [
  'insufficient_balance',
  'key_spend_limit_reached',
  'service_unavailable',
  'solvers_busy',
];
/** A convenience route also needs an online solver and waits for the verdict (which a cancel may end). */
export const RUNS_TASK: ErrorType[] = [
  ...CREATES_TASK,
  'no_solver_available',
  'solver_checks_unfunded',
  'solver_failed',
  'task_timeout',
  'task_cancelled',
];
/** A convenience or compatibility route that takes an Idempotency-Key. */
export const IDEMPOTENT_RUN: ErrorType[] = ['idempotency_key_reused', 'result_expired', ...RUNS_TASK];

/**
 * The same key with the same operation and body answers the first request's task(s); with another, 422
 * idempotency_key_reused.
 */
export const idempotent = (first: string, firecrawl = false): Record<string, string> => ({
  'Idempotency-Key':
    `Sent again with the same body, ${first}; with another body (or at another operation), 422 ` +
    `idempotency_key_reused and nothing is done`,
  ...(firecrawl ? { 'X-Idempotency-Key': "The same as Idempotency-Key (Firecrawl's SDKs send it)" } : {}),
});
