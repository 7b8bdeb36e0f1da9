import type { ErrorRequestHandler, Request, Response } from 'express';
import {
  DEFAULT_FORMATS,
  firecrawlFailure,
  scrapeDocument,
  timeoutSecondsOf,
  withScheme,
  type ScrapeParts,
} from '../../compat/firecrawl';
import { firecrawlActions, parseActions } from '../../compat/firecrawl-actions';
import {
  planScrapeV2,
  renderPayload,
  unsupportedFormat,
  unsupportedResultScrape,
  webResultV1,
  webResultV2,
  type SearchHit,
} from '../../compat/firecrawl-v2';
import { isValidSelector } from '../../compat/page-html';
import { renderReason } from '../../compat/render-policy';
import { assertScrapeOptions } from '../../compat/scrape-options';
import {
  EXTRACTION_ATTEMPTS,
  EXTRACTION_MAX_TOKENS,
  extractionFailed,
  extractionRequest,
  jsonExtraction,
  judgeAnswer,
  repairRequest,
  type Extraction,
} from '../../compat/extraction';
import { completeChat, noStrongSolver } from '../chat-tasks';
import { ApiError } from '../../errors';
import { maxAgeOf, scrapeCacheKey, type CachedPage } from '../../compat/page-cache';
import {
  pointsBelow,
  pointsLeft,
  scrapePriceLimit,
  scrapeWithinPrice,
  type ScrapePriceLimit,
} from '../../compat/price-limit';
import { decimalText } from '../../schemas/common';
import { NO_FIGURES } from '../../db/matching';
import type { ScanResult } from '../../safety/scanner';
import { CHAT_TASK_TYPE, type WebTaskType } from '../../schemas/domain';
import {
  FirecrawlSearchBody,
  ScrapeBody,
  ScrapeV2Body,
  ScreenshotFormatV2,
  type FirecrawlSearchRequest,
  type ScrapeRequest,
  type ScrapeV2Request,
} from '../../schemas/requests';
import { idempotencyOf } from '../idempotency';
import {
  costHeaders,
  idempotencyKeyReused,
  insufficientBalance,
  noSolverError,
  runWebTask,
  safetyOf,
} from '../web-tasks';
import type { ErrorType } from '../../errors';
import { accountOf } from '../auth';
import type { AppDeps } from '../deps';
import { IDEMPOTENT_RUN, idempotent, route, type Route } from '../route';
import { parseOrThrow, RequestValidationError, type ValidationDetail } from '../validation';
import { assertAllowedTarget } from '../target-policy';

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

type ScrapePart = 'fetch' | 'render' | 'screenshot';
// Safety findings are located by the Firecrawl field their task produced.
const PART_NAMES: Record<ScrapePart, string> = { fetch: 'rawHtml', render: 'renderedHtml', screenshot: 'screenshot' };
type TaskOutcome = { taskId: string; result: Record<string, unknown> };
const SCRAPE_PARTS: readonly ScrapePart[] = ['fetch', 'render', 'screenshot'];

// A web_search task returns at most this many results (SearchBody.count).
const SEARCH_RESULTS_MAX = 10;
const FIRECRAWL_SEARCH_DEFAULT_LIMIT = 5;

/** A scrape: a format, option or action this service does not serve is refused before anything is held. */
const SCRAPE_ERRORS: ErrorType[] = [
  'unsupported_format',
  'unsupported_option',
  'invalid_action',
  'location_unavailable',
  'domain_blocked',
  ...IDEMPOTENT_RUN,
  'no_strong_solver_available',
  'no_solver_within_price',
  'extraction_failed',
];
/** v1 names its formats in the request schema: an unserved one is a 422 there. */
const SCRAPE_V1_ERRORS: ErrorType[] = SCRAPE_ERRORS.filter((type) => type !== 'unsupported_format');
const SEARCH_ERRORS: ErrorType[] = ['unsupported_format', ...IDEMPOTENT_RUN];
const SCRAPE_KEY = idempotent("answers with the first scrape's tasks", true);
const SEARCH_KEY = idempotent("answers with the first search's task", true);
/** The scrape formats answered by a strong-tier chat on the page (src/compat/extraction.ts). */
const LLM_FORMATS = ['json', 'summary'] as const;
/** What every Firecrawl route shares. */
export const FIRECRAWL_ROUTE = { tag: 'compatibility', auth: 'bearer', firecrawl: true } as const;

