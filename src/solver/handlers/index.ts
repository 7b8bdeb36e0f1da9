import fs from 'node:fs';
import type { Logger } from '../../logger';
import { CAPABILITY_TASK_TYPES, type CapabilityTaskType } from '../../schemas/domain';
import { BrowserPool } from '../browser/browser-pool';
import type { SolverConfig } from '../config';
import { createSearchBackend } from '../search/create-backend';
import type { NetPolicy } from '../net-guard';
import { createChatCompletionHandler } from './chat-completion';
import { createPageSnapshotHandler } from './page-snapshot';
import { createProxyFetchHandler } from './proxy-fetch';
import { createScreenshotHandler } from './screenshot';
import type { TaskHandler } from './types';
import { createWebSearchHandler } from './web-search';

export type SolverHandlers = Partial<Record<CapabilityTaskType, TaskHandler>>;

export type HandlerSet = {
  handlers: SolverHandlers;
  /** Starts Chromium and loads the search index ahead of the first task. */
  warm(): Promise<void>;
  close(): Promise<void>;
};

const BROWSER_TASKS: readonly CapabilityTaskType[] = ['screenshot', 'page_snapshot'];

/**
 * The task types this solver can serve with its configuration: `SOLVER_TASK_TYPES` when given,
 * otherwise everything that is configured (browser tasks only when Chromium is installed).
 */
export function offeredTaskTypes(config: SolverConfig, logger?: Logger): CapabilityTaskType[] {
  const chromiumInstalled = fs.existsSync(config.chromiumPath);
  if (config.taskTypes) {
    const missing = config.taskTypes.filter((type) => BROWSER_TASKS.includes(type) && !chromiumInstalled);
    if (missing.length > 0)
      throw new Error(`${missing.join(' and ')} need Chromium, which is not at CHROMIUM_PATH=${config.chromiumPath}`);
    return [...config.taskTypes];
  }
  if (!chromiumInstalled)
    logger?.warn(
      { chromiumPath: config.chromiumPath },
      'Chromium not found: screenshot and page_snapshot are not offered',
    );
  return CAPABILITY_TASK_TYPES.filter((type) => {
    if (type === 'web_search') return config.search.backend !== 'none';
    if (type === 'chat_completion') return config.chat !== null;
    if (BROWSER_TASKS.includes(type)) return chromiumInstalled;
    return true;
  });
}

/** Builds the handlers of the given task types, sharing one browser pool between the browser tasks. */
export function createHandlers(
  config: SolverConfig,
  taskTypes: readonly CapabilityTaskType[],
  logger?: Logger,
): HandlerSet {
  const policy: NetPolicy = { allowPrivateNetworks: config.allowPrivateNetworks };
  const handlers: SolverHandlers = {};
  const warmups: Array<() => Promise<unknown>> = [];
  let pool: BrowserPool | undefined;

  if (taskTypes.includes('proxy_fetch')) {
    handlers.proxy_fetch = createProxyFetchHandler({
      policy,
      maxBytes: config.fetchMaxBytes,
      timeoutMs: config.fetchTimeoutMs,
    });
  }
  if (taskTypes.includes('web_search')) {
    const backend = createSearchBackend(config.search);
    if (!backend) throw new Error('web_search is offered but no search backend is configured');
    handlers.web_search = createWebSearchHandler({ backend, timeoutMs: config.fetchTimeoutMs });
    if (backend.warm) warmups.push(() => backend.warm!());
  }
  if (taskTypes.some((type) => BROWSER_TASKS.includes(type))) {
    pool = new BrowserPool({
      executablePath: config.chromiumPath,
      pages: config.browserPages,
      policy,
      timeoutMs: config.browserTimeoutMs,
      logger,
    });
    const browserOptions = { pool, policy, timeoutMs: config.browserTimeoutMs };
    if (taskTypes.includes('screenshot')) handlers.screenshot = createScreenshotHandler(browserOptions);
    if (taskTypes.includes('page_snapshot')) {
      handlers.page_snapshot = createPageSnapshotHandler({
        ...browserOptions,
        maxBytes: config.snapshotMaxBytes,
        htmlMaxBytes: config.fetchMaxBytes,
      });
    }
    const warmPool = pool;
    warmups.push(() => warmPool.start());
  }
  if (taskTypes.includes('chat_completion')) {
    if (!config.chat) throw new Error('chat_completion is offered but CHAT_UPSTREAM_URL is not set');
    handlers.chat_completion = createChatCompletionHandler({
      upstreamUrl: config.chat.upstreamUrl,
      apiKey: config.chat.apiKey,
      models: config.chat.models,
    });
  }

  return {
    handlers,
    warm: async () => {
      const results = await Promise.allSettled(warmups.map((warmup) => warmup()));
      for (const result of results) {
        if (result.status === 'rejected')
          logger?.warn({ err: String(result.reason) }, 'warm-up failed; it is retried on the first task');
      }
    },
    close: async () => {
      await pool?.close();
    },
  };
}
