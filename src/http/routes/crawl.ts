import crypto from 'node:crypto';
import { Router, type Request, type Response } from 'express';
import type { ErrorType } from '../../errors';
import { planScrapeV2 } from '../../compat/firecrawl-v2';
import { withScheme, timeoutSecondsOf } from '../../compat/firecrawl';
import { extractLinks, isValidSelector } from '../../compat/page-html';
import { CRAWL_EVENTS, type CrawlWebhook } from '../../contract/crawl-events';
import { fetchDiscoveryDocument, sitemapUrls, type CrawlOptions } from '../../crawl/runner';
import { parseRobots, NO_RULES } from '../../crawl/robots';
import { invalidPattern, normaliseUrl } from '../../crawl/scope';
import type { CrawlKind, CrawlRow } from '../../db/crawls';
import { ApiError } from '../../errors';
import { unsupportedOption } from '../../compat/scrape-options';
import { CRAWL_PAGE_DEFAULT, CrawlStatusQuery } from '../../schemas/queries';
import {
  BatchScrapeV1Body,
  BatchScrapeV2Body,
  CrawlV1Body,
  CrawlV2Body,
  JobIdParams,
  MapBody,
  type BatchScrapeV1Request,
  type BatchScrapeV2Request,
  type CrawlV1Request,
  type CrawlV2Request,
  type CrawlWebhookRequest,
  type MapRequest,
} from '../../schemas/requests';
import { crawlWorkflowId } from '../../contract/workflows';
import { accountOf } from '../auth';
import type { AppDeps } from '../deps';
import { idempotent, routesAt, RUNS_TASK, type Route } from '../route';
import { parseOrThrow, RequestValidationError, type ValidationDetail } from '../validation';
import { idempotencyOf } from '../idempotency';
import { idempotencyKeyReused, insufficientBalance, noSolverError, runWebTask } from '../web-tasks';
import { COMPAT_SCRAPER_PREFIX, FIRECRAWL_ROUTE, FIRECRAWL_V2_ROOT } from './compat';
import { assertAllowedTarget } from '../target-policy';

/**
 * Firecrawl's crawl, batch scrape and map (docs/crawl.md): a crawl or batch scrape is a job run by a
 * crawl workflow whose pages are ordinary web tasks; its status pages its documents with `next`. v2 at
 * both the compatibility prefix and /v2 (firecrawl-py 4.x drops the prefix), v1 at the prefix.
 */

// Firecrawl keeps a job's results for a day; a shorter result retention ends the job sooner, before its first
// document goes.
const JOB_TTL_SECONDS = 24 * 3600;
// Firecrawl's defaults.
const CRAWL_DEFAULT_LIMIT = 10_000;
const CRAWL_DEFAULT_CONCURRENCY = 10;
const MAP_DEFAULT_LIMIT = 5000;
// A status answer's documents stop at this many bytes of JSON (Firecrawl's own cap); `next` has the rest.
const STATUS_MAX_BYTES = 10 * 1024 * 1024;

const v2 = (path: string) => [`${COMPAT_SCRAPER_PREFIX}/v2${path}`, `${FIRECRAWL_V2_ROOT}${path}`];
const v1 = (path: string) => `${COMPAT_SCRAPER_PREFIX}/v1${path}`;

const jobNotFound = (id: string) =>
  new ApiError('job_not_found', `No crawl or batch scrape "${id}" on this account (or it has expired).`, { id });

/** Where this request's version of the API is served, as the client reached it. */
function apiBase(req: Request, deps: AppDeps): string {
  const origin = `${req.protocol}://${req.get('host')}`;
  const prefix = req.originalUrl.startsWith(COMPAT_SCRAPER_PREFIX) ? COMPAT_SCRAPER_PREFIX : '';
  return `${origin}${prefix}`;
}

