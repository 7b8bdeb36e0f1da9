import { Router, type ErrorRequestHandler, type Request, type Response } from 'express';
import { DEFAULT_FORMATS, firecrawlFailure, planScrape, scrapeDocument, timeoutSecondsOf, withScheme, type ScrapeResults } from '../../compat/firecrawl';
import { planScrapeV2, unsupportedFormat, unsupportedResultScrape, webResultV1, webResultV2, type SearchHit } from '../../compat/firecrawl-v2';
import { isValidSelector } from '../../compat/page-html';
import type { WebTaskType } from '../../schemas/domain';
import {
  FirecrawlSearchBody,
  ScrapeBody,
  ScrapeV2Body,
  ScreenshotFormatV2,
  type FirecrawlSearchRequest,
  type ScrapeRequest,
  type ScrapeV2Request,
} from '../../schemas/requests';
import { costOfTasks } from '../../db/ledger';
import { idempotencyKeyReused as keyUsedElsewhere } from '../../db/tasks';
import { idempotencyOf } from '../idempotency';
import { costHeaders, idempotencyKeyReused, noSolverOnline, runWebTask, safetyOf } from '../web-tasks';
import { accountOf, requireAccount } from '../auth';
import type { AppDeps } from '../deps';
import { parseOrThrow, RequestValidationError, validateBody, type ValidationDetail } from '../validation';

/**
 * Firecrawl compatibility: a Firecrawl client migrates by changing its base URL. The SDKs build
 * `{apiUrl}/v1/scrape`, `{apiUrl}/v2/scrape`, `{apiUrl}/v1/search` and `{apiUrl}/v2/search`, so with
 * apiUrl = {base_url}/v1/compat/scraper those paths are served (and v1's scrape at `/scrape` too).
 */
export const COMPAT_SCRAPER_PREFIX = '/v1/compat/scraper';
/**
 * Python's firecrawl-py 4.x joins its absolute endpoint paths onto the API URL with urljoin, which drops
 * the base path: with that same apiUrl it calls `{host}/v2/scrape` and `{host}/v2/search`, so these are
 * served at the root as well (no other route of the API begins with /v2).
 */
export const FIRECRAWL_V2_ROOT = '/v2';

type ScrapePart = { part: keyof ScrapeResults; taskType: WebTaskType; payload: Record<string, unknown> };
const SCRAPE_PARTS: (keyof ScrapeResults)[] = ['markdown', 'rawHtml', 'screenshot'];

// A web_search task returns at most this many results (SearchBody.count).
const SEARCH_RESULTS_MAX = 10;
const FIRECRAWL_SEARCH_DEFAULT_LIMIT = 5;

