import { ArtifactMissingError, type ArtifactStore } from '../artifacts/store';
import { readTaskRecord, withArtifacts } from '../tasks/records';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from '@temporalio/client';
import { scrapePage } from '../compat/firecrawl';
import { cacheUrl, FETCHED_VARIANT, maxAgeOf, PageCache, SHARED_SCOPE, type PageCacheKey } from '../compat/page-cache';
import type { Config } from '../config';
import {
  addPages,
  addRobotsBlocked,
  claimPages,
  crawlCounts,
  finishCrawl,
  finishPages,
  getCrawl,
  knownUrls,
  nextPageTask,
  pageTaskOutcomes,
  recordPageTasks,
  recordRobots,
  releasePages,
  runningPages,
  runningPageTasks,
  type CrawlRow,
  type NewPage,
  type PageOutcome,
  type PageRow,
  type PageTaskRow,
} from '../db/crawls';
import { NODE_LIVENESS_SECONDS } from '../db/matching';
import type { Db } from '../db/pool';
import type { NotifyBus } from '../db/notify';
import { getTaskRow, type TaskRow } from '../db/tasks/records';
import { sendPageAttempt } from '../dispatch/page-requests';
import type { Logger } from '../logger';
import type { ScanResult } from '../safety/scanner';
import type { DomainGuard } from '../guard/domain-guard';
import { guardedFetch, SOLVER_USER_AGENT } from '../solver/guarded-fetch';
import type { TaskFinishedWatch } from '../tasks/finished';
import { isTerminalState, type Assignment } from '../contract/lifecycle';
import { newTaskId, type TaskEngine } from '../tasks/engine';
import { taskWorkflowId } from '../contract/workflows';
import { NO_RULES, parseRobots, robotsAllow, type RobotsRules } from './robots';
import { normaliseUrl, outOfScope, type CrawlScope } from './scope';
import { parseSitemap } from './sitemap';
import { Batches } from '../db/batches';

/**
 * Runs crawls and batch scrapes (docs/crawl.md) for the crawl workflow's activities. A job's state is in
 * PostgreSQL; each page is an ordinary proxy_fetch web task (fair queue, trust rules, ledger), created
 * with an idempotency key of the page, so an activity run again after a lost worker finds the task the
 * lost one created instead of creating a second. robots.txt and sitemaps are fetched by the service itself,
 * through the network guard's pinned lookup.
 */

/** What a job was asked for; stored with it. */
export interface CrawlOptions extends Omit<CrawlScope, 'start'> {
  limit: number;
  maxDiscoveryDepth: number | null;
  sitemap: 'include' | 'skip' | 'only';
  ignoreRobotsTxt: boolean;
  /** Seconds between two page fetches; with it, pages are fetched one at a time. */
  delay: number | null;
  maxConcurrency: number;
  scrape: {
    formats: string[];
    onlyMainContent: boolean;
    includeTags?: string[];
    excludeTags?: string[];
    timeoutSeconds?: number;
    /** Firecrawl's maxAge (milliseconds) for the pages; absent, the service's default (docs/crawl.md, "Page cache"). */
    maxAge?: number;
    /** false: the pages fetched are not kept in the page cache. */
    storeInCache?: boolean;
  };
  /** Set once discovery ran: the robots.txt rules the crawl obeys. */
  _robots?: RobotsRules;
}

// robots.txt and sitemaps are small; a bigger answer is not one (and would only cost memory).
const DISCOVERY_MAX_BYTES = 5 * 1024 * 1024;
const DISCOVERY_TIMEOUT_MS = 10_000;
// A sitemap index may name more sitemaps; a site's whole tree is rarely deeper than this.
const MAX_SITEMAPS = 50;
// How often a running slice looks whether its job was cancelled, and waits between task-state reads when
// a task's announcement was missed (the notification connection down).
const CANCEL_CHECK_MS = 250;
const TASK_POLL_MS = 2000;
// A task refused as `solvers_busy` is offered again after the queue's own Retry-After, at most this.
const BUSY_RETRY_MAX_MS = 5000;
// A page whose task failed for want of a solver, not for its target (its solver's node or connection was
// lost and no other solver was online), gets a new task; this many in all. A failed task charges nothing.
// The next one waits until a lost node no longer counts as live, else it would be matched to the same
// vanished connection and fail as fast.
const TASKS_PER_PAGE = 3;
const NEXT_TASK_AFTER_MS = NODE_LIVENESS_SECONDS * 1000;
// The solver's own reasons that say the solver, not the target, could not go on.
const SOLVER_SIDE_ERRORS: ReadonlySet<string> = new Set(['disconnected', 'shutting_down', 'busy', 'internal_error']);
const failedForWantOfASolver = (error: { type?: string; solver_error_type?: string }) =>
  error.type === 'solver_failed' && (!error.solver_error_type || SOLVER_SIDE_ERRORS.has(error.solver_error_type));