/** The formats a crawl's pages are scraped for: any the page's HTML gives (one fetch per page). */
function crawlFormats(formats: readonly string[], plan: { screenshot: unknown } | null): string[] {
  if (plan?.screenshot || formats.some((format) => format.startsWith('screenshot'))) {
    throw new ApiError(
      'unsupported_format',
      'The "screenshot" format is not supported in crawls and batch scrapes by this service; they ' +
        'serve markdown, html, rawHtml and links. Scrape single pages for screenshots.',
      { format: 'screenshot' },
    );
  }
  return [...formats];
}

function selectorProblems(
  fields: Record<string, readonly string[] | null | undefined>,
  loc: (string | number)[],
): ValidationDetail[] {
  const problems: ValidationDetail[] = [];
  for (const [field, selectors] of Object.entries(fields)) {
    (selectors ?? []).forEach((selector, index) => {
      if (!isValidSelector(selector))
        problems.push({
          type: 'value_error',
          loc: [...loc, field, index],
          msg: 'Value error, not a valid CSS selector',
          input: selector,
        });
    });
  }
  return problems;
}

type ScrapeSettings = CrawlOptions['scrape'];

/**
 * A job's pages are fetched, never rendered: the scrape options that need a browser or a located solver
 * change the answer and are refused, naming them, rather than ignored.
 */
const BROWSER_ONLY_OPTIONS = ['actions', 'waitFor', 'location'] as const;

function assertFetchableOptions(options: Record<string, unknown> | null | undefined): void {
  for (const option of BROWSER_ONLY_OPTIONS) {
    const value = options?.[option];
    const given = Array.isArray(value) ? value.length > 0 : value !== undefined && value !== null && value !== 0;
    if (given)
      throw unsupportedOption(
        option,
        `The "${option}" option is not supported in crawls and batch scrapes by this service: their ` +
          `pages are fetched, not rendered. Scrape single pages for it.`,
      );
  }
}

type CacheSettings = { maxAge?: number | null; storeInCache?: boolean | null };

/** The page cache's options as a job keeps them (docs/crawl.md, "Page cache"). */
function cacheSettings(options: CacheSettings | null | undefined): Pick<ScrapeSettings, 'maxAge' | 'storeInCache'> {
  return {
    ...(options?.maxAge !== undefined && options.maxAge !== null ? { maxAge: options.maxAge } : {}),
    ...(options?.storeInCache === false ? { storeInCache: false } : {}),
  };
}

/** v2 scrape options (a crawl's scrapeOptions, a batch scrape's body) as a job's page settings. */
function scrapeSettingsV2(
  options:
    | ({
        formats?: unknown[] | null;
        onlyMainContent?: boolean | null;
        includeTags?: string[] | null;
        excludeTags?: string[] | null;
        timeout?: number | null;
      } & CacheSettings)
    | null
    | undefined,
  loc: (string | number)[],
): ScrapeSettings {
  assertFetchableOptions(options as Record<string, unknown> | null | undefined);
  const problems = selectorProblems({ includeTags: options?.includeTags, excludeTags: options?.excludeTags }, loc);
  if (problems.length > 0) throw new RequestValidationError(problems);
  const plan = planScrapeV2({ url: '', ...(options ?? {}) } as never);
  return {
    formats: crawlFormats(plan.formats, plan),
    onlyMainContent: plan.onlyMainContent,
    ...(options?.includeTags ? { includeTags: options.includeTags } : {}),
    ...(options?.excludeTags ? { excludeTags: options.excludeTags } : {}),
    ...(timeoutSecondsOf(options?.timeout) ? { timeoutSeconds: timeoutSecondsOf(options?.timeout) } : {}),
    ...cacheSettings(options),
  };
}

