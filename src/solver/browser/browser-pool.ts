import {
  chromium,
  type Browser,
  type BrowserContext,
  type Page,
  type Route,
  type WebSocketRoute,
} from 'playwright-core';
import type { Logger } from '../../logger';
import { SOLVER_ERROR_RETRYABLE, SolverError, firstLine, type SolverErrorType } from '../errors';
import { Semaphore } from '../semaphore';
import { assertTargetAllowed, type NetPolicy } from '../net-guard';
import {
  PROXY_ERROR_HEADER,
  policyResolver,
  startGuardProxy,
  type GuardProxy,
  type TargetResolver,
} from './guard-proxy';
import { PageSettleWatch, type SettleOutcome } from './settle';

/** Flags for a headless Chromium that makes no network traffic of its own and never phones home. */
export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export type Viewport = { width: number; height: number };

export type BrowserPoolOptions = {
  executablePath: string;
  /** Pages open at once; on a 2-core machine throughput peaks at 2. */
  pages: number;
  policy: NetPolicy;
  timeoutMs: number;
  logger?: Logger;
  /** How the guard proxy resolves hosts; defaults to the network policy. Setting it forces the proxy on. */
  proxyResolver?: TargetResolver;
};

/**
 * One warm Chromium shared by all browser tasks, with a bounded number of pages. Every task gets a
 * fresh context (no cookies, storage or cache shared between clients), closed when the task ends or
 * its signal fires; closing the context is what interrupts any Playwright call still running.
 */
export class BrowserPool {
  private launching: Promise<Browser> | undefined;
  private proxy: Promise<GuardProxy> | undefined;
  private readonly slots: Semaphore;
  private closed = false;

  constructor(private readonly options: BrowserPoolOptions) {
    this.slots = new Semaphore(options.pages);
  }

  private get guarded(): boolean {
    return !this.options.policy.allowPrivateNetworks;
  }

  private get proxied(): boolean {
    return this.guarded || this.options.proxyResolver !== undefined;
  }

  async start(): Promise<void> {
    await this.browser();
  }