// The crawler names itself in robots.txt groups as the solvers do in their User-Agent.
export const CRAWLER_USER_AGENT = SOLVER_USER_AGENT;

export interface CrawlRunnerDeps {
  config: Config;
  db: Db;
  logger: Logger;
  temporal: Client;
  /** Sends pages' first attempts to the API nodes holding their solvers' sockets. */
  bus: NotifyBus;
  domainPolicy: DomainGuard;
  finished: TaskFinishedWatch;
  /**
   * Starts and cancels the pages' tasks, and makes the effects due after each commit (the crawl's and pages'
   * webhooks too).
   */
  engine: TaskEngine;
  artifacts: ArtifactStore;
}

const scopeOf = (crawl: CrawlRow, options: CrawlOptions): CrawlScope => ({
  start: crawl.url!,
  includePaths: options.includePaths,
  excludePaths: options.excludePaths,
  crawlEntireDomain: options.crawlEntireDomain,
  allowSubdomains: options.allowSubdomains,
  allowExternalLinks: options.allowExternalLinks,
  ignoreQueryParameters: options.ignoreQueryParameters,
  regexOnFullURL: options.regexOnFullURL,
});

/** Cancels each task (TaskEngine.cancelNow). A task that has ended already stays as it is. */
export async function cancelTasks(deps: { engine: TaskEngine }, taskIds: readonly string[]): Promise<void> {
  await Promise.all(taskIds.map((taskId) => deps.engine.cancelNow(taskId)));
}

/** A document (robots.txt, a sitemap) fetched by the service; null when there is none to read. */
export async function fetchDiscoveryDocument(
  deps: Pick<CrawlRunnerDeps, 'config' | 'domainPolicy' | 'logger'>,
  url: string,
): Promise<string | null> {
  if (!(await deps.domainPolicy.check(url)).allowed) return null;
  try {
    const response = await guardedFetch(url, {
      policy: { allowPrivateNetworks: deps.config.allowPrivateNetworks },
      signal: AbortSignal.timeout(DISCOVERY_TIMEOUT_MS),
      maxBytes: DISCOVERY_MAX_BYTES,
    });
    return response.status >= 200 && response.status < 300 ? response.body.toString('utf8') : null;
  } catch (error) {
    deps.logger.info({ err: error, url }, 'crawl discovery document not fetched');
    return null;
  }
}

/** The URLs of the site's sitemaps: those robots.txt names, else /sitemap.xml; sitemap indexes followed. */
export async function sitemapUrls(
  deps: Pick<CrawlRunnerDeps, 'config' | 'domainPolicy' | 'logger'>,
  start: string,
  named: readonly string[],
): Promise<string[]> {
  const queue = named.length > 0 ? [...named] : [new URL('/sitemap.xml', start).href];
  const seen = new Set<string>();
  const urls: string[] = [];
  while (queue.length > 0 && seen.size < MAX_SITEMAPS) {
    const next = queue.shift()!;
    if (seen.has(next)) continue;
    seen.add(next);
    const xml = await fetchDiscoveryDocument(deps, next);
    if (!xml) continue;
    const parsed = parseSitemap(xml);
    urls.push(...parsed.urls);
    queue.push(...parsed.sitemaps);
  }
  return urls;
}

/**
 * What a slice knows of its job's URLs, so that a link seen again is not judged again: the URLs that are
 * pages of the job or were refused (robots.txt, the domain policy), and whether the job has no room left.
 */
interface Discovery {
  judged: Set<string>;
  full: boolean;
}