function scrapeSettingsV1(
  options:
    | ({
        formats?: string[] | null;
        onlyMainContent?: boolean | null;
        includeTags?: string[] | null;
        excludeTags?: string[] | null;
        timeout?: number | null;
      } & CacheSettings)
    | null
    | undefined,
  loc: (string | number)[],
): ScrapeSettings {
  assertFetchableOptions(options as Record<string, unknown> | null | undefined);
  const problems = selectorProblems({ includeTags: options?.includeTags, excludeTags: options?.excludeTags }, loc);
  if (problems.length > 0) throw new RequestValidationError(problems);
  const formats = options?.formats && options.formats.length > 0 ? options.formats : ['markdown'];
  return {
    formats: crawlFormats(formats, null),
    onlyMainContent: options?.onlyMainContent ?? true,
    ...(options?.includeTags ? { includeTags: options.includeTags } : {}),
    ...(options?.excludeTags ? { excludeTags: options.excludeTags } : {}),
    ...(timeoutSecondsOf(options?.timeout) ? { timeoutSeconds: timeoutSecondsOf(options?.timeout) } : {}),
    ...cacheSettings(options),
  };
}

function checkPatterns(patterns: { includePaths?: string[] | null; excludePaths?: string[] | null }): void {
  for (const field of ['includePaths', 'excludePaths'] as const) {
    const invalid = invalidPattern(patterns[field] ?? []);
    if (invalid) {
      throw new RequestValidationError([
        {
          type: 'value_error',
          loc: ['body', field, (patterns[field] ?? []).indexOf(invalid.pattern)],
          msg: `Value error, not a valid regular expression: ${invalid.message}`,
          input: invalid.pattern,
        },
      ]);
    }
  }
}

/**
 * `active` is a path of its own, not a job id: another method there is a 405, not a cancel of job "active",
 * and OPTIONS lists its own methods, not those of /crawl/{id}. The crawl routes are mounted on this router,
 * after these.
 */
export function activeCrawlPaths(): Router {
  const router = Router();
  const activePaths = [...v2('/crawl/active'), v1('/crawl/active')];
  router.delete(activePaths, (_req, _res, next) => next('router'));
  router.options(activePaths, (_req, res) => {
    res.set('Allow', 'GET, HEAD').type('text').send('GET, HEAD');
  });
  return router;
}

const START_ERRORS: ErrorType[] = [
  'unsupported_format',
  'unsupported_option',
  'domain_blocked',
  'insufficient_balance',
  'no_solver_available',
  'solver_checks_unfunded',
  'service_unavailable',
  'idempotency_key_reused',
];
const MAP_ERRORS: ErrorType[] = ['domain_blocked', ...RUNS_TASK];
const JOB_KEY = idempotent("answers with the first request's job", true);