export function compatRoutes(deps: AppDeps): Router {
  const router = Router();
  const auth = requireAccount();

  /** Runs a scrape's tasks together and returns their results; the first failure is the answer. */
  /** Runs a scrape's tasks; its answer's headers say what they cost, which `cost` returns for the body too. */
  async function runScrape(
    req: Request,
    res: Response,
    operation: string,
    url: string,
    timeoutSeconds: number | undefined,
    parts: ScrapePart[],
  ): Promise<{ results: ScrapeResults; cost: { charged_points: string; held_points: string } }> {
    // Each task of the scrape gets its own key derived from the request's.
    const idempotency = idempotencyOf(req, operation);
    const partKey = (part: keyof ScrapeResults) => idempotency && { key: `scrape:${part}:${idempotency.key}`, fingerprint: idempotency.fingerprint };
    // Checked for every part before any task exists, so a refused target, a missing screenshot solver or a
    // key used with another scrape (maybe of other parts) leaves no fetch task charged.
    if (idempotency && (await keyUsedElsewhere(deps.db, accountOf(res).account_id, { keys: SCRAPE_PARTS.map((part) => partKey(part)!.key), fingerprint: idempotency.fingerprint }))) {
      throw idempotencyKeyReused();
    }
    await deps.domainPolicy.assertAllowed(url, ['body', 'url']);
    for (const taskType of new Set(parts.map((entry) => entry.taskType))) {
      if (!(await deps.tasks.solverOnline(taskType))) throw noSolverOnline(taskType);
    }
    const runs = parts.map(({ part, taskType, payload }) =>
      runWebTask(deps, {
        accountId: accountOf(res).account_id,
        keyId: accountOf(res).key_id,
        taskType,
        payload,
        timeoutSeconds,
        idempotency: partKey(part),
        urlLoc: ['body', 'url'],
      }).then(({ task }) => [part, { taskId: task.task_id, result: task.result }] as const),
    );
    // Wait for every task, so none is left running unseen when another fails; then report the first failure.
    const settled = await Promise.allSettled(runs);
    const failure = settled.find((outcome) => outcome.status === 'rejected');
    if (failure) throw (failure as PromiseRejectedResult).reason;
    const results = Object.fromEntries(settled.map((outcome) => (outcome as PromiseFulfilledResult<readonly [string, unknown]>).value)) as ScrapeResults;
    const cost = await costOfTasks(deps.db, Object.values(results).map((part) => part!.taskId));
    res.set(costHeaders(cost));
    return { results, cost };
  }

  /** A scrape document's metadata with what the scrape cost. */
  const withCost = <T extends { metadata: Record<string, unknown> }>(data: T, cost: { charged_points: string; held_points: string }) => ({
    ...data,
    metadata: { ...data.metadata, pointsCharged: cost.charged_points, pointsHeld: cost.held_points },
  });

  router.post([`${COMPAT_SCRAPER_PREFIX}/scrape`, `${COMPAT_SCRAPER_PREFIX}/v1/scrape`], auth, validateBody(ScrapeBody), async (req, res) => {
    const body = req.body as ScrapeRequest;
    const formats = body.formats && body.formats.length > 0 ? body.formats : DEFAULT_FORMATS;
    if (formats.includes('screenshot') && formats.includes('screenshot@fullPage')) {
      throw new RequestValidationError([
        { type: 'value_error', loc: ['body', 'formats'], msg: 'Value error, ask for either "screenshot" or "screenshot@fullPage", not both', input: body.formats },
      ]);
    }
    const url = withScheme(body.url);
    const timeoutSeconds = timeoutSecondsOf(body.timeout);
    const plan = planScrape(formats);
    const fetchTimeout = timeoutSeconds ? { timeout: timeoutSeconds } : {};
    const parts: ScrapePart[] = [];
    if (plan.markdown) parts.push({ part: 'markdown', taskType: 'proxy_fetch', payload: { url, raw_html: false, ...fetchTimeout } });
    if (plan.rawHtml) parts.push({ part: 'rawHtml', taskType: 'proxy_fetch', payload: { url, raw_html: true, ...fetchTimeout } });
    if (plan.screenshot) parts.push({ part: 'screenshot', taskType: 'screenshot', payload: { url, full_page: plan.screenshot.fullPage } });
    const { results, cost } = await runScrape(req, res, 'scrape:v1', url, timeoutSeconds, parts);
    res.json({ success: true, data: withCost(scrapeDocument({ url, formats, onlyMainContent: body.onlyMainContent ?? true, results }), cost) });
  });

  router.post([`${COMPAT_SCRAPER_PREFIX}/v2/scrape`, `${FIRECRAWL_V2_ROOT}/scrape`], auth, validateBody(ScrapeV2Body), async (req, res) => {
    const body = req.body as ScrapeV2Request;
    const problems: ValidationDetail[] = [];
    (body.formats ?? []).forEach((format, index) => {
      if (typeof format === 'object' && format.type === 'screenshot') {
        try {
          parseOrThrow(ScreenshotFormatV2, format, ['body', 'formats', index]);
        } catch (error) {
          if (!(error instanceof RequestValidationError)) throw error;
          problems.push(...error.detail);
        }
      }
    });
    for (const field of ['includeTags', 'excludeTags'] as const) {
      (body[field] ?? []).forEach((selector, index) => {
        if (!isValidSelector(selector)) problems.push({ type: 'value_error', loc: ['body', field, index], msg: 'Value error, not a valid CSS selector', input: selector });
      });
    }
    if (problems.length > 0) throw new RequestValidationError(problems);
    const plan = planScrapeV2(body);
    const url = withScheme(body.url);
    const timeoutSeconds = timeoutSecondsOf(body.timeout);
    const fetchTimeout = timeoutSeconds ? { timeout: timeoutSeconds } : {};
    const parts: ScrapePart[] = [];
    if (plan.solverMarkdown) parts.push({ part: 'markdown', taskType: 'proxy_fetch', payload: { url, raw_html: false, ...fetchTimeout } });
    if (plan.rawHtml) parts.push({ part: 'rawHtml', taskType: 'proxy_fetch', payload: { url, raw_html: true, ...fetchTimeout } });
    if (plan.screenshot) parts.push({ part: 'screenshot', taskType: 'screenshot', payload: { url, ...plan.screenshot } });
    const { results, cost } = await runScrape(req, res, 'scrape:v2', url, timeoutSeconds, parts);
    res.json({ success: true, data: withCost(scrapeDocument({ url, formats: plan.formats, onlyMainContent: plan.onlyMainContent, tags: plan.tags, results }), cost) });
  });

  /** One web_search task for a Firecrawl search; its hits, at most `limit`, and the warning when capped. */
  async function runSearch(req: Request, res: Response) {
    const body = req.body as FirecrawlSearchRequest;
    for (const source of body.sources ?? []) {
      const type = typeof source === 'string' ? source : source.type;
      if (type !== 'web') throw unsupportedFormat(type, 'search source');
    }
    const scrapeFormats = body.scrapeOptions?.formats ?? [];
    if (scrapeFormats.length > 0) {
      const first = scrapeFormats[0]!;
      throw unsupportedResultScrape(typeof first === 'string' ? first : first.type);
    }
    // Both versions' searches are one operation: the same body makes the same task.
    const idempotency = idempotencyOf(req, 'search');
    const limit = body.limit ?? FIRECRAWL_SEARCH_DEFAULT_LIMIT;
    const count = Math.min(limit, SEARCH_RESULTS_MAX);
    const { task } = await runWebTask(
      deps,
      {
        accountId: accountOf(res).account_id,
        keyId: accountOf(res).key_id,
        taskType: 'web_search',
        payload: { query: body.query, count },
        timeoutSeconds: timeoutSecondsOf(body.timeout),
        idempotency: idempotency && { key: `search:${idempotency.key}`, fingerprint: idempotency.fingerprint },
        urlLoc: ['body', 'query'],
      },
      (created) => res.setHeader('X-Task-Id', created.task_id),
    );
    res.set(costHeaders(task));
    const hits = (task.result.results as SearchHit[]).slice(0, count);
    const shown = (location: string) => Number(/^results\[(\d+)\]/.exec(location)?.[1] ?? 0) < count;
    return {
      hits,
      taskId: task.task_id,
      safety: safetyOf(task.result, shown),
      ...(limit > SEARCH_RESULTS_MAX ? { warning: `At most ${SEARCH_RESULTS_MAX} results are returned per search; ${limit} were asked for.` } : {}),
    };
  }

  router.post(`${COMPAT_SCRAPER_PREFIX}/v1/search`, auth, validateBody(FirecrawlSearchBody), async (req, res) => {
    const { hits, taskId, safety, ...warning } = await runSearch(req, res);
    res.json({ success: true, data: hits.map(webResultV1), ...warning, id: taskId, ...safety });
  });

  router.post([`${COMPAT_SCRAPER_PREFIX}/v2/search`, `${FIRECRAWL_V2_ROOT}/search`], auth, validateBody(FirecrawlSearchBody), async (req, res) => {
    const { hits, taskId, safety, ...warning } = await runSearch(req, res);
    res.json({ success: true, data: { web: hits.map(webResultV2), ...safety }, ...warning, id: taskId });
  });

  return router;
}

/**
 * Mounted on the compatibility paths (the prefix and /v2) before the common error renderer: that renderer still decides
 * status and message, and this turns its body into Firecrawl's `{success:false, error}`.
 */
export function firecrawlErrorDialect(): ErrorRequestHandler {
  return (error, _req, res, next) => {
    const json = res.json.bind(res);
    res.json = (body: unknown) => {
      const failure = firecrawlFailure(res.statusCode, body);
      res.status(failure.status);
      return json(failure.body);
    };
    next(error);
  };
}