export class CrawlRunner {
  // The pages' bookkeeping, written for many pages of the running slices at once (src/db/batches.ts).
  private readonly pageTasks = new Batches<{ pageId: number; taskId: string }, void>(async (pages) => {
    await recordPageTasks(this.deps.db, pages);
    return pages.map(() => undefined);
  });
  private readonly taskReads = new Batches<string, PageTaskRow | null>(async (taskIds) => {
    const rows = new Map((await pageTaskOutcomes(this.deps.db, taskIds)).map((row) => [row.task_id, row]));
    return taskIds.map((taskId) => rows.get(taskId) ?? null);
  });
  private readonly pageEnds = new Batches<{ pageId: number; outcome: PageOutcome }, void>(async (pages) => {
    this.deps.engine.afterCommit(await finishPages(this.deps.db, pages));
    return pages.map(() => undefined);
  });

  // Pages fetched before, served within the job's maxAge without a task.
  private readonly pageCache: PageCache;

  constructor(private readonly deps: CrawlRunnerDeps) {
    this.pageCache = new PageCache({ db: deps.db, artifacts: deps.artifacts });
  }

  private finishPage(pageId: number, outcome: PageOutcome): Promise<void> {
    return this.pageEnds.add({ pageId, outcome });
  }

  /** What the page needs of its ended task, its result's artifacts read back. */
  private async readPageTask(taskId: string): Promise<PageTaskRow | null> {
    try {
      return await withArtifacts(this.deps.artifacts, await this.taskReads.add(taskId));
    } catch (error) {
      if (!(error instanceof ArtifactMissingError)) throw error;
      // Purged between the two reads: the task's record says so.
      return readTaskRecord(this.deps, taskId);
    }
  }

  /**
   * A crawl's first step: reads robots.txt and (unless `sitemap: skip`) the sitemaps, and adds the start
   * page and the sitemap's pages in scope. Idempotent: done once the robots rules are stored.
   */
  async seed(crawlId: string): Promise<void> {
    const crawl = await getCrawl(this.deps.db, crawlId);
    if (!crawl || crawl.kind !== 'crawl' || crawl.status !== 'scraping') return;
    const options = crawl.options as CrawlOptions;
    if (options._robots) return;
    const start = crawl.url!;
    const robotsText = options.ignoreRobotsTxt
      ? null
      : await fetchDiscoveryDocument(this.deps, new URL('/robots.txt', start).href);
    const robots = robotsText ? parseRobots(robotsText, CRAWLER_USER_AGENT) : NO_RULES;
    const candidates: NewPage[] = [{ url: start, depth: 0 }];
    if (options.sitemap !== 'skip') {
      for (const url of await sitemapUrls(this.deps, start, robots.sitemaps)) candidates.push({ url, depth: 1 });
    }
    const scope = scopeOf(crawl, options);
    const { pages, blocked } = await this.admissible(crawl, scope, robots, candidates, true);
    await addPages(this.deps.db, crawlId, pages, options.limit);
    await recordRobots(this.deps.db, crawlId, robots as unknown as Record<string, unknown>, blocked);
  }

  /**
   * The candidates the crawl takes: normalised, deduplicated, in scope, allowed by robots.txt and the
   * domain policy. With a slice's `discovery`, URLs it judged already are skipped, and once the job is
   * full only robots.txt's refusals are looked for (the job's list of them is complete either way).
   */
  private async admissible(
    crawl: CrawlRow,
    scope: CrawlScope,
    robots: RobotsRules,
    candidates: NewPage[],
    startIncluded = false,
    discovery?: Discovery,
  ) {
    const byUrl = new Map<string, number>();
    for (const [index, candidate] of candidates.entries()) {
      const url = normaliseUrl(candidate.url, scope.ignoreQueryParameters);
      if (!url || byUrl.has(url) || discovery?.judged.has(url)) continue;
      // The start page is what was asked for: only robots.txt and the policy can refuse it.
      if (!(startIncluded && index === 0) && outOfScope(scope, url)) continue;
      byUrl.set(url, candidate.depth);
    }
    const known = discovery?.full
      ? new Set<string>()
      : await knownUrls(this.deps.db, crawl.crawl_id, [...byUrl.keys()]);
    const pages: NewPage[] = [];
    const blocked: string[] = [];
    for (const [url, depth] of byUrl) {
      if (known.has(url)) {
        discovery?.judged.add(url);
        continue;
      }
      if (!robotsAllow(robots, url)) {
        blocked.push(url);
        discovery?.judged.add(url);
        continue;
      }
      if (discovery?.full) continue;
      if (!(await this.deps.domainPolicy.check(url)).allowed) {
        discovery?.judged.add(url);
        continue;
      }
      pages.push({ url, depth });
    }
    return { pages, blocked };
  }

