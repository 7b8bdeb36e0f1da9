import type { Page, Request } from 'playwright-core';

/**
 * Waiting until a loaded page settles, as Firecrawl waits before it takes a page: scripts that fill
 * the page after `load` (a timer, a request for data and its rendering) get to finish. The page has
 * settled once no request is in flight and its DOM has not changed for SETTLE_QUIET_MS; a page that
 * never does is taken after SETTLE_MAX_MS, or earlier when the attempt's time runs short. A page
 * without scripts is settled at `load`.
 */

/** The quiet time that counts as settled: the network-idle window of Playwright and Puppeteer. */
export const SETTLE_QUIET_MS = 500;
/**
 * The longest settle wait after `load`: a page still loading or changing by then never stops (a clock,
 * a ticker, a long poll), and `waitFor` (`wait_ms`) is how a client asks for more.
 */
export const SETTLE_MAX_MS = 3_000;
/** Kept from the settle wait for taking the content or the screenshot and answering before the deadline. */
export const SETTLE_RESERVE_MS = 1_000;

// Streams stay open by design and never finish: they do not keep the network busy.
const STREAMS = new Set(['eventsource', 'websocket', 'media']);
// The page reports DOM changes through this binding, keeps the time of its last one in this global, and
// the time its own timers last ran in the other (names no page uses).
const CHANGED_BINDING = '__solverPageChanged';
const CHANGED_AT = '__solverPageChangedAt';
const BEAT_AT = '__solverPageBeatAt';
// How often the page's own timer beats, and the gap between beats that counts as a stall.
const BEAT_MS = 100;
/**
 * A page whose timers did not run for this long (its browser starved of CPU, or a long script of its
 * own) has not done yet what it would have done meanwhile: its quiet time starts again when it runs.
 */
const STALL_MS = 250;
/** A global of the page, by name, in the scripts evaluated there. */
const pageGlobal = (name: string) => `window[${JSON.stringify(name)}]`;
/**
 * Evaluated in the page: reports every change of its content, and keeps its time by the page's clock;
 * a stall of its own timers counts as a change, and so does the start of the watch (a page whose last
 * request ended a quiet window before the watch began was not seen to be quiet). Style attributes are left out: animations driven by
 * scripts rewrite them every frame and never change what the page says or shows at rest.
 */
const OBSERVE_CHANGES = `(() => {
  const report = ${pageGlobal(CHANGED_BINDING)};
  if (typeof report !== 'function' || !document.documentElement) return;
  // What changed before the watch began is unknown: its quiet time starts now at the earliest.
  ${pageGlobal(CHANGED_AT)} = Date.now();
  ${pageGlobal(BEAT_AT)} = Date.now();
  setInterval(() => {
    const now = Date.now();
    if (now - ${pageGlobal(BEAT_AT)} > ${STALL_MS}) ${pageGlobal(CHANGED_AT)} = now;
    ${pageGlobal(BEAT_AT)} = now;
  }, ${BEAT_MS});
  new MutationObserver(() => {
    ${pageGlobal(CHANGED_AT)} = Date.now();
    void report().catch(() => undefined);
  }).observe(document.documentElement, {
    subtree: true,
    childList: true,
    characterData: true,
    attributes: true,
    attributeFilter: ['class', 'hidden', 'src', 'srcset', 'open'],
  });
})()`;

/** Evaluated in the page: how long ago it last changed, by its clock; 0 while its timers are stalled. */
const SINCE_CHANGE = `(() => {
  const now = Date.now();
  const beat = ${pageGlobal(BEAT_AT)};
  if (typeof beat === 'number' && now - beat > ${STALL_MS}) return 0;
  return now - (${pageGlobal(CHANGED_AT)} ?? -Infinity);
})()`;

/**
 * Evaluated in the page: true when it runs no script of its own (no script element, no event handler
 * attribute), so nothing can change it after `load`.
 */
const RUNS_NO_SCRIPT = `document.evaluate(
  "count(//*[local-name() = 'script']) + count(//@*[starts-with(name(), 'on')])", document, null, XPathResult.NUMBER_TYPE, null
).numberValue === 0`;

