import { Router, type ErrorRequestHandler } from 'express';
import { DEFAULT_FORMATS, firecrawlFailure, planScrape, scrapeDocument, timeoutSecondsOf, withScheme, type ScrapeResults } from '../../compat/firecrawl';
import type { WebTaskType } from '../../schemas/domain';
import { ScrapeBody, type ScrapeRequest } from '../../schemas/requests';
import { idempotencyKeyOf, runWebTask } from '../../tasks/web-tasks';
import { accountOf, requireAccount } from '../auth';
import type { AppDeps } from '../deps';
import { RequestValidationError, validateBody } from '../validation';

/**
 * Firecrawl v1 scrape compatibility: a Firecrawl client migrates by changing its base URL. The SDKs
 * build `{apiUrl}/v1/scrape`, so with apiUrl = {base_url}/v1/compat/scraper both paths are served.
 */
export const COMPAT_SCRAPER_PREFIX = '/v1/compat/scraper';

export function compatRoutes(deps: AppDeps): Router {
  const router = Router();
  const auth = requireAccount();

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
    // Firecrawl SDKs send x-idempotency-key; each task of the scrape gets its own key derived from it.
    const key = idempotencyKeyOf(req.header('idempotency-key') ?? req.header('x-idempotency-key'));
    const run = (part: keyof ScrapeResults, taskType: WebTaskType, payload: Record<string, unknown>) =>
      runWebTask(deps, {
        accountId: accountOf(res).account_id,
        taskType,
        payload,
        timeoutSeconds,
        idempotencyKey: key ? `scrape:${part}:${key}` : undefined,
        urlLoc: ['body', 'url'],
      }).then(({ task }) => [part, { taskId: task.task_id, result: task.result }] as const);

    const plan = planScrape(formats);
    const fetchTimeout = timeoutSeconds ? { timeout: timeoutSeconds } : {};
    const parts: Array<{ part: keyof ScrapeResults; taskType: WebTaskType; payload: Record<string, unknown> }> = [];
    if (plan.markdown) parts.push({ part: 'markdown', taskType: 'proxy_fetch', payload: { url, raw_html: false, ...fetchTimeout } });
    if (plan.rawHtml) parts.push({ part: 'rawHtml', taskType: 'proxy_fetch', payload: { url, raw_html: true, ...fetchTimeout } });
    if (plan.screenshot) parts.push({ part: 'screenshot', taskType: 'screenshot', payload: { url, full_page: plan.screenshot.fullPage } });
    // Checked for every part before any task exists, so a refused target or a missing screenshot solver
    // leaves no fetch task charged.
    await deps.domainPolicy.assertAllowed(url, ['body', 'url']);
    for (const taskType of new Set(parts.map((entry) => entry.taskType))) await deps.tasks.ensureSolverOnline(taskType);
    const runs = parts.map((entry) => run(entry.part, entry.taskType, entry.payload));
    // Wait for every task, so none is left running unseen when another fails; then report the first failure.
    const settled = await Promise.allSettled(runs);
    const failure = settled.find((outcome) => outcome.status === 'rejected');
    if (failure) throw (failure as PromiseRejectedResult).reason;
    const results = Object.fromEntries(settled.map((outcome) => (outcome as PromiseFulfilledResult<readonly [string, unknown]>).value)) as ScrapeResults;

    res.json({ success: true, data: scrapeDocument({ url, formats, onlyMainContent: body.onlyMainContent ?? true, results }) });
  });

  return router;
}

/**
 * Mounted on the compatibility prefix before the common error renderer: that renderer still decides
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