  /**
   * Crawls up to `budget` pages of the job, `maxConcurrency` at a time, and returns whether the job is
   * over. Pages an earlier run left running (its worker lost) are taken up again first: creating their
   * task again returns the task the lost run created. A cancel stops new pages at once and waits for the
   * running ones' tasks, which it has cancelled, to end.
   */
  async runSlice(
    crawlId: string,
    budget: number,
    heartbeat: () => void,
    stop: AbortSignal,
  ): Promise<{ done: boolean }> {
    const { db } = this.deps;
    const crawl = await getCrawl(db, crawlId);
    if (!crawl) return { done: true };
    const options = crawl.options as CrawlOptions;
    let state = crawl.status;
    const watch = setInterval(() => {
      heartbeat();
      getCrawl(db, crawlId)
        .then((now) => {
          if (now && now.status !== 'scraping' && state === 'scraping') {
            state = now.status;
            // The cancel route stopped the tasks it saw; tasks created since are stopped here.
            void runningPageTasks(db, crawlId)
              .then((ids) => cancelTasks(this.deps, ids))
              .catch(() => undefined);
          }
        })
        .catch(() => undefined);
    }, CANCEL_CHECK_MS);
    const concurrency = options.delay ? 1 : options.maxConcurrency;
    const queue: PageRow[] = state === 'scraping' ? await runningPages(db, crawlId) : [];
    const inFlight = new Set<Promise<void>>();
    const discovery: Discovery = { judged: new Set(), full: false };
    let started = 0;
    let failure: string | null = null;
    try {
      for (;;) {
        while (state === 'scraping' && !failure && !stop.aborted && inFlight.size < concurrency && started < budget) {
          // A claim takes as many pages as the crawl may run at once: one statement for many pages.
          if (queue.length === 0)
            queue.push(...(await claimPages(db, crawlId, Math.min(concurrency, budget - started))));
          const page = queue.shift();
          if (!page) break;
          started += 1;
          const run = this.crawlPage(crawl, options, page, () => state, discovery)
            .catch((error: unknown) => {
              if (error instanceof CrawlStopped) failure = error.message;
              else throw error;
            })
            .finally(() => inFlight.delete(run));
          inFlight.add(run);
          if (options.delay) await sleep(options.delay * 1000);
        }
        if (inFlight.size === 0) break;
        await Promise.race(inFlight);
      }
    } finally {
      clearInterval(watch);
      // Claimed but not started (the slice stopped first): pending again, or cancelled with the job. Left
      // running (the database unreachable), the next slice takes them up.
      await releasePages(
        db,
        crawlId,
        queue.map((page) => page.page_id),
      ).catch(() => undefined);
    }
    if (stop.aborted) throw stop.reason ?? new Error('crawl slice cancelled');
    if (failure) {
      this.deps.engine.afterCommit(await finishCrawl(db, crawlId, 'failed', failure));
      await cancelTasks(this.deps, await runningPageTasks(db, crawlId));
      return { done: true };
    }
    if (state !== 'scraping') return { done: true };
    const counts = await crawlCounts(db, crawlId);
    if (counts.pending === 0 && counts.running === 0) {
      this.deps.engine.afterCommit(await finishCrawl(db, crawlId, 'completed'));
      return { done: true };
    }
    return { done: false };
  }

