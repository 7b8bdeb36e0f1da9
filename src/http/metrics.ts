import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Request, RequestHandler } from 'express';
import { ApiError } from '../errors';
import type { Logger } from '../logger';
import type { Readiness } from '../services/readiness';
import { httpDuration, httpRequests } from '../metrics/metrics';
import { metricsText } from '../services/metrics-scrape';
import { route, type Route } from './route';

/**
 * /metrics over HTTP: the request figures every API route contributes, the access check (the metrics
 * token or the admin key), the route on API nodes, and the small listener of a worker process (which
 * also answers the probes, /health and /ready).
 */

export const METRICS_PATH = '/metrics';

/** The route pattern that answered (`/v1/tasks/:task_id`), never the path itself, so the label stays bounded. */
export function routeLabel(req: Request): string {
  const route = req.route as { path?: string | string[] } | undefined;
  if (!route?.path) return 'unmatched';
  // A route served at several literal paths (the Firecrawl paths) is labelled with the one asked for.
  const path = Array.isArray(route.path)
    ? (route.path.find((entry) => `${req.baseUrl}${entry}` === req.path) ?? route.path.join('|'))
    : route.path;
  return `${req.baseUrl}${path}`;
}

/** Counts every answered request and its latency, by method, route pattern and status. */
export function httpMetrics(): RequestHandler {
  return (req, res, next) => {
    const started = process.hrtime.bigint();
    res.on('finish', () => {
      const labels = { method: req.method, route: routeLabel(req), status: String(res.statusCode) };
      httpRequests.inc(labels);
      httpDuration.observe(labels, Number(process.hrtime.bigint() - started) / 1e9);
    });
    next();
  };
}

const digest = (value: string) => crypto.createHash('sha256').update(value).digest();

/**
 * Who may read /metrics: a bearer of METRICS_TOKEN (what a Prometheus server is given, so it never holds
 * the key that mints points) or of the admin key, offered in Authorization (with or without `Bearer `),
 * X-Admin-API-Key or ADMIN_API_KEY; every offered value is compared in constant time. With neither
 * configured, /metrics is off. Returns the refusal, or null when admitted.
 */
export function metricsRefusal(
  keys: { metricsToken?: string; adminApiKey?: string },
  header: (name: string) => string | undefined,
): ApiError | null {
  const expected = [keys.metricsToken, keys.adminApiKey].filter((key): key is string => Boolean(key)).map(digest);
  if (expected.length === 0) {
    return new ApiError(
      'metrics_disabled',
      'Metrics are off on this deployment: set METRICS_TOKEN (or ADMIN_API_KEY) to enable ' + '/metrics.',
    );
  }
  const authorization = header('authorization');
  const bearer = authorization
    ? (/^Bearer\s+(.+)$/i.exec(authorization.trim())?.[1]?.trim() ?? authorization)
    : undefined;
  const offered = [bearer, header('x-admin-api-key'), header('admin_api_key')].filter(
    (value): value is string => typeof value === 'string' && value.length > 0,
  );
  if (offered.length === 0) {
    return new ApiError(
      'metrics_authentication_required',
      'Send the metrics token as "Authorization: Bearer <METRICS_TOKEN>" (the admin key is ' + 'accepted too).',
    );
  }
  let matched = false;
  for (const value of offered)
    for (const key of expected) matched = crypto.timingSafeEqual(digest(value), key) || matched;
  return matched ? null : new ApiError('invalid_metrics_token', 'The metrics token is not valid.');
}

/** The metrics token or the admin key, as a route's authentication (the `metrics` auth of src/http/route.ts). */
export function requireMetricsAccess(keys: { metricsToken?: string; adminApiKey?: string }): RequestHandler {
  return (req, _res, next) => next(metricsRefusal(keys, (name) => req.header(name)) ?? undefined);
}

/** GET /metrics on an API node. */
export function metricsRoutes(): Route[] {
  return [
    route({
      method: 'get',
      path: METRICS_PATH,
      summary:
        'Prometheus figures of this node (text exposition format), for METRICS_TOKEN or the admin ' +
        'key (docs/metrics.md)',
      tag: 'health',
      auth: 'metrics',
      success: 'prometheus',
      handler: async (_req, res) => {
        const { contentType, body } = await metricsText();
        res.type(contentType).send(body);
      },
    }),
  ];
}

export interface MetricsListener {
  url: string;
  close(): Promise<void>;
}

/** The probes a worker's listener answers besides /metrics, without authentication, as an API node does. */
const WORKER_PROBE_PATHS = ['/health', '/ready', '/readyz'];

/**
 * The worker's own listener: GET /metrics, with the same access rule and error bodies as an API node's,
 * and the probes: /health (liveness) and /ready (or /readyz; 503 when the worker cannot serve).
 */
export async function startMetricsListener(options: {
  host: string;
  port: number;
  keys: { metricsToken?: string; adminApiKey?: string };
  logger: Logger;
  readiness: Readiness;
}): Promise<MetricsListener> {
  const server = http.createServer((req, res) => {
    const answer = (status: number, contentType: string, body: string, headers: Record<string, string> = {}) => {
      res
        .writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(body), ...headers })
        .end(req.method === 'HEAD' ? undefined : body);
    };
    const path = (req.url ?? '/').split('?')[0];
    const readable = req.method === 'GET' || req.method === 'HEAD';
    if (readable && path === '/health')
      return answer(200, 'application/json', JSON.stringify({ status: 'ok', version: '0.1.0' }));
    if (readable && WORKER_PROBE_PATHS.includes(path)) {
      options.readiness
        .report()
        .then(({ ready, body }) =>
          answer(ready ? 200 : 503, 'application/json', JSON.stringify(body), { 'cache-control': 'no-store' }),
        );
      return;
    }
    if (path !== METRICS_PATH || !readable) {
      const error = new ApiError(
        'not_found',
        `No route ${req.method} ${path}; this listener serves GET ${[METRICS_PATH, ...WORKER_PROBE_PATHS].join(', ')} ` +
          `only.`,
      );
      return answer(error.status, 'application/json', JSON.stringify(error.toBody()));
    }
    const refusal = metricsRefusal(options.keys, (name) => {
      const value = req.headers[name];
      return Array.isArray(value) ? value[0] : value;
    });
    if (refusal) return answer(refusal.status, 'application/json', JSON.stringify(refusal.toBody()));
    metricsText().then(
      ({ contentType, body }) => answer(200, contentType, body),
      (error: unknown) => {
        options.logger.error({ err: error }, 'metrics could not be rendered');
        const failure = new ApiError('internal_error', 'The metrics could not be rendered.');
        answer(failure.status, 'application/json', JSON.stringify(failure.toBody()));
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const url = `http://${options.host === '0.0.0.0' ? '127.0.0.1' : options.host}:${port}${METRICS_PATH}`;
  options.logger.info({ url }, 'worker metrics listening');
  return {
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
