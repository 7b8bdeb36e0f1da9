import { setTimeout as delay } from 'node:timers/promises';
import { ScreenshotBody, type ScreenshotRequest } from '../../schemas/requests';
import type { ScreenshotResultData } from '../../schemas/frames';
import { withTimeLimit } from '../abort';
import { toSolverError } from '../errors';
import { openPage, type BrowserPool, type Viewport } from '../browser/browser-pool';
import { settleDeadline } from '../browser/settle';
import type { NetPolicy } from '../net-guard';
import { pngSize } from '../png';
import { parsePayload, type TaskHandler } from './types';

export const DEFAULT_VIEWPORT: Viewport = { width: 1280, height: 800 };
/** Bigger viewports cost memory for nothing a client can use; viewport sizes are hints, so they are clamped. */
export const MAX_VIEWPORT_SIDE = 4096;
/** Chromium cannot capture taller surfaces in one piece; longer pages are cut at this height. */
export const MAX_FULL_PAGE_HEIGHT = 16_384;

export type ScreenshotOptions = { pool: BrowserPool; policy: NetPolicy; timeoutMs: number };

export function requestedViewport(request: ScreenshotRequest): Viewport {
  const width = request.viewport?.width ?? request.viewport_width ?? DEFAULT_VIEWPORT.width;
  const height = request.viewport?.height ?? request.viewport_height ?? DEFAULT_VIEWPORT.height;
  return { width: Math.min(width, MAX_VIEWPORT_SIDE), height: Math.min(height, MAX_VIEWPORT_SIDE) };
}

export function createScreenshotHandler(options: ScreenshotOptions): TaskHandler {
  return async (payload, { signal, deadline }) => {
    const request = parsePayload(ScreenshotBody, payload);
    const settleBy = settleDeadline([Date.now() + options.timeoutMs, deadline], request.wait_ms ?? 0);
    const viewport = requestedViewport(request);
    const limit = withTimeLimit(
      signal,
      options.timeoutMs,
      `the screenshot of ${request.url} took longer than ${options.timeoutMs} ms`,
    );
    try {
      return await options.pool.withPage(viewport, limit.signal, async (page) => {
        await openPage(page, request.url, options.policy, options.timeoutMs, { settleBy });
        if (request.wait_ms) await delay(request.wait_ms, undefined, { signal: limit.signal });
        const pageHeight = request.full_page
          ? await page.evaluate(
              'Math.max(document.documentElement.scrollHeight, document.body ? document.body.scrollHeight ' + ': 0)',
            )
          : 0;
        const tooTall = typeof pageHeight === 'number' && pageHeight > MAX_FULL_PAGE_HEIGHT;
        const png = await page.screenshot({
          type: 'png',
          fullPage: request.full_page,
          animations: 'disabled',
          caret: 'hide',
          ...(tooTall && { clip: { x: 0, y: 0, width: viewport.width, height: MAX_FULL_PAGE_HEIGHT } }),
        });
        const { width, height } = pngSize(png);
        return {
          mime_type: 'image/png',
          image_base64: png.toString('base64'),
          width,
          height,
        } satisfies ScreenshotResultData;
      });
    } catch (error) {
      throw toSolverError(error, limit.signal);
    } finally {
      limit.dispose();
    }
  };
}