  /** One page: its task (created, or found again), its verdict, its document and the links it adds. */
  private async crawlPage(
    crawl: CrawlRow,
    options: CrawlOptions,
    claimed: PageRow,
    state: () => string,
    discovery: Discovery,
  ): Promise<void> {
    // A crawl's page is a public page fetched with nothing of the client's: shared. One taken up again
    // with its task named is that task's.
    const cacheKey: PageCacheKey = { url: cacheUrl(claimed.url), variant: FETCHED_VARIANT, scope: SHARED_SCOPE };
    if (claimed.task_id === null) {
      const cached = await this.pageCache.find(
        cacheKey,
        maxAgeOf(options.scrape.maxAge, this.deps.config.pageCacheDefaultMaxAgeMs),
      );
      if (cached) {
        await this.pageDone(
          crawl,
          options,
          claimed,
          cached.result,
          { taskIds: [], pointsCharged: '0', cache: { cacheState: 'hit', cachedAt: cached.cachedAt } },
          discovery,
        );
        return;
      }
    }
    const { db } = this.deps;
    let page = claimed;
    let taskId: string | null;
    let task: PageTaskRow | null;
    for (;;) {
      taskId = await this.pageTask(crawl, options, page);
      if (!taskId) return;
      if (state() !== 'scraping') await cancelTasks(this.deps, [taskId]);
      await this.waitForTask(taskId);
      task = await this.readPageTask(taskId);
      const lost = task?.status === 'failed' && failedForWantOfASolver((task.error ?? {}) as { type?: string });
      if (!lost || page.task_attempts + 1 >= TASKS_PER_PAGE || state() !== 'scraping') break;
      const until = Date.now() + NEXT_TASK_AFTER_MS;
      while (Date.now() < until && state() === 'scraping') await sleep(CANCEL_CHECK_MS);
      if (state() !== 'scraping') break;
      page = { ...page, task_id: null, task_attempts: await nextPageTask(db, page.page_id, page.task_attempts) };
    }
    if (task?.status !== 'completed' || !task.result) {
      const error = (task?.error ?? {}) as { type?: string; message?: string };
      const cancelled = task?.status === 'cancelled';
      await this.finishPage(page.page_id, {
        status: cancelled ? 'cancelled' : 'failed',
        error: {
          code: error.type ?? task?.status ?? 'task_failed',
          message: error.message ?? `The page's task ended ${task?.status ?? 'missing'}.`,
        },
      });
      return;
    }
    // The page is done either way: a cache write that fails costs only a later hit.
    if (options.scrape.storeInCache !== false) {
      await this.pageCache
        .keep(cacheKey, taskId)
        .catch((error: unknown) => this.deps.logger.warn({ err: error, task_id: taskId }, 'page not cached'));
    }
    await this.pageDone(
      crawl,
      options,
      page,
      task.result,
      { taskIds: [taskId], pointsCharged: task.charged_points, cache: { cacheState: 'miss' } },
      discovery,
    );
  }

  /** A page fetched (by its task, or before, from the page cache): its document, and the links it adds. */
  private async pageDone(
    crawl: CrawlRow,
    options: CrawlOptions,
    page: PageRow,
    fetched: Record<string, unknown>,
    source: { taskIds: string[]; pointsCharged: string; cache: { cacheState: 'hit' | 'miss'; cachedAt?: string } },
    discovery: Discovery,
  ): Promise<void> {
    const { db } = this.deps;
    const result = fetched as {
      final_url?: string;
      content?: string;
      content_type?: string;
      status_code?: number;
      title?: string | null;
      safety?: ScanResult;
    };
    const deeper = options.maxDiscoveryDepth === null || page.depth < options.maxDiscoveryDepth;
    const follows = crawl.kind === 'crawl' && options.sitemap !== 'only' && deeper && result.content_type === 'html';
    const { document, links } = scrapePage(
      {
        url: page.url,
        formats: options.scrape.formats,
        onlyMainContent: options.scrape.onlyMainContent,
        tags: { include: options.scrape.includeTags, exclude: options.scrape.excludeTags },
        parts: {
          page: {
            content: result.content ?? '',
            kind: result.content_type === 'html' ? 'html' : 'text',
            finalUrl: result.final_url ?? page.url,
            statusCode: result.status_code ?? null,
            title: result.title ?? null,
          },
          taskIds: source.taskIds,
          scans: result.safety ? [{ name: 'rawHtml', safety: result.safety }] : [],
        },
      },
      follows,
    );
    // Its links are added before the page ends: a slice lost in between takes the page up again (its task
    // found again) and adds them again, where adding them after would lose them with the slice.
    if (follows) {
      const candidates = links.map((url) => ({ url, depth: page.depth + 1 }));
      const { pages, blocked } = await this.admissible(
        crawl,
        scopeOf(crawl, options),
        options._robots ?? NO_RULES,
        candidates,
        false,
        discovery,
      );
      const { added, full } = await addPages(db, crawl.crawl_id, pages, options.limit);
      for (const url of added) discovery.judged.add(url);
      if (full) discovery.full = true;
      await addRobotsBlocked(db, crawl.crawl_id, blocked);
    }
    await this.finishPage(page.page_id, {
      status: 'completed',
      document: {
        ...document,
        metadata: { ...document.metadata, ...source.cache, pointsCharged: source.pointsCharged },
      },
    });
  }

