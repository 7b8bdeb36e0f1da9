import { setTimeout as delay } from 'node:timers/promises';
import type { Locator, Page } from 'playwright-core';
import { SnapshotFields, actionsWaitMs, type SnapshotRequest } from '../../schemas/requests';
import type { SnapshotResultData } from '../../schemas/frames';
import { withTimeLimit } from '../abort';
import { SolverError, firstLine, toSolverError } from '../errors';
import { openPage, type BrowserPool } from '../browser/browser-pool';
import { runActions } from '../browser/page-actions';
import { settleDeadline } from '../browser/settle';
import { htmlToMarkdown } from '../html/markdown';
import type { NetPolicy } from '../net-guard';
import { DEFAULT_VIEWPORT } from './screenshot';
import { parsePayload, type TaskHandler } from './types';

export type PageSnapshotOptions = {
  pool: BrowserPool;
  policy: NetPolicy;
  timeoutMs: number;
  maxBytes: number;
  /** html mode's bound: a rendered page is cut like a fetched one, not like a snapshot. */
  htmlMaxBytes?: number;
};

type SnapshotFormat = SnapshotResultData['snapshot_format'];

/**
 * A structured view of the rendered page: `aria` is Playwright's ARIA snapshot (YAML), `ai` the same
 * with element references ([ref=e12]) for agents, and no mode gives markdown of the rendered DOM.
 * `selector` narrows any of them to the first element it matches.
 */
export function createPageSnapshotHandler(options: PageSnapshotOptions): TaskHandler {
  return async (payload, { signal, deadline }) => {
    const request = parsePayload(SnapshotFields, payload);
    // The wait asked for and the actions' waits come after the settle wait, within the same time.
    const settleBy = settleDeadline(
      [Date.now() + options.timeoutMs, deadline],
      (request.wait_ms ?? 0) + actionsWaitMs(request.actions ?? []),
    );
    if (request.actions?.length && request.mode !== 'html')
      throw new SolverError('invalid_payload', 'invalid payload: actions need mode "html"');
    const limit = withTimeLimit(
      signal,
      options.timeoutMs,
      `the snapshot of ${request.url} took longer than ${options.timeoutMs} ms`,
    );
    try {
      return await options.pool.withPage(request.viewport ?? DEFAULT_VIEWPORT, limit.signal, async (page) => {
        const { finalUrl, status } = await openPage(page, request.url, options.policy, options.timeoutMs, { settleBy });
        if (request.wait_ms) await delay(request.wait_ms, undefined, { signal: limit.signal });
        if (request.mode === 'html') {
          const actions = request.actions?.length ? await runActions(page, request.actions, limit.signal) : undefined;
          return {
            url: page.url(),
            snapshot: truncate(await page.content(), options.htmlMaxBytes ?? options.maxBytes),
            snapshot_format: 'html',
            title: (await page.title()) || null,
            status_code: status,
            ...(actions ? { actions } : {}),
          } satisfies SnapshotResultData;
        }
        const scope = request.selector ? await selectScope(page, request.selector) : null;
        const format: SnapshotFormat = request.mode ?? 'markdown';
        const snapshot = await takeSnapshot(page, scope, request, finalUrl);
        return {
          url: finalUrl,
          snapshot: truncate(snapshot, options.maxBytes),
          snapshot_format: format,
          title: (await page.title()) || null,
        } satisfies SnapshotResultData;
      });
    } catch (error) {
      throw toSolverError(error, limit.signal);
    } finally {
      limit.dispose();
    }
  };
}

async function selectScope(page: Page, selector: string): Promise<Locator> {
  const matches = page.locator(selector);
  let count: number;
  try {
    count = await matches.count();
  } catch (error) {
    throw new SolverError(
      'invalid_selector',
      `the selector ${JSON.stringify(selector)} is not valid: ${firstLine((error as Error).message)}`,
    );
  }
  if (count === 0)
    throw new SolverError('selector_not_found', `no element matches the selector ${JSON.stringify(selector)}`);
  return matches.first();
}

async function takeSnapshot(
  page: Page,
  scope: Locator | null,
  request: SnapshotRequest,
  finalUrl: string,
): Promise<string> {
  switch (request.mode) {
    case 'aria':
      return scope ? scope.ariaSnapshot() : page.ariaSnapshot();
    case 'ai':
      return scope ? scope.ariaSnapshot({ mode: 'ai' }) : page.ariaSnapshot({ mode: 'ai' });
    default: {
      if (!scope) return htmlToMarkdown(await page.content(), finalUrl).markdown;
      const html = await scope.evaluate((element) => (element as unknown as { outerHTML: string }).outerHTML);
      return htmlToMarkdown(html, finalUrl, { mainContentOnly: false, titleHeading: false }).markdown;
    }
  }
}

/** Cuts at a byte budget (UTF-8) and says so, so a client never mistakes a cut snapshot for the whole page. */
export function truncate(text: string, maxBytes: number): string {
  const bytes = Buffer.byteLength(text);
  if (bytes <= maxBytes) return text;
  const cut = Buffer.from(text)
    .subarray(0, maxBytes)
    .toString('utf8')
    .replace(/\uFFFD$/, '');
  return `${cut}\n\n[snapshot truncated: ${maxBytes} of ${bytes} bytes shown]`;
}
