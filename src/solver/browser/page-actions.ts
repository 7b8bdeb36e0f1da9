import { setTimeout as delay } from 'node:timers/promises';
import type { Page } from 'playwright-core';
import type { PageActionStep } from '../../schemas/requests';
import type { SnapshotResultData } from '../../schemas/frames';
import { SolverError, firstLine } from '../errors';

/** Runs Firecrawl's actions on a loaded page, in the task's own browser context (and so behind its network guard). */

export type ActionsResult = NonNullable<SnapshotResultData['actions']>;

// An element that has not appeared by then is taken as missing: a scrape fails fast rather than at its deadline.
export const ACTION_ELEMENT_TIMEOUT_MS = 5_000;

/**
 * Evaluated in the page: the script's value as an expression or statements (eval), or as a function body when it
 * returns.
 */
const RUN_SCRIPT = `async (source) => {
  let value;
  try {
    value = (0, eval)(source);
  } catch (error) {
    if (!(error instanceof SyntaxError)) throw error;
    value = new Function(source)();
  }
  value = await value;
  const json = JSON.stringify(value);
  return { type: typeof value, value: json === undefined ? null : JSON.parse(json) };
}`;

function describe(action: PageActionStep, index: number): string {
  const detail =
    'selector' in action && action.selector
      ? ` ${JSON.stringify(action.selector)}`
      : action.type === 'press'
        ? ` ${JSON.stringify(action.key)}`
        : '';
  return `action ${index} (${action.type}${detail})`;
}

export async function runActions(
  page: Page,
  actions: readonly PageActionStep[],
  signal: AbortSignal,
): Promise<ActionsResult> {
  const result: ActionsResult = { screenshots: [], scrapes: [], javascript_returns: [] };
  for (const [index, action] of actions.entries()) {
    try {
      await runAction(page, action, signal, result);
    } catch (error) {
      if (signal.aborted) throw error;
      throw new SolverError(
        'action_failed',
        `${describe(action, index)} failed: ${firstLine(error instanceof Error ? error.message : String(error))}`,
      );
    }
  }
  return result;
}

async function runAction(
  page: Page,
  action: PageActionStep,
  signal: AbortSignal,
  result: ActionsResult,
): Promise<void> {
  const timeout = ACTION_ELEMENT_TIMEOUT_MS;
  switch (action.type) {
    case 'wait':
      if (action.selector) await page.locator(action.selector).first().waitFor({ state: 'visible', timeout });
      else await delay(action.milliseconds ?? 0, undefined, { signal });
      return;
    case 'click':
      if (action.all) {
        const matches = await page.locator(action.selector).all();
        if (matches.length === 0) throw new Error('no element matches the selector');
        for (const element of matches) await element.click({ timeout });
      } else {
        await page.locator(action.selector).first().click({ timeout });
      }
      return;
    case 'write':
      await page.keyboard.type(action.text);
      return;
    case 'press':
      await page.keyboard.press(action.key);
      return;
    case 'scroll': {
      const sign = action.direction === 'up' ? -1 : 1;
      if (action.selector) {
        const element = page.locator(action.selector).first();
        await element.waitFor({ state: 'attached', timeout });
        await element.evaluate((node, by) => {
          const box = node as unknown as { scrollBy(x: number, y: number): void; clientHeight: number };
          box.scrollBy(0, by * box.clientHeight);
        }, sign);
      } else {
        await page.evaluate(`window.scrollBy(0, ${sign} * window.innerHeight)`);
      }
      return;
    }
    case 'screenshot': {
      if (action.viewport) await page.setViewportSize(action.viewport);
      const png = await page.screenshot({
        type: 'png',
        fullPage: action.fullPage === true,
        animations: 'disabled',
        caret: 'hide',
      });
      result.screenshots.push(png.toString('base64'));
      return;
    }
    case 'scrape':
      result.scrapes.push({ url: page.url(), html: await page.content() });
      return;
    case 'executeJavascript': {
      const returned = (await page.evaluate(`(${RUN_SCRIPT})(${JSON.stringify(action.script)})`)) as {
        type: string;
        value: unknown;
      };
      result.javascript_returns.push(returned);
      return;
    }
  }
}