  /**
   * Creates the page's task (or finds the one created before), and names it on the page; null when the page
   * ended instead.
   */
  private async pageTask(crawl: CrawlRow, options: CrawlOptions, page: PageRow): Promise<string | null> {
    const { db, config } = this.deps;
    for (;;) {
      const taskId = newTaskId();
      const outcome = await this.deps.engine.createWithFirstAttempt(
        {
          taskId,
          accountId: crawl.account_id,
          keyId: crawl.key_id ?? undefined,
          taskType: 'proxy_fetch',
          payload: {
            url: page.url,
            raw_html: true,
            ...(options.scrape.timeoutSeconds ? { timeout: options.scrape.timeoutSeconds } : {}),
          },
          maxPricePoints: config.defaultWebTaskPricePoints,
          timeoutSeconds: options.scrape.timeoutSeconds ?? config.defaultTaskTimeoutSeconds,
          workflowId: taskWorkflowId(taskId),
          // The page's first task keeps the key it always had; a later one is numbered.
          // A page's key is the service's own, sent only while its job runs: not looked for past its window first.
          idempotency: {
            key: `crawl:${crawl.crawl_id}:${page.page_id}${page.task_attempts > 0 ? `:${page.task_attempts}` : ''}`,
            fingerprint: crawl.crawl_id,
            expiry: 'purge',
          },
          admission: { maxQueued: config.queueLimitPerTaskType },
          // Matched as it is created, so that its first attempt can go out without a workflow.
          match: {},
        },
        {
          stored: (task) => this.pageTasks.add({ pageId: page.page_id, taskId: task.task_id }),
          sendFirst: (task, assignment) => this.sendFirstAttempt(task, assignment),
        },
      );
      switch (outcome.kind) {
        case 'existing':
          await this.pageTasks.add({ pageId: page.page_id, taskId: outcome.task.task_id });
          return outcome.task.task_id;
        case 'created':
          return outcome.task.task_id;
        case 'solvers_busy':
          await sleep(Math.min(outcome.retryAfterSeconds * 1000, BUSY_RETRY_MAX_MS));
          continue;
        case 'insufficient_balance':
        case 'key_spend_limit_reached': {
          const message =
            outcome.kind === 'insufficient_balance'
              ? `The account cannot hold ${outcome.requiredPoints} points for the next page; the crawl stopped.`
              : `The API key's spend limit does not leave ${outcome.requiredPoints} points for the next ` +
                `page; the crawl stopped.`;
          await this.finishPage(page.page_id, { status: 'cancelled', error: { code: outcome.kind, message } });
          throw new CrawlStopped(message);
        }
        default:
          await this.finishPage(page.page_id, {
            status: 'failed',
            error: { code: outcome.kind, message: `The page's task was not created (${outcome.kind}).` },
          });
          return null;
      }
    }
  }

  /**
   * Sends the page's first attempt to the API node holding its solver's socket, which runs it without a
   * workflow (docs/crawl.md, "Throughput"); false when it could not be sent, and the task's workflow runs it.
   */
  private async sendFirstAttempt(task: TaskRow, assignment: Assignment): Promise<boolean> {
    const { config } = this.deps;
    try {
      await sendPageAttempt(this.deps.bus, {
        taskId: task.task_id,
        taskType: task.task_type,
        assignment,
        payload: task.payload,
        // As the task's workflow bounds an attempt.
        deadlineMs: Date.now() + Math.min(config.attemptTimeoutSeconds, task.timeout_seconds) * 1000,
      });
      return true;
    } catch (error) {
      this.deps.logger.warn({ err: error, task_id: task.task_id }, 'page attempt not sent; its workflow runs it');
      return false;
    }
  }

  private async waitForTask(taskId: string): Promise<void> {
    const announced = this.deps.finished.wait(taskId);
    try {
      // The announcement usually comes first (the watch remembers recent ones); the row is read only
      // when it is late, as when the notification connection was down.
      for (;;) {
        if ((await Promise.race([announced.finished, sleep(TASK_POLL_MS)])) !== undefined) return;
        const row = await getTaskRow(this.deps.db, taskId);
        if (!row || isTerminalState(row.status)) return;
      }
    } finally {
      announced.stop();
    }
  }
}

/** The job cannot go on (its account cannot pay for another page): it ends `failed` with this message. */
class CrawlStopped extends Error {}
