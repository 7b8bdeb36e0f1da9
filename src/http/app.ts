import path from 'node:path';
import express, { type Express, type RequestHandler, type Router } from 'express';
import swaggerUiDist from 'swagger-ui-dist';
import { AddressLimits } from './address-limits';
import type { AppDeps } from './deps';
import { httpMetrics, metricsRoutes, requireMetricsAccess } from './metrics';
import { errorHandler, jsonBody, notFound, requestContext } from './middleware';
import { openApiDocument } from './openapi';
import { installRateLimit } from './rate-limit';
import { requireAccount, requireAdmin } from './auth';
import { mount, type Auth } from './route';
import { accountRoutes } from './routes/account';
import { adminRoutes } from './routes/admin';
import { chatRoutes, OPENAI_PATHS, openAiErrorDialect } from './routes/chat';
import { activeCrawlPaths, crawlRoutes } from './routes/crawl';
import { COMPAT_SCRAPER_PREFIX, compatRoutes, FIRECRAWL_V2_ROOT, firecrawlErrorDialect } from './routes/compat';
import { consoleRoutes } from './routes/console';
import { canarySites } from './routes/canary';
import { healthRoutes } from './routes/health';
import { limitRoutes } from './routes/limits';
import { modelRoutes } from './routes/models';
import { solverRoutes } from './routes/solver';
import { solverToolRoutes } from './routes/solver-tools';
import { taskRoutes } from './routes/tasks';

const DOCS_PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><title>Task Marketplace API</title>
<link rel="stylesheet" href="/docs/assets/swagger-ui.css"></head>
<body><div id="ui"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script>window.ui = SwaggerUIBundle({ url: '/openapi.json', dom_id: '#ui' });</script>
</body></html>`;

/** The Express app: common middleware, every route module, then 404 and the error renderer. */
export function createApp(deps: AppDeps, extraRouters: Router[] = []): Express {
  const app = express();
  app.disable('x-powered-by');
  const addresses = new AddressLimits({ count: deps.limits.countAddressRequest, config: deps.config });
  // X-Forwarded-For is believed only from the proxies TRUST_PROXY names; req.ip is the socket's peer otherwise.
  app.set('trust proxy', addresses.trusted);
  // Canary host names are websites, not the API: they are answered before any of the API's middleware.
  app.use(canarySites(deps));
  app.use(httpMetrics());
  installRateLimit(app, {
    count: deps.limits.countKeyedRequest,
    limitPerMinute: deps.config.rateLimitPerMinute,
    addresses,
  });
  app.use(requestContext(deps.logger));
  app.use(jsonBody(deps.config.bodyLimitBytes));

  // Each module's routes on a router of its own, in this order; the same lists make the OpenAPI document.
  const crawl = crawlRoutes(deps);
  const modules = [
    healthRoutes(deps),
    metricsRoutes(),
    accountRoutes(deps),
    modelRoutes(deps),
    adminRoutes(deps),
    limitRoutes(deps),
    taskRoutes(deps),
    solverRoutes(deps),
    solverToolRoutes(deps),
    chatRoutes(deps),
    compatRoutes(deps),
    crawl,
  ];
  const routes = modules.flat();
  const authentication: Record<Auth, RequestHandler[]> = {
    none: [],
    bearer: [requireAccount()],
    admin: [requireAdmin(deps.config.adminApiKey)],
    metrics: [requireMetricsAccess({ metricsToken: deps.config.metricsToken, adminApiKey: deps.config.adminApiKey })],
  };

  app.get('/openapi.json', (_req, res) => {
    res.json(openApiDocument(routes));
  });
  app.use('/docs/assets', express.static(path.resolve(swaggerUiDist.getAbsoluteFSPath()), { index: false }));
  app.get(['/docs', '/docs/'], (_req, res) => {
    res.type('html').send(DOCS_PAGE);
  });

  app.use(consoleRoutes());
  for (const list of modules) {
    // The crawl routes follow the guards of their `active` paths on one router, which those guards leave.
    app.use(mount(list, authentication, list === crawl ? activeCrawlPaths() : undefined));
  }
  for (const router of extraRouters) app.use(router);

  app.use(notFound(routes));
  app.use([COMPAT_SCRAPER_PREFIX, FIRECRAWL_V2_ROOT], firecrawlErrorDialect());
  app.use(OPENAI_PATHS, openAiErrorDialect());
  app.use(errorHandler());
  return app;
}