/** The page a fetch or a render gave, as a scrape's document is made from it. */
function pageOf(part: 'fetch' | 'render', result: Record<string, unknown>): NonNullable<ScrapeParts['page']> {
  return part === 'render'
    ? {
        content: String(result.snapshot ?? ''),
        kind: 'html',
        finalUrl: result.url as string,
        statusCode: (result.status_code as number | null) ?? null,
        title: result.title as string | null,
      }
    : {
        content: String(result.content ?? ''),
        kind: result.content_type === 'html' ? 'html' : 'text',
        finalUrl: result.final_url as string,
        statusCode: result.status_code as number,
        title: result.title as string | null,
      };
}

export function compatRoutes(deps: AppDeps): Route[] {
  /**
   * A scrape as Firecrawl does it: the page fetched, and rendered in a browser when it needs it (or
   * always, for waitFor and actions); its screenshot; one answer whose headers say what its tasks cost.
   */
  async function scrape(
    req: Request,
    res: Response,
    version: 'v1' | 'v2',
    body: ScrapeV2Request,
    extractions: Extraction[] = [],
  ) {
    assertScrapeOptions(body as Record<string, unknown>, version);
    const actions = parseActions(body.actions, body.waitFor ?? 0);
    // An extraction reads the page's markdown: the page is scraped as for markdown, which data holds only when
    // asked for.
    const asked = body.formats && body.formats.length > 0 ? body.formats : extractions.length > 0 ? [] : ['markdown'];
    const plan = planScrapeV2(
      { ...body, formats: extractions.length > 0 ? [...asked, 'markdown'] : asked },
      actions,
      LLM_FORMATS,
    );
    const shownFormats =
      extractions.length > 0 &&
      !asked.some((format) => (typeof format === 'string' ? format : format.type) === 'markdown')
        ? plan.formats.filter((format) => format !== 'markdown')
        : plan.formats;
    const url = withScheme(body.url);
    const limit =
      body.maxPricePoints === undefined || body.maxPricePoints === null ? null : decimalText(body.maxPricePoints);
    const timeoutSeconds = timeoutSecondsOf(body.timeout);
    const fetchTimeout = timeoutSeconds ? { timeout: timeoutSeconds } : {};
    // Each task of the scrape gets its own key derived from the request's (Firecrawl SDKs send X-Idempotency-Key).
    const idempotency = idempotencyOf(req, `scrape:${version}`);
    const partKey = (part: ScrapePart) =>
      idempotency && { key: `scrape:${part}:${idempotency.key}`, fingerprint: idempotency.fingerprint };
    // Firecrawl fetches from the US unless told otherwise; US-generic is its name for any US address.
    const country = body.location ? (body.location.country ?? 'US').slice(0, 2).toUpperCase() : undefined;
    const online = (taskType: WebTaskType) => deps.tasks.solverOnline(taskType, country);
    const renderFirst = plan.render === 'always' && (plan.content || plan.actions.length > 0);
    const separateScreenshot = plan.screenshot !== null && !(renderFirst && plan.actions.length > 0);
    // Checked before any task exists, so a refused target, a missing solver or a key used with another
    // scrape (maybe of other parts) leaves nothing charged.
    if (
      idempotency &&
      (await deps.taskViews.idempotencyKeyReused(accountOf(res).account_id, {
        keys: SCRAPE_PARTS.map((part) => partKey(part)!.key),
        fingerprint: idempotency.fingerprint,
      }))
    ) {
      throw idempotencyKeyReused();
    }
    await assertAllowedTarget(deps.domainPolicy, url, ['body', 'url']);
    if (extractions.length > 0) {
      // A completion's text reaches only the request that created it (over the relay), so a repeat with the
      // same key could not be answered with it: json and summary are served without an idempotency key.
      if (idempotency)
        throw new ApiError(
          'unsupported_option',
          'The json and summary formats are not served with an Idempotency-Key (or ' +
            'X-Idempotency-Key): send the scrape without one.',
          { option: 'Idempotency-Key' },
        );
      if (!(await deps.tasks.chatSolverOnline(deps.strongModels()))) throw noStrongSolver();
    }
    // The page cache (docs/crawl.md, "Page cache"): a request with an idempotency key is answered by its
    // own tasks, so it is looked up only without one.
    const cacheKey = scrapeCacheKey(url, plan, country, accountOf(res).account_id);
    const cache = body as { maxAge?: number | null; storeInCache?: boolean | null };
    if (cacheKey && !idempotency) {
      const cached = await deps.pageCache.find(cacheKey, maxAgeOf(cache.maxAge, deps.config.pageCacheDefaultMaxAgeMs));
      if (cached) return answerFromCache(res, url, { ...plan, formats: shownFormats }, cached, { extractions, limit });
    }
    const needed = new Set<WebTaskType>([
      ...(renderFirst ? (['page_snapshot'] as const) : plan.content ? (['proxy_fetch'] as const) : []),
      ...(separateScreenshot ? (['screenshot'] as const) : []),
    ]);
    for (const taskType of needed)
      if (!(await online(taskType))) throw await noSolverError(deps.tasks, taskType, country);
    const prices = await planPrices(res, { extractions, pageTasks: needed.size, limit });
    // A page task beyond its share would wait for a solver that may never come: refused before any work.
    for (const taskType of needed)
      if (prices && !(await withinShare(res, taskType, prices.pageShare))) throw scrapeWithinPrice(taskType);

    const run = (
      part: ScrapePart,
      taskType: WebTaskType,
      payload: Record<string, unknown>,
      maxPricePoints = prices?.pageShare,
    ): Promise<TaskOutcome> =>
      runWebTask(deps, {
        accountId: accountOf(res).account_id,
        keyId: accountOf(res).key_id,
        taskType,
        payload,
        maxPricePoints,
        timeoutSeconds,
        idempotency: partKey(part),
        urlLoc: ['body', 'url'],
        country,
      }).then(({ task }) => ({ taskId: task.task_id, result: task.result as Record<string, unknown> }));

    const outcomes: Array<{ part: ScrapePart; outcome: TaskOutcome }> = [];
    let warning: string | undefined;
    const page = async (): Promise<void> => {
      if (renderFirst) {
        outcomes.push({ part: 'render', outcome: await run('render', 'page_snapshot', renderPayload(url, plan)) });
        return;
      }
      if (!plan.content) return;
      const fetched = await run('fetch', 'proxy_fetch', { url, raw_html: true, ...fetchTimeout });
      outcomes.push({ part: 'fetch', outcome: fetched });
      const reason = fetched.result.content_type === 'html' ? renderReason(String(fetched.result.content ?? '')) : null;
      if (!reason) return;
      if (!(await online('page_snapshot'))) {
        warning =
          `The page needs rendering (${reason}) and no browser solver${country ? ` fetching from ${country}` : ''} ` +
          `is online: its content is what a fetch sees.`;
        return;
      }
      const renderLimit = prices ? prices.afterFetch(await costOf([fetched.taskId])) : undefined;
      if (renderLimit && !(await withinShare(res, 'page_snapshot', renderLimit))) {
        warning =
          `The page needs rendering (${reason}) and no browser solver is within what maxPricePoints ` +
          `leaves after the fetch: its content is what a fetch sees.`;
        return;
      }
      outcomes.push({
        part: 'render',
        outcome: await run(
          'render',
          'page_snapshot',
          renderPayload(String(fetched.result.final_url ?? url), plan),
          renderLimit,
        ),
      });
    };
    const shot = async (): Promise<void> => {
      if (separateScreenshot)
        outcomes.push({
          part: 'screenshot',
          outcome: await run('screenshot', 'screenshot', { url, ...plan.screenshot }),
        });
    };
    // Wait for every task, so none is left running unseen when another fails; then report the first failure.
    const failure = (await Promise.allSettled([page(), shot()])).find((outcome) => outcome.status === 'rejected');
    if (failure) throw (failure as PromiseRejectedResult).reason;

    const taskIds = outcomes.map(({ outcome }) => outcome.taskId);
    const cost = await deps.ledger.costOfTasks(taskIds);
    const byPart = (part: ScrapePart) => outcomes.find((entry) => entry.part === part)?.outcome.result;
    const rendered = byPart('render');
    const fetched = byPart('fetch');
    const screenshot = byPart('screenshot');
    const pageParts = rendered ? pageOf('render', rendered) : fetched ? pageOf('fetch', fetched) : undefined;
    // The page is cached as the task that gave it; one answered from a fetch that needed rendering is not.
    const pageTask = outcomes.find((entry) => entry.part === (rendered ? 'render' : 'fetch'))?.outcome.taskId;
    // The client has its page either way: a cache write that fails costs only a later hit.
    if (cacheKey && pageTask && !warning && cache.storeInCache !== false) {
      await deps.pageCache
        .keep(cacheKey, pageTask)
        .catch((error: unknown) => res.locals.log.warn({ err: error, task_id: pageTask }, 'page not cached'));
    }
    const renderedActions = rendered?.actions as Parameters<typeof firecrawlActions>[0] | undefined;
    // Screenshots are answered as URLs the client fetches with its key, as Firecrawl answers its storage's URLs.
    const origin = `${req.protocol}://${req.get('host')}`;
    const taskOf = (part: ScrapePart) => outcomes.find((entry) => entry.part === part)?.outcome.taskId;
    const artifactUrl = (part: ScrapePart, name: string) =>
      `${origin}/v1/tasks/${encodeURIComponent(taskOf(part)!)}/artifacts/${name}`;
    let screenshotPart = screenshot ? { url: artifactUrl('screenshot', 'image_base64') } : undefined;
    let actionResults = renderedActions;
    if (renderedActions && plan.screenshot && !separateScreenshot) {
      // The screenshot format was the last action: it is data.screenshot, not one of the actions' screenshots.
      const screenshots = renderedActions.screenshots.slice(0, -1);
      screenshotPart = { url: artifactUrl('render', `actions.screenshots.${screenshots.length}`) };
      actionResults = { ...renderedActions, screenshots };
    }
    const parts: ScrapeParts = {
      ...(pageParts ? { page: plan.content ? pageParts : { ...pageParts, content: '' } } : {}),
      ...(screenshotPart ? { screenshot: screenshotPart } : {}),
      ...(actionResults && plan.actions.length > 0
        ? {
            actions: firecrawlActions(actionResults, version, (index) =>
              artifactUrl('render', `actions.screenshots.${index}`),
            ),
          }
        : {}),
      taskIds,
      scans: outcomes.flatMap(({ part, outcome }) =>
        outcome.result.safety ? [{ name: PART_NAMES[part], safety: outcome.result.safety as ScanResult }] : [],
      ),
      ...(warning ? { warning } : {}),
    };
    if (extractions.length === 0) {
      answerPage(res, url, plan, parts, cost, { cacheState: 'miss' });
      return;
    }
    await answerWithExtractions(res, {
      url,
      plan: { ...plan, formats: shownFormats },
      parts,
      pageCost: cost,
      cacheState: 'miss',
      extractions,
      prices,
    });
  }

  /** Some online solver of the type asks at most `share` (its price); none online is the task's own refusal. */
  async function withinShare(res: Response, taskType: WebTaskType, share: string) {
    const { required } = await deps.solvers.canHoldEstimates({
      accountId: accountOf(res).account_id,
      fixed: { count: 0, points: '0' },
      count: 1,
      taskType,
      figures: NO_FIGURES,
    });
    return required === null || !pointsBelow(share, required);
  }

  /** What a price limit has spent on tasks: their charges and their open holds. */
  const costOf = (taskIds: string[]) => deps.ledger.committedToTasks(taskIds);

  /**
   * Before any task of a scrape: its tasks' maximum prices under its maxPricePoints, if it has one, and
   * for a scrape with extractions, that the account can hold its page's tasks (each at its maximum) and
   * one completion per extraction at the lowest estimate an online strong-tier solver asks for it (its
   * completion budget; the page's prompt is not known yet, so this is a floor). One that cannot is 402
   * insufficient_balance with nothing held, rather than a page charged and then no completion for want
   * of points; a limit below the completions' floor is 422 no_solver_within_price, as early.
   */
  async function planPrices(
    res: Response,
    input: { extractions: Extraction[]; pageTasks: number; limit: string | null },
  ): Promise<ScrapePriceLimit | null> {
    const { extractions, pageTasks, limit } = input;
    if (extractions.length === 0)
      return limit ? scrapePriceLimit(limit, { pageTasks, extractions: 0, completionFloor: null }) : null;
    const holds = (fixed: { count: number; points: string }, count: number) =>
      deps.solvers.canHoldEstimates({
        accountId: accountOf(res).account_id,
        fixed,
        count,
        taskType: CHAT_TASK_TYPE,
        strongModels: deps.strongModels(),
        figures: {
          promptTokens: null,
          completionTokens: EXTRACTION_MAX_TOKENS,
          maxPricePrompt: null,
          maxPriceCompletion: null,
          maxPriceRequest: null,
        },
      });
    const prices = limit
      ? scrapePriceLimit(limit, {
          pageTasks,
          extractions: extractions.length,
          completionFloor: (await holds({ count: 0, points: '0' }, 1)).required,
        })
      : null;
    const { required, enough } = await holds(
      { count: pageTasks, points: prices?.pageShare ?? deps.config.defaultWebTaskPricePoints },
      extractions.length,
    );
    if (required !== null && !enough) throw insufficientBalance(required);
    return prices;
  }

  /** The scrape's document from its parts, in the plan's formats (or `formats`). */
  const documentOf = (url: string, plan: ReturnType<typeof planScrapeV2>, parts: ScrapeParts, formats = plan.formats) =>
    scrapeDocument({
      url,
      formats,
      onlyMainContent: plan.onlyMainContent,
      tags: plan.tags,
      removeBase64Images: plan.removeBase64Images,
      parts,
    });

  /** A document's markdown, as the markdown format gives it: what an extraction reads. */
  const markdownFor = (url: string, plan: ReturnType<typeof planScrapeV2>, parts: ScrapeParts) =>
    String(documentOf(url, plan, parts, ['markdown']).markdown ?? '');

  /**
   * Runs each extraction (json, summary) as a chat completion of a strong-tier solver on the page's
   * markdown; an answer that is not valid gets one repair (a second completion told what is wrong).
   * The page and every completion are the request's tasks and its one bill (docs/crawl.md, "Extraction
   * and summary").
   */
  async function answerWithExtractions(
    res: Response,
    input: {
      url: string;
      plan: ReturnType<typeof planScrapeV2>;
      parts: ScrapeParts;
      pageCost: { charged_points: string; held_points: string | null };
      cacheState: 'hit' | 'miss';
      cachedAt?: string;
      extractions: Extraction[];
      prices: ScrapePriceLimit | null;
    },
  ) {
    const { url, plan, parts, extractions } = input;
    // Each extraction's share of what the page left of the limit; its repair takes what its first attempt did not.
    const share = input.prices?.extractionShare(await costOf(parts.taskIds));
    const markdown = markdownFor(url, plan, parts);
    const account = accountOf(res);
    // A client that goes away before the answer is sent cancels the completions still running.
    const clientGone = new AbortController();
    const gone = () => {
      if (!res.writableEnded) clientGone.abort();
    };
    res.on('close', gone);
    const chatTaskIds: string[] = [];
    const tokens = { prompt_tokens: 0, completion_tokens: 0 };
    const runOne = async (extraction: Extraction) => {
      let request = extractionRequest(extraction, markdown, url);
      let problems: string[] = [];
      const own: string[] = [];
      for (let attempt = 1; attempt <= EXTRACTION_ATTEMPTS; attempt += 1) {
        const maxPricePoints = share === undefined ? undefined : pointsLeft(share, await costOf(own));
        const onCreated = (taskId: string) => {
          chatTaskIds.push(taskId);
          own.push(taskId);
        };
        const answer = await completeChat(deps, {
          accountId: account.account_id,
          keyId: account.key_id,
          payload: request,
          maxPricePoints,
          clientGone: clientGone.signal,
          onCreated,
        }).catch((error: unknown) => {
          // A repair the limit cannot pay leaves the first answer's problems to report.
          if (attempt > 1 && error instanceof ApiError && error.type === 'no_solver_within_price') return null;
          throw error instanceof ApiError && error.type === 'no_solver_within_price'
            ? scrapeWithinPrice(`the ${extraction.kind} completion`)
            : error;
        });
        if (!answer) return { extraction, problems: [...problems, 'no repair within maxPricePoints'] };
        tokens.prompt_tokens += answer.usage.prompt_tokens;
        tokens.completion_tokens += answer.usage.completion_tokens;
        const judged = judgeAnswer(extraction, answer.content);
        if (judged.ok) return { extraction, value: judged.value };
        problems = judged.problems;
        request = repairRequest(extractionRequest(extraction, markdown, url), answer.content, problems);
      }
      return { extraction, problems };
    };
    const settled = await Promise.allSettled(extractions.map(runOne));
    const chatCost = await deps.ledger.costOfTasks(chatTaskIds);
    const taskIds = [...parts.taskIds, ...chatTaskIds];
    const cost = await deps.ledger.costOfTasks(taskIds);
    const crashed = settled.find((outcome) => outcome.status === 'rejected');
    if (crashed) throw withCost((crashed as PromiseRejectedResult).reason, cost);
    const outcomes = settled.map(
      (outcome) => (outcome as PromiseFulfilledResult<Awaited<ReturnType<typeof runOne>>>).value,
    );
    const failed = outcomes.find((outcome) => 'problems' in outcome);
    if (failed && 'problems' in failed)
      throw withCost(extractionFailed(failed.extraction, failed.problems!, taskIds), cost);
    const values: Record<string, unknown> = {};
    for (const outcome of outcomes)
      if ('value' in outcome)
        values[outcome.extraction.kind === 'summary' ? 'summary' : outcome.extraction.field] = outcome.value;
    res.set(costHeaders(cost));
    const data = documentOf(url, plan, { ...parts, taskIds });
    const costParts = {
      page: { taskIds: parts.taskIds, pointsCharged: input.pageCost.charged_points },
      completions: {
        taskIds: chatTaskIds,
        pointsCharged: chatCost.charged_points,
        promptTokens: tokens.prompt_tokens,
        completionTokens: tokens.completion_tokens,
      },
    };
    res.json({
      success: true,
      data: {
        ...data,
        ...values,
        metadata: {
          ...data.metadata,
          scrapeId: data.metadata.scrapeId ?? chatTaskIds[0],
          cacheState: input.cacheState,
          ...(input.cachedAt ? { cachedAt: input.cachedAt } : {}),
          pointsCharged: cost.charged_points,
          pointsHeld: cost.held_points,
          costParts,
        },
      },
    });
  }

  /** An error of a scrape whose tasks have run: its headers say what they cost, as a success's do. */
  function withCost(error: unknown, cost: { charged_points: string; held_points: string | null }): unknown {
    if (!(error instanceof ApiError)) return error;
    return new ApiError(
      error.type,
      error.message,
      { ...error.extra, points_charged: cost.charged_points },
      { ...error.headers, ...costHeaders(cost) },
    );
  }

  /**
   * A scrape answered from the page cache: the document made from the cached task's page as from a fresh
   * one, free, with no task of its own (docs/crawl.md, "Page cache"). The cached task's id is not shown:
   * it may be another account's.
   */
  async function answerFromCache(
    res: Response,
    url: string,
    plan: ReturnType<typeof planScrapeV2>,
    cached: CachedPage,
    asked: { extractions: Extraction[]; limit: string | null },
  ) {
    const { extractions } = asked;
    const part: ScrapePart = cached.taskType === 'page_snapshot' ? 'render' : 'fetch';
    const safety = cached.result.safety as ScanResult | undefined;
    const parts: ScrapeParts = {
      page: pageOf(part, cached.result),
      taskIds: [],
      scans: safety ? [{ name: PART_NAMES[part], safety }] : [],
    };
    // The cache keeps pages only: a cached page's json and summary are asked of a solver again.
    if (extractions.length > 0) {
      const prices = await planPrices(res, { extractions, pageTasks: 0, limit: asked.limit });
      await answerWithExtractions(res, {
        url,
        plan,
        parts,
        pageCost: { charged_points: '0', held_points: '0' },
        cacheState: 'hit',
        cachedAt: cached.cachedAt,
        extractions,
        prices,
      });
      return;
    }
    answerPage(
      res,
      url,
      plan,
      parts,
      { charged_points: '0', held_points: '0' },
      { cacheState: 'hit', cachedAt: cached.cachedAt },
    );
  }

  /** A scrape's answer without extractions: its document, what its tasks cost, and whether it came from the cache. */
  function answerPage(
    res: Response,
    url: string,
    plan: ReturnType<typeof planScrapeV2>,
    parts: ScrapeParts,
    cost: { charged_points: string; held_points: string },
    cache: { cacheState: 'hit' | 'miss'; cachedAt?: string },
  ) {
    res.set(costHeaders(cost));
    const data = documentOf(url, plan, parts);
    res.json({
      success: true,
      data: {
        ...data,
        metadata: { ...data.metadata, ...cache, pointsCharged: cost.charged_points, pointsHeld: cost.held_points },
      },
    });
  }

  const scrapeV1 = async (req: Request, res: Response) => {
    const body = req.body as ScrapeRequest;
    const formats = body.formats && body.formats.length > 0 ? body.formats : DEFAULT_FORMATS;
    if (formats.includes('screenshot') && formats.includes('screenshot@fullPage')) {
      throw new RequestValidationError([
        {
          type: 'value_error',
          loc: ['body', 'formats'],
          msg: 'Value error, ask for either "screenshot" or "screenshot@fullPage", not both',
          input: body.formats,
        },
      ]);
    }
    // v1's LLM formats: json (its options in jsonOptions) and extract (in extract), answered under their names.
    const extractions: Extraction[] = [];
    const options = body as { jsonOptions?: Record<string, unknown> | null; extract?: Record<string, unknown> | null };
    if (formats.includes('json')) extractions.push(jsonExtraction(options.jsonOptions ?? {}, 'json', 'jsonOptions'));
    if (formats.includes('extract')) extractions.push(jsonExtraction(options.extract ?? {}, 'extract', 'extract'));
    const pageFormats = formats.filter((format) => format !== 'json' && format !== 'extract');
    const v2Formats = pageFormats.map((format) =>
      format === 'screenshot@fullPage' ? { type: 'screenshot', fullPage: true } : format,
    );
    const { jsonOptions: _json, extract: _extract, ...rest } = body as ScrapeRequest & typeof options;
    await scrape(req, res, 'v1', { ...rest, formats: v2Formats } as ScrapeV2Request, extractions);
  };

  const scrapeV2 = async (req: Request, res: Response) => {
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
        if (!isValidSelector(selector))
          problems.push({
            type: 'value_error',
            loc: ['body', field, index],
            msg: 'Value error, not a valid CSS selector',
            input: selector,
          });
      });
    }
    if (problems.length > 0) throw new RequestValidationError(problems);
    // The LLM formats: {type: "json", schema, prompt} and "summary" (or {type: "summary"}).
    const extractions: Extraction[] = [];
    const pageFormats = (body.formats ?? []).filter((format, index) => {
      const type = typeof format === 'string' ? format : format.type;
      if (type === 'json')
        extractions.push(
          jsonExtraction(
            typeof format === 'string' ? {} : (format as Record<string, unknown>),
            'json',
            `formats.${index}`,
          ),
        );
      else if (type === 'summary') extractions.push({ kind: 'summary' });
      else return true;
      return false;
    });
    await scrape(req, res, 'v2', { ...body, formats: body.formats ? pageFormats : body.formats }, extractions);
  };

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
      ...(limit > SEARCH_RESULTS_MAX
        ? { warning: `At most ${SEARCH_RESULTS_MAX} results are returned per search; ${limit} were asked for.` }
        : {}),
    };
  }

  const searchV1 = async (req: Request, res: Response) => {
    const { hits, taskId, safety, ...warning } = await runSearch(req, res);
    res.json({ success: true, data: hits.map(webResultV1), ...warning, id: taskId, ...safety });
  };

  const searchV2 = async (req: Request, res: Response) => {
    const { hits, taskId, safety, ...warning } = await runSearch(req, res);
    res.json({ success: true, data: { web: hits.map(webResultV2), ...safety }, ...warning, id: taskId });
  };

  const scrape1 = {
    ...FIRECRAWL_ROUTE,
    method: 'post',
    cost: true,
    body: ScrapeBody,
    headers: SCRAPE_KEY,
    errors: SCRAPE_V1_ERRORS,
    handler: scrapeV1,
  } as const;
  const scrape2 = {
    ...FIRECRAWL_ROUTE,
    method: 'post',
    cost: true,
    body: ScrapeV2Body,
    headers: SCRAPE_KEY,
    errors: SCRAPE_ERRORS,
    handler: scrapeV2,
  } as const;
  const search = {
    ...FIRECRAWL_ROUTE,
    method: 'post',
    cost: true,
    body: FirecrawlSearchBody,
    headers: SEARCH_KEY,
    errors: SEARCH_ERRORS,
  } as const;
  return [
    route({
      ...scrape1,
      path: `${COMPAT_SCRAPER_PREFIX}/scrape`,
      summary:
        'Firecrawl v1 compatible scrape (docs/decisions.md lists which options are served, accepted ' + 'or refused)',
    }),
    route({
      ...scrape1,
      path: `${COMPAT_SCRAPER_PREFIX}/v1/scrape`,
      summary: 'The same scrape at the path Firecrawl SDKs build (apiUrl = {base_url}/v1/compat/scraper)',
    }),
    route({
      ...scrape2,
      path: `${COMPAT_SCRAPER_PREFIX}/v2/scrape`,
      summary:
        'Firecrawl v2 compatible scrape: fetched, rendered when the page needs it, actions run in ' +
        'the browser; unserved formats, options and actions are 400 naming them',
    }),
    route({
      ...scrape2,
      path: `${FIRECRAWL_V2_ROOT}/scrape`,
      summary: 'The same v2 scrape at the path firecrawl-py 4.x builds (it drops the base path of its ' + 'apiUrl)',
    }),
    route({
      ...search,
      path: `${COMPAT_SCRAPER_PREFIX}/v1/search`,
      summary: 'Firecrawl v1 compatible search (a web_search task; data is a list of ' + '{url,title,description})',
      handler: searchV1,
    }),
    route({
      ...search,
      path: `${COMPAT_SCRAPER_PREFIX}/v2/search`,
      summary:
        'Firecrawl v2 compatible search (a web_search task; data.web lists ' + '{url,title,description,position})',
      handler: searchV2,
    }),
    route({
      ...search,
      path: `${FIRECRAWL_V2_ROOT}/search`,
      summary: 'The same v2 search at the path firecrawl-py 4.x builds',
      handler: searchV2,
    }),
  ];
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