/**
 * When the settle wait has to end: before the attempt's own time limit and its deadline (epoch ms,
 * whichever comes first), less the wait the client asked for and SETTLE_RESERVE_MS.
 */
export function settleDeadline(limits: ReadonlyArray<number | undefined>, waitMs = 0): number {
  const first = Math.min(...limits.filter((limit): limit is number => limit !== undefined && Number.isFinite(limit)));
  return first - waitMs - SETTLE_RESERVE_MS;
}

export type SettleOutcome = { settled: boolean; waitedMs: number };

/**
 * Watches a page's requests from before its navigation, so requests started while it loads count; then
 * `settle()` waits, event by event, for the quiet window.
 */
export class PageSettleWatch {
  private readonly inFlight = new Set<Request>();
  private lastActivity = Date.now();
  private onActivity: (() => void) | undefined;

  constructor(private readonly page: Page) {
    page.on('request', this.started);
    page.on('requestfinished', this.ended);
    page.on('requestfailed', this.ended);
  }

  /** Waits until the page settles, at most `maxMs` (and never past SETTLE_MAX_MS). */
  async settle(maxMs: number): Promise<SettleOutcome> {
    const began = Date.now();
    const budget = Math.min(maxMs, SETTLE_MAX_MS);
    if (budget <= 0) return { settled: false, waitedMs: 0 };
    // A page without scripts (nor frames, whose scripts could reach it) is as it will stay once loaded.
    if (
      this.inFlight.size === 0 &&
      this.page.frames().length === 1 &&
      (await this.page.evaluate(RUNS_NO_SCRIPT).catch(() => false)) === true
    ) {
      return { settled: true, waitedMs: Date.now() - began };
    }
    try {
      await this.page.exposeBinding(CHANGED_BINDING, () => this.activity());
      await this.page.evaluate(OBSERVE_CHANGES);
    } catch {
      // A page that navigates again meanwhile has no observer; its requests still count.
    }
    const settled = await new Promise<boolean>((resolve) => {
      let quiet: NodeJS.Timeout | undefined;
      let done = false;
      const finish = (value: boolean) => {
        if (done) return;
        done = true;
        clearTimeout(quiet);
        clearTimeout(cap);
        this.page.off('close', closed);
        this.onActivity = undefined;
        resolve(value);
      };
      const cap = setTimeout(() => finish(false), budget - (Date.now() - began));
      // A closed page (the attempt aborted) has nothing left to wait for.
      const closed = () => finish(false);
      this.page.once('close', closed);
      // A quiet window seen here may only mean this process was too busy to read the page's reports (its
      // timers run before the reports waiting on its socket): the page's own clock says when it last changed.
      // A beat overdue by a stall's length means the page is stalled now (this check ran before its timer).
      const confirm = async () => {
        const sinceChange = await this.page.evaluate(SINCE_CHANGE).catch(() => undefined);
        if (typeof sinceChange !== 'number' || !(sinceChange < SETTLE_QUIET_MS)) return finish(true);
        this.lastActivity = Math.max(this.lastActivity, Date.now() - Math.max(0, sinceChange));
        this.onActivity?.();
      };
      this.onActivity = () => {
        clearTimeout(quiet);
        if (done || this.inFlight.size > 0) return;
        quiet = setTimeout(() => void confirm(), SETTLE_QUIET_MS - (Date.now() - this.lastActivity));
      };
      this.onActivity();
    });
    return { settled, waitedMs: Date.now() - began };
  }

  dispose(): void {
    this.onActivity = undefined;
    this.page.off('request', this.started);
    this.page.off('requestfinished', this.ended);
    this.page.off('requestfailed', this.ended);
  }

  private activity(): void {
    this.lastActivity = Date.now();
    this.onActivity?.();
  }

  private readonly started = (request: Request) => {
    if (STREAMS.has(request.resourceType())) return;
    this.inFlight.add(request);
    this.activity();
  };

  private readonly ended = (request: Request) => {
    if (!this.inFlight.delete(request)) return;
    this.activity();
  };
}