  async withPage<T>(viewport: Viewport, signal: AbortSignal, task: (page: Page) => Promise<T>): Promise<T> {
    const release = await this.slots.acquire(signal);
    let context: BrowserContext | undefined;
    const closeContext = () => void context?.close().catch(() => undefined);
    try {
      const browser = await this.browser();
      if (signal.aborted) throw signal.reason;
      context = await browser.newContext({ viewport, serviceWorkers: 'block', acceptDownloads: false });
      signal.addEventListener('abort', closeContext, { once: true });
      // An abort while the context was being created fired before anyone listened.
      if (signal.aborted) throw signal.reason;
      context.setDefaultTimeout(this.options.timeoutMs);
      context.setDefaultNavigationTimeout(this.options.timeoutMs);
      if (this.guarded) await guardContext(context, this.options.policy);
      // Closing a context does not always settle a newPage() still in flight: stop waiting on abort.
      const page = await untilAborted(context.newPage(), signal);
      return await task(page);
    } finally {
      signal.removeEventListener('abort', closeContext);
      await context?.close().catch(() => undefined);
      release();
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    const launching = this.launching;
    this.launching = undefined;
    await launching?.then((browser) => browser.close()).catch(() => undefined);
    await this.proxy?.then((proxy) => proxy.close()).catch(() => undefined);
  }

  private browser(): Promise<Browser> {
    if (this.closed) return Promise.reject(new SolverError('shutting_down', 'the browser pool is closed'));
    this.launching ??= this.launch().catch((error) => {
      this.launching = undefined;
      throw new SolverError(
        'internal_error',
        `Chromium could not be started (${this.options.executablePath}): ${firstLine(String(error))}`,
      );
    });
    return this.launching;
  }

  private async launch(): Promise<Browser> {
    const proxy = this.proxied ? await this.guardProxy() : undefined;
    const browser = await chromium.launch({
      executablePath: this.options.executablePath,
      headless: true,
      args: CHROMIUM_ARGS,
      ...(proxy && { proxy: { server: proxy.url } }),
      // Playwright would close Chromium and exit the process on Ctrl-C (or a closed terminal); the program
      // that embeds the agent stops it gracefully instead (running tasks finish, then close()). Chromium
      // still dies with the process.
      handleSIGINT: false,
      handleSIGTERM: false,
      handleSIGHUP: false,
    });
    browser.on('disconnected', () => {
      // A crashed browser is relaunched by the next task.
      if (this.launching && !this.closed)
        this.options.logger?.warn('chromium disconnected; it will be relaunched on demand');
      this.launching = undefined;
    });
    this.options.logger?.info(
      { executablePath: this.options.executablePath, pages: this.options.pages, guardProxy: proxy?.url },
      'chromium started',
    );
    return browser;
  }

  private guardProxy(): Promise<GuardProxy> {
    this.proxy ??= startGuardProxy(this.options.proxyResolver ?? policyResolver(this.options.policy));
    return this.proxy;
  }
}

/** Refuses, per request, any URL whose host the policy refuses; results are cached per host for the task. */
async function guardContext(context: BrowserContext, policy: NetPolicy): Promise<void> {
  const verdicts = new Map<string, Promise<boolean>>();
  const allowed = (raw: string) => {
    let url: URL;
    try {
      url = new URL(raw);
    } catch {
      return Promise.resolve(false);
    }
    if (url.protocol === 'data:' || url.protocol === 'blob:') return Promise.resolve(true);
    const httpUrl = new URL(raw.replace(/^ws(s?):/i, 'http$1:'));
    const key = `${httpUrl.protocol}//${httpUrl.host}`;
    let verdict = verdicts.get(key);
    if (!verdict) {
      verdict = assertTargetAllowed(httpUrl, policy).then(
        () => true,
        () => false,
      );
      verdicts.set(key, verdict);
    }
    return verdict;
  };
  await context.route('**/*', async (route: Route) => {
    const ok = await allowed(route.request().url());
    await (ok ? route.continue() : route.abort('blockedbyclient')).catch(() => undefined);
  });
  await context.routeWebSocket(/.*/, async (socket: WebSocketRoute) => {
    if (await allowed(socket.url())) socket.connectToServer();
    else await socket.close({ code: 1008, reason: 'blocked by the solver network policy' }).catch(() => undefined);
  });
}

export type OpenedPage = { finalUrl: string; status: number | null; settle?: SettleOutcome };

export type OpenPageOptions = {
  /** Settle after `load` (settle.ts) until at most this time (epoch ms); without it the page is used at `load`. */
  settleBy?: number;
};

/**
 * Navigates to a client's URL after checking it. Waits for `load` when it comes in time, but a page
 * whose subresources never finish is still used once its document is there; then, with `settleBy`,
 * waits until the page settles.
 */
export async function openPage(
  page: Page,
  url: string,
  policy: NetPolicy,
  timeoutMs: number,
  options: OpenPageOptions = {},
): Promise<OpenedPage> {
  await assertTargetAllowed(url, policy);
  const hops: string[] = [];
  const onRequest = (request: { url(): string; isNavigationRequest(): boolean; frame(): unknown }) => {
    try {
      if (request.isNavigationRequest() && request.frame() === page.mainFrame()) hops.push(request.url());
    } catch {
      // Requests without a frame (service workers) are not navigation hops.
    }
  };
  page.on('request', onRequest);
  const watch = options.settleBy === undefined ? undefined : new PageSettleWatch(page);
  const started = Date.now();
  try {
    const response = await page.goto(url, { waitUntil: 'domcontentloaded', timeout: timeoutMs });
    const proxyError = response?.headers()[PROXY_ERROR_HEADER];
    if (proxyError) throw await proxyFailure(url, proxyError, response!);
    const remaining = timeoutMs - (Date.now() - started);
    if (remaining > 0) await page.waitForLoadState('load', { timeout: remaining }).catch(() => undefined);
    const settle =
      watch && (await watch.settle(Math.min(options.settleBy! - Date.now(), timeoutMs - (Date.now() - started))));
    return { finalUrl: page.url(), status: response?.status() ?? null, ...(settle ? { settle } : {}) };
  } catch (error) {
    if (error instanceof SolverError) throw error;
    await throwIfAnyHopRefused(hops, policy);
    throw navigationError(url, firstLine((error as Error).message ?? String(error)), timeoutMs);
  } finally {
    page.off('request', onRequest);
    watch?.dispose();
  }
}

/**
 * The page the guard proxy answered in the target's place: the load failed (a refused hop, a name that
 * does not resolve, a connection that failed), so the attempt fails with the proxy's error type rather
 * than delivering the proxy's error page as the target's.
 */
async function proxyFailure(url: string, type: string, response: { text(): Promise<string> }): Promise<SolverError> {
  if (type === 'target_blocked')
    return new SolverError('target_blocked', `navigation to ${url} was redirected to a refused address`);
  const reason = firstLine(await response.text().catch(() => 'the proxy could not reach the target'));
  return new SolverError(
    type in SOLVER_ERROR_RETRYABLE ? (type as SolverErrorType) : 'navigation_failed',
    `could not load ${url}: ${reason}`,
  );
}

/** Chromium network errors that every other solver would hit too are not worth a retry. */
const NAVIGATION_ERRORS: Array<[pattern: RegExp, type: SolverErrorType, explanation: string]> = [
  [/net::ERR_NAME_NOT_RESOLVED/, 'host_not_found', 'the host does not resolve'],
  [
    /net::ERR_HTTP_RESPONSE_CODE_FAILURE/,
    'http_error',
    'the server answered with an HTTP error status and an empty page',
  ],
  [
    /net::ERR_(CERT_[A-Z_]+|SSL_[A-Z_]+|BAD_SSL_CLIENT_AUTH_CERT)/,
    'tls_error',
    'the TLS certificate or handshake was refused',
  ],
  [/net::ERR_BLOCKED_BY_CLIENT/, 'target_blocked', 'the target is refused by the network policy'],
];

function navigationError(url: string, message: string, timeoutMs: number): SolverError {
  if (/Timeout \d+ms exceeded/i.test(message))
    return new SolverError('timeout', `loading ${url} took longer than ${timeoutMs} ms`);
  const known = NAVIGATION_ERRORS.find(([pattern]) => pattern.test(message));
  if (known)
    return new SolverError(known[1], `could not load ${url}: ${known[2]} (${message.match(/net::ERR_[A-Z_]+/)?.[0]})`);
  return new SolverError('navigation_failed', `could not load ${url}: ${message}`);
}

async function throwIfAnyHopRefused(hops: string[], policy: NetPolicy): Promise<void> {
  if (policy.allowPrivateNetworks) return;
  for (const hop of hops) {
    try {
      await assertTargetAllowed(hop, policy);
    } catch (error) {
      if (error instanceof SolverError && error.type === 'target_blocked') throw error;
    }
  }
}

/** `promise`, or the signal's reason as soon as it aborts (the promise's own outcome is then ignored). */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  promise.catch(() => undefined);
  if (signal.aborted) return Promise.reject(signal.reason);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