export function crawlRoutes(deps: AppDeps): Route[] {
  /** What every job needs before it exists: a fetch solver online, and points for its first page. */
  async function assertCanRun(res: Response): Promise<void> {
    if (!(await deps.tasks.solverOnline('proxy_fetch'))) throw await noSolverError(deps.tasks, 'proxy_fetch');
    const balance = await deps.ledger.getBalance(accountOf(res).account_id);
    if (!balance || Number(balance.available_points) < Number(deps.config.defaultWebTaskPricePoints))
      throw insufficientBalance(deps.config.defaultWebTaskPricePoints);
  }

  /**
   * The job's webhook as stored: Firecrawl's defaults filled in, its URL judged by the domain policy as a task's
   * webhook is.
   */
  async function jobWebhook(webhook: CrawlWebhookRequest | null | undefined): Promise<CrawlWebhook | null> {
    if (!webhook) return null;
    const given = typeof webhook === 'string' ? { url: webhook } : webhook;
    await assertAllowedTarget(
      deps.domainPolicy,
      given.url,
      typeof webhook === 'string' ? ['body', 'webhook'] : ['body', 'webhook', 'url'],
    );
    return {
      url: given.url,
      headers: ('headers' in given && given.headers) || {},
      metadata: ('metadata' in given && given.metadata) || {},
      events: ('events' in given && given.events) || [...CRAWL_EVENTS],
    };
  }

  /** Starts the job's workflow; one already started (the same job asked for again) is left running. */
  async function startWorkflow(crawl: {
    crawl_id: string;
    account_id: string;
    kind: string;
    url: string | null;
  }): Promise<void> {
    if ((await deps.crawls.start(crawl)) === 'not_started') {
      throw new ApiError('service_unavailable', 'The job could not be started; nothing was charged. Retry shortly.', {
        id: crawl.crawl_id,
      });
    }
  }

  /**
   * The job an Idempotency-Key (or X-Idempotency-Key) started before, sent again with the same request:
   * its id, its workflow started if it is not (its first request ended between the two); null without
   * such a key. The key with another request is 422 idempotency_key_reused.
   */
  async function replayed(req: Request, res: Response, operation: string): Promise<string | null> {
    const idempotency = idempotencyOf(req, operation);
    if (!idempotency) return null;
    const found = await deps.crawls.crawlByIdempotencyKey(accountOf(res).account_id, idempotency);
    if (!found) return null;
    if (found.kind === 'idempotency_key_reused') throw idempotencyKeyReused();
    if (found.crawl.status === 'scraping') await startWorkflow(found.crawl);
    return found.crawl.crawl_id;
  }

  async function startJob(
    req: Request,
    res: Response,
    input: {
      kind: CrawlKind;
      operation: string;
      url: string | null;
      options: CrawlOptions;
      pages: Array<{ url: string; depth: number }>;
      webhook: CrawlWebhookRequest | null | undefined;
    },
  ): Promise<string> {
    const crawlId = crypto.randomUUID();
    const created = await deps.crawls.create({
      crawlId,
      accountId: accountOf(res).account_id,
      keyId: accountOf(res).key_id,
      kind: input.kind,
      url: input.url,
      options: input.options as never,
      webhook: await jobWebhook(input.webhook),
      idempotency: idempotencyOf(req, input.operation),
      workflowId: crawlWorkflowId(crawlId),
      ttlSeconds: Math.min(JOB_TTL_SECONDS, deps.config.resultRetentionSeconds),
      pages: input.pages,
    });
    if (created.kind === 'idempotency_key_reused') throw idempotencyKeyReused();
    if (created.kind === 'existing') return created.crawl.crawl_id;
    await startWorkflow({ crawl_id: crawlId, account_id: accountOf(res).account_id, kind: input.kind, url: input.url });
    return crawlId;
  }

  function crawlOptions(
    body: {
      limit?: number | null;
      maxDiscoveryDepth?: number | null;
      includePaths?: string[] | null;
      excludePaths?: string[] | null;
      allowSubdomains?: boolean | null;
      allowExternalLinks?: boolean | null;
      ignoreQueryParameters?: boolean | null;
      regexOnFullURL?: boolean | null;
      delay?: number | null;
      maxConcurrency?: number | null;
    },
    rest: { crawlEntireDomain: boolean; sitemap: CrawlOptions['sitemap']; scrape: ScrapeSettings },
  ): CrawlOptions {
    checkPatterns(body);
    return {
      limit: body.limit ?? CRAWL_DEFAULT_LIMIT,
      maxDiscoveryDepth: body.maxDiscoveryDepth ?? null,
      includePaths: body.includePaths ?? [],
      excludePaths: body.excludePaths ?? [],
      crawlEntireDomain: rest.crawlEntireDomain,
      allowSubdomains: body.allowSubdomains ?? false,
      allowExternalLinks: body.allowExternalLinks ?? false,
      ignoreQueryParameters: body.ignoreQueryParameters ?? false,
      regexOnFullURL: body.regexOnFullURL ?? false,
      sitemap: rest.sitemap,
      ignoreRobotsTxt: false,
      delay: body.delay || null,
      maxConcurrency: body.maxConcurrency ?? CRAWL_DEFAULT_CONCURRENCY,
      scrape: rest.scrape,
    };
  }

  async function startCrawl(
    req: Request,
    res: Response,
    body: { url: string; webhook?: CrawlWebhookRequest | null },
    options: CrawlOptions,
    version: 'v1' | 'v2',
  ) {
    const operation = `crawl:${version}`;
    const replay = await replayed(req, res, operation);
    if (replay) return replay;
    const start = normaliseUrl(withScheme(body.url), options.ignoreQueryParameters);
    if (!start)
      throw new RequestValidationError([
        {
          type: 'url_parsing',
          loc: ['body', 'url'],
          msg: 'Input should be a valid URL, relative URL without a base',
          input: body.url,
        },
      ]);
    await assertAllowedTarget(deps.domainPolicy, start, ['body', 'url']);
    await assertCanRun(res);
    return startJob(req, res, { kind: 'crawl', operation, url: start, options, pages: [], webhook: body.webhook });
  }

  const crawlV2 = async (req: Request, res: Response) => {
    const body = req.body as CrawlV2Request;
    const options = crawlOptions(body, {
      crawlEntireDomain: body.crawlEntireDomain ?? false,
      sitemap: body.sitemap ?? 'include',
      scrape: scrapeSettingsV2(body.scrapeOptions, ['body', 'scrapeOptions']),
    });
    const id = await startCrawl(req, res, body, options, 'v2');
    res.json({ success: true, id, url: `${apiBase(req, deps)}/v2/crawl/${id}` });
  };

  const crawlV1 = async (req: Request, res: Response) => {
    const body = req.body as CrawlV1Request;
    const options = crawlOptions(
      { ...body, maxDiscoveryDepth: body.maxDiscoveryDepth ?? body.maxDepth },
      {
        crawlEntireDomain: body.crawlEntireDomain ?? body.allowBackwardLinks ?? false,
        sitemap: body.ignoreSitemap ? 'skip' : 'include',
        scrape: scrapeSettingsV1(body.scrapeOptions, ['body', 'scrapeOptions']),
      },
    );
    const id = await startCrawl(req, res, body, options, 'v1');
    res.json({ success: true, id, url: `${apiBase(req, deps)}/v1/crawl/${id}` });
  };

  /**
   * A batch scrape's URLs: each must parse and pass the domain policy, or (ignoreInvalidURLs) is left out and
   * named.
   */
  async function batchPages(urls: string[], ignoreInvalid: boolean) {
    const pages: Array<{ url: string; depth: number }> = [];
    const invalid: string[] = [];
    const seen = new Set<string>();
    for (const [index, raw] of urls.entries()) {
      const url = normaliseUrl(withScheme(raw), false);
      const allowed = url ? (await deps.domainPolicy.check(url)).allowed : false;
      if (!url || !allowed) {
        if (ignoreInvalid) {
          invalid.push(raw);
          continue;
        }
        if (!url)
          throw new RequestValidationError([
            {
              type: 'url_parsing',
              loc: ['body', 'urls', index],
              msg: 'Input should be a valid URL, relative URL without a base',
              input: raw,
            },
          ]);
        await assertAllowedTarget(deps.domainPolicy, url, ['body', 'urls', index]);
      }
      if (seen.has(url!)) continue;
      seen.add(url!);
      pages.push({ url: url!, depth: 0 });
    }
    return { pages, invalid };
  }

  async function startBatch(
    req: Request,
    res: Response,
    body: { urls: string[]; ignoreInvalidURLs?: boolean | null; webhook?: CrawlWebhookRequest | null },
    scrape: ScrapeSettings,
    maxConcurrency: number | null | undefined,
    version: 'v1' | 'v2',
  ) {
    const ignoreInvalid = body.ignoreInvalidURLs ?? false;
    const operation = `batch_scrape:${version}`;
    const replay = await replayed(req, res, operation);
    // The same body leaves out the same URLs.
    const { pages, invalid } = await batchPages(body.urls, ignoreInvalid);
    if (pages.length === 0)
      throw new RequestValidationError([
        { type: 'value_error', loc: ['body', 'urls'], msg: 'Value error, no valid URL to scrape', input: body.urls },
      ]);
    let id = replay;
    if (!id) {
      await assertCanRun(res);
      const options = {
        ...crawlOptions({ maxConcurrency }, { crawlEntireDomain: false, sitemap: 'skip', scrape }),
        limit: pages.length,
      };
      id = await startJob(req, res, {
        kind: 'batch_scrape',
        operation,
        url: null,
        options,
        pages,
        webhook: body.webhook,
      });
    }
    res.json({
      success: true,
      id,
      url: `${apiBase(req, deps)}/${version}/batch/scrape/${id}`,
      ...(ignoreInvalid ? { invalidURLs: invalid } : {}),
    });
  }

  const batchV2 = async (req: Request, res: Response) => {
    const body = req.body as BatchScrapeV2Request;
    await startBatch(req, res, body, scrapeSettingsV2(body, ['body']), body.maxConcurrency, 'v2');
  };

  const batchV1 = async (req: Request, res: Response) => {
    const body = req.body as BatchScrapeV1Request;
    await startBatch(req, res, body, scrapeSettingsV1(body, ['body']), null, 'v1');
  };

  const ownJob = async (req: Request, res: Response): Promise<CrawlRow> => {
    const id = req.params.id as string;
    const crawl = await deps.crawls.getCrawl(id, accountOf(res).account_id);
    if (!crawl || Date.parse(crawl.expires_at) < Date.now() || crawl.documents_expired_at) throw jobNotFound(id);
    return crawl;
  };

  /** Firecrawl's status: counts, cost, and a page of documents with `next` while more are ready now. */
  async function status(req: Request, res: Response, path: string) {
    const crawl = await ownJob(req, res);
    const query = parseOrThrow(CrawlStatusQuery, req.query, ['query']);
    const skip = query.skip ?? 0;
    const limit = query.limit ?? CRAWL_PAGE_DEFAULT;
    const [counts, cost, documents] = await Promise.all([
      deps.crawls.crawlCounts(crawl.crawl_id),
      deps.crawls.crawlCost(crawl.crawl_id),
      deps.crawls.crawlDocuments(crawl.crawl_id, skip, limit),
    ]);
    let bytes = 0;
    const data: typeof documents = [];
    for (const document of documents) {
      bytes += JSON.stringify(document).length;
      if (data.length > 0 && bytes > STATUS_MAX_BYTES) break;
      data.push(document);
    }
    // Only documents ready now are paged to: a `next` to a page that is not there yet would be followed at once.
    const more = skip + data.length < counts.completed;
    res.json({
      success: true,
      status: crawl.status,
      completed: counts.completed,
      total: counts.total - counts.cancelled,
      creditsUsed: counts.completed,
      expiresAt: crawl.expires_at,
      ...(more
        ? {
            next: `${apiBase(req, deps)}${path}/${crawl.crawl_id}?skip=${skip + data.length}${query.limit ? `&limit=${query.limit}` : ''}`,
          }
        : {}),
      data,
      pointsCharged: cost.charged_points,
      pointsHeld: cost.held_points,
      ...(crawl.error ? { error: crawl.error } : {}),
    });
  }

  /** Stops the job: pending pages at once, running ones' tasks by their cancel; only pages done are charged. */
  async function cancel(req: Request, res: Response) {
    const crawl = await ownJob(req, res);
    const now = await deps.crawls.cancel(crawl.crawl_id);
    res.json({ success: true, status: now?.status === 'cancelled' ? 'cancelled' : now?.status });
  }

  async function errors(req: Request, res: Response) {
    const crawl = await ownJob(req, res);
    const failed = await deps.crawls.crawlErrors(crawl.crawl_id);
    res.json({
      success: true,
      errors: failed.map((page) => ({
        id: page.task_id ?? String(page.page_id),
        timestamp: page.finished_at,
        url: page.url,
        code: page.error.code,
        error: page.error.message,
      })),
      robotsBlocked: crawl.robots_blocked,
    });
  }

  async function active(_req: Request, res: Response, kind: CrawlKind) {
    const crawls = await deps.crawls.activeCrawls(accountOf(res).account_id, kind);
    res.json({
      success: true,
      crawls: crawls.map((crawl) => {
        const { _robots: _rules, ...options } = crawl.options as CrawlOptions;
        return { id: crawl.crawl_id, teamId: crawl.account_id, url: crawl.url, created_at: crawl.created_at, options };
      }),
    });
  }

  /**
   * Map: the site's URLs from its sitemaps (fetched by the service) and the start page's links (one
   * proxy_fetch task, billed as any), on the site (and its subdomains), deduplicated, the ones matching
   * `search` first.
   */
  async function map(req: Request, res: Response): Promise<string[]> {
    const body = req.body as MapRequest;
    const start = normaliseUrl(withScheme(body.url), false);
    if (!start)
      throw new RequestValidationError([
        {
          type: 'url_parsing',
          loc: ['body', 'url'],
          msg: 'Input should be a valid URL, relative URL without a base',
          input: body.url,
        },
      ]);
    await assertAllowedTarget(deps.domainPolicy, start, ['body', 'url']);
    const sitemap = body.sitemap ?? (body.sitemapOnly ? 'only' : body.ignoreSitemap ? 'skip' : 'include');
    const ignoreQuery = body.ignoreQueryParameters ?? true;
    const includeSubdomains = body.includeSubdomains ?? true;
    const found: string[] = [start];
    if (sitemap !== 'skip') {
      const robots = await fetchDiscoveryDocument(
        { ...deps, logger: res.locals.log ?? deps.logger },
        new URL('/robots.txt', start).href,
      );
      const named = robots ? parseRobots(robots, '').sitemaps : NO_RULES.sitemaps;
      found.push(...(await sitemapUrls({ ...deps, logger: res.locals.log ?? deps.logger }, start, named)));
    }
    if (sitemap !== 'only') {
      const { task } = await runWebTask(deps, {
        accountId: accountOf(res).account_id,
        keyId: accountOf(res).key_id,
        taskType: 'proxy_fetch',
        payload: {
          url: start,
          raw_html: true,
          ...(timeoutSecondsOf(body.timeout) ? { timeout: timeoutSecondsOf(body.timeout) } : {}),
        },
        timeoutSeconds: timeoutSecondsOf(body.timeout),
        urlLoc: ['body', 'url'],
      });
      res.setHeader('X-Task-Id', task.task_id);
      res.set({ 'X-Points-Charged': task.charged_points, 'X-Points-Held': task.held_points ?? '0' });
      if (task.result.content_type === 'html')
        found.push(...extractLinks(task.result.content ?? '', task.result.final_url ?? start));
    }
    const site = new URL(start).hostname.replace(/^www\./, '');
    const urls = new Set<string>();
    for (const raw of found) {
      const url = normaliseUrl(raw, ignoreQuery);
      if (!url) continue;
      const host = new URL(url).hostname.replace(/^www\./, '');
      if (host === site || (includeSubdomains && host.endsWith(`.${site}`))) urls.add(url);
    }
    let listed = [...urls];
    if (body.search) {
      const words = body.search.toLowerCase().split(/\s+/).filter(Boolean);
      const score = (url: string) => words.filter((word) => url.toLowerCase().includes(word)).length;
      listed = listed.filter((url) => score(url) > 0).sort((a, b) => score(b) - score(a));
    }
    return listed.slice(0, body.limit ?? MAP_DEFAULT_LIMIT);
  }

  const mapV2 = async (req: Request, res: Response) => {
    const links = await map(req, res);
    res.json({ success: true, links: links.map((url) => ({ url })) });
  };

  const mapV1 = async (req: Request, res: Response) => {
    res.json({ success: true, links: await map(req, res) });
  };

  const both = (path: string) => [`${COMPAT_SCRAPER_PREFIX}/v2${path}`, `${FIRECRAWL_V2_ROOT}${path}`];
  const job = { ...FIRECRAWL_ROUTE, params: JobIdParams, errors: ['job_not_found'] as ErrorType[] };
  const start = { ...FIRECRAWL_ROUTE, method: 'post', errors: START_ERRORS, headers: JOB_KEY } as const;
  const mapRoute = { ...FIRECRAWL_ROUTE, method: 'post', cost: true, body: MapBody, errors: MAP_ERRORS } as const;
  const statusAt = (path: string) => (req: Request, res: Response) => status(req, res, path);
  const jobs = [
    { prefix: '/v2/crawl', name: 'crawl', status: statusAt('/v2/crawl') },
    { prefix: '/v2/batch/scrape', name: 'batch scrape', status: statusAt('/v2/batch/scrape') },
    // firecrawl-js 1.x polls a batch scrape at /v1/crawl/{id}, as Firecrawl serves both there.
    { prefix: '/v1/crawl', name: 'crawl or batch scrape', status: statusAt('/v1/crawl') },
    { prefix: '/v1/batch/scrape', name: 'batch scrape', status: statusAt('/v1/batch/scrape') },
  ];
  const pathsOf = (prefix: string) =>
    prefix.startsWith('/v2') ? both(prefix.slice(3)) : [`${COMPAT_SCRAPER_PREFIX}${prefix}`];
  return [
    ...routesAt(both('/crawl'), {
      ...start,
      summary:
        'Firecrawl v2 crawl: starts a crawl workflow whose pages are proxy_fetch tasks (robots.txt ' +
        'obeyed, the domain policy applied to every URL)',
      body: CrawlV2Body,
      handler: crawlV2,
    }),
    ...routesAt([v1('/crawl')], {
      ...start,
      summary: 'Firecrawl v1 crawl (the same job, v1 option names)',
      body: CrawlV1Body,
      handler: crawlV1,
    }),
    ...routesAt(both('/batch/scrape'), {
      ...start,
      summary: 'Firecrawl v2 batch scrape: a list of URLs as one job (pages are proxy_fetch tasks)',
      body: BatchScrapeV2Body,
      handler: batchV2,
    }),
    ...routesAt([v1('/batch/scrape')], {
      ...start,
      summary: 'Firecrawl v1 batch scrape',
      body: BatchScrapeV1Body,
      handler: batchV1,
    }),
    // Before /crawl/{id}, which would take "active" for a job id.
    ...routesAt([...both('/crawl/active'), v1('/crawl/active')], {
      ...FIRECRAWL_ROUTE,
      method: 'get',
      summary: "The account's crawls still running",
      handler: (req, res) => active(req, res, 'crawl'),
    }),
    ...jobs.flatMap(({ prefix, name, status: handler }) => [
      ...routesAt(
        pathsOf(prefix).map((path) => `${path}/{id}/errors`),
        {
          ...job,
          method: 'get',
          summary: `A ${name}'s failed pages and the URLs robots.txt kept it from`,
          handler: errors,
        },
      ),
      ...routesAt(
        pathsOf(prefix).map((path) => `${path}/{id}`),
        {
          ...job,
          method: 'get',
          summary: `A ${name}'s status, counts, cost and documents, paged by \`next\` (skip, limit)`,
          query: CrawlStatusQuery,
          handler,
        },
      ),
      ...routesAt(
        pathsOf(prefix).map((path) => `${path}/{id}`),
        {
          ...job,
          method: 'delete',
          summary:
            `Cancel a ${name}: pending pages stop at once, running pages' tasks are cancelled; only ` +
            `pages done are charged`,
          handler: cancel,
        },
      ),
    ]),
    // firecrawl-js 1.x asks for a crawl's errors with DELETE.
    ...routesAt([v1('/crawl/{id}/errors')], {
      ...job,
      method: 'delete',
      summary: 'The same errors, at the method firecrawl-js 1.x uses',
      handler: errors,
    }),
    ...routesAt(both('/map'), {
      ...mapRoute,
      summary:
        "Firecrawl v2 map: the site's URLs from its sitemaps and the start page's links (one " + 'proxy_fetch task)',
      handler: mapV2,
    }),
    ...routesAt([v1('/map')], { ...mapRoute, summary: 'Firecrawl v1 map (links as strings)', handler: mapV1 }),
  ];
}
