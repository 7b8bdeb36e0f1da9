import dns from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import type { TaskMessage } from '../../src/schemas/frames';
import type { SolverFrameInput } from './fake-solver';
import { encodeGrayPng } from '../../src/trust/png';
import { modelAnswer } from './chat-answers';
import type { Db } from '../../src/db/pool';

/**
 * Scripted solver behaviours, honest and cheating, shared by the trust tests and the benchmark's trust
 * phase (docs/trust.md, "Detection"). Each takes a task frame and a connection that sends frames (a
 * test's FakeSolver or the benchmark's SimSolver) and answers like that kind of solver would.
 */

export interface FrameSink {
  send(frame: SolverFrameInput): void;
}
export type Script = (frame: TaskMessage, self: FrameSink) => void | Promise<void>;

/** A page's text as a fetch in markdown mode returns it (markup and extra whitespace dropped). */
export const pageText = (html: string) => html.replace(/<[^>]+>/g, ' ').replace(/\s+/g, ' ').trim();

function fetchResult(url: string, text: string, taskType: string) {
  return taskType === 'page_snapshot'
    ? { url, snapshot: text, snapshot_format: 'markdown', title: 'Page' }
    : { url, final_url: url, status_code: 200, content_type: 'markdown', content: text, title: 'Page' };
}

/**
 * Names under `localhost` resolve to the loopback address, as browsers and the reference solver resolve
 * them (RFC 6761; the system resolver here does not): the local stack's canary pages are served there,
 * as a deployment's are under a wildcard DNS name.
 */
const localNames = (hostname: string, options: dns.LookupOptions, callback: (...args: any[]) => void) => {
  if (!/\.localhost\.?$/i.test(hostname)) return dns.lookup(hostname, options, callback);
  if (options.all) return callback(null, [{ address: '127.0.0.1', family: 4 }]);
  callback(null, '127.0.0.1', 4);
};

/** GETs a page's body as text, resolving names under localhost to the loopback address. */
export function fetchPage(url: string): Promise<string> {
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    (target.protocol === 'https:' ? https : http)
      .get(target, { lookup: localNames as never }, (response) => {
        let body = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => (body += chunk));
        response.on('end', () => resolve(body));
        response.on('error', reject);
      })
      .on('error', reject);
  });
}

/**
 * Fetches the page it is given and returns its text (proxy_fetch and page_snapshot); a target that fails
 * is reported as the reference solver reports it (src/solver/guarded-fetch.ts).
 */
export const honestFetch: Script = async (frame, self) => {
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  const url = String(frame.payload.url);
  let html: string;
  try {
    html = await fetchPage(url);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const type = code === 'ENOTFOUND' ? 'host_not_found' : code === 'ECONNREFUSED' ? 'connection_refused' : 'fetch_failed';
    self.send({ type: 'error', attempt_id: frame.attempt_id, error: { type, message: `could not fetch ${url}: ${code}` }, retryable: type === 'fetch_failed' });
    return;
  }
  self.send({ type: 'result', attempt_id: frame.attempt_id, result: fetchResult(url, pageText(html), frame.task_type) });
};

/**
 * Dodges work: claims that the target failed (`type`, a solver error type that says so), whatever the
 * task, canaries included, hoping the service holds nothing against it.
 */
export const claimsTargetFailed =
  (type = 'host_not_found'): Script =>
  (frame, self) => {
    self.send({ type: 'accept', attempt_id: frame.attempt_id });
    self.send({ type: 'error', attempt_id: frame.attempt_id, error: { type, message: `could not fetch ${String(frame.payload.url)}` }, retryable: false });
  };

/** Answers every fetch with a page it made up, whatever the URL. */
export const fabricatedFetch: Script = (frame, self) => {
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  self.send({ type: 'result', attempt_id: frame.attempt_id, result: fetchResult(String(frame.payload.url), '# Hello', frame.task_type) });
};

/**
 * Stale content: fetches the first page it is asked for on each origin for real, and from then on
 * answers every fetch (and snapshot) of that origin with that old text, as a cache keyed by origin
 * would. A cache keyed by the whole URL would fetch every canary fresh (their URLs never repeat), so
 * the cheat that saves fetches caches coarser than that.
 */
export function staleByOrigin(): Script {
  const cache = new Map<string, Promise<string>>();
  return async (frame, self) => {
    self.send({ type: 'accept', attempt_id: frame.attempt_id });
    const url = String(frame.payload.url);
    const origin = new URL(url).origin;
    let text = cache.get(origin);
    if (!text) {
      text = fetchPage(url).then(pageText);
      cache.set(origin, text);
    }
    self.send({ type: 'result', attempt_id: frame.attempt_id, result: fetchResult(url, await text, frame.task_type) });
  };
}

/**
 * The cheat (docs/trust.md, "Canary pages"): fetches honestly only what looks like a check, a
 * URL whose path has `/canary/` or that sits on the API's origin (`apiOrigin`), and makes the rest up.
 */
export function fetchesOnlyLikelyChecks(apiOrigin: string): Script {
  return async (frame, self) => {
    const url = new URL(String(frame.payload.url));
    if (url.pathname.includes('/canary/') || url.origin === new URL(apiOrigin).origin) return honestFetch(frame, self);
    return fabricatedFetch(frame, self);
  };
}

/**
 * A smarter cheat: a check is a page it has never been sent before, so it fetches honestly every URL on
 * a host it has not seen in an earlier task, and makes up every later page of a host it knows.
 */
export function fetchesOnlyNewHosts(): Script {
  const seen = new Set<string>();
  return async (frame, self) => {
    const host = new URL(String(frame.payload.url)).host;
    if (seen.has(host)) return fabricatedFetch(frame, self);
    seen.add(host);
    return honestFetch(frame, self);
  };
}

/**
 * Smarter still: the first task a new solver is sent is its probation canary, so the parent domain of
 * that URL is the canary domain. It fetches honestly every URL under a domain its first task showed
 * it, and makes up the rest.
 */
export function learnsCanaryDomain(): Script {
  const canaryDomains = new Set<string>();
  const parent = (host: string) => host.split('.').slice(1).join('.') || host;
  return async (frame, self) => {
    const host = new URL(String(frame.payload.url)).hostname;
    if (canaryDomains.size === 0) canaryDomains.add(parent(host));
    if (canaryDomains.has(parent(host))) return honestFetch(frame, self);
    return fabricatedFetch(frame, self);
  };
}

/**
 * Whether a task looks like a check to a cheat that has read docs/trust.md: a page on a name under
 * `localhost` (where a local stack serves canary pages), a `/canary/` path, or the API's own origin.
 */
export const suspectsCheck = (frame: TaskMessage, apiOrigin: string) => {
  const url = new URL(String(frame.payload.url));
  return url.hostname.endsWith('.localhost') || url.pathname.includes('/canary/') || url.origin === new URL(apiOrigin).origin;
};

/** Fetches honestly every URL it suspects is a check (`suspectsCheck`), and makes up every other page. */
export function fetchesSuspectedChecks(apiOrigin: string): Script {
  return (frame, self) => (suspectsCheck(frame, apiOrigin) ? honestFetch(frame, self) : fabricatedFetch(frame, self));
}

/** Passes every check it suspects, fetches client pages honestly but makes up one in `every`. */
export function fabricatesOneIn(every: number, apiOrigin: string): Script {
  let clientPages = 0;
  return (frame, self) => {
    if (suspectsCheck(frame, apiOrigin)) return honestFetch(frame, self);
    clientPages += 1;
    return clientPages % every === 0 ? fabricatedFetch(frame, self) : honestFetch(frame, self);
  };
}

const SHOT = { width: 1280, height: 800 };
let blankShot: string | undefined;
let pageLikeShot: string | undefined;

/** Answers every screenshot with a blank white image of the viewport's size, rendering nothing. */
export const blankScreenshot: Script = (frame, self) => {
  blankShot ??= encodeGrayPng(SHOT.width, SHOT.height, () => 255).toString('base64');
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  self.send({ type: 'result', attempt_id: frame.attempt_id, result: { mime_type: 'image/png', image_base64: blankShot, ...SHOT } });
};

/**
 * Answers every screenshot with one made-up image drawn to look like a simple page: a heading and a few
 * lines of dark text at the top left, white below, the layout most client pages share.
 */
export const pageLikeScreenshot: Script = (frame, self) => {
  const dark = (x: number, y: number) => {
    const line = Math.floor((y - 20) / 30);
    const inLine = (y - 20) % 30 < (line === 0 ? 26 : 14);
    return x >= 8 && y >= 20 && line < 5 && inLine && x < (line === 0 ? 700 : 1200 - line * 90);
  };
  pageLikeShot ??= encodeGrayPng(SHOT.width, SHOT.height, (x, y) => (dark(x, y) ? 30 : 255)).toString('base64');
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  self.send({ type: 'result', attempt_id: frame.attempt_id, result: { mime_type: 'image/png', image_base64: pageLikeShot, ...SHOT } });
};

/** Searches with `search` (an honest backend) and returns its results. */
export function honestSearch(search: (query: string, count: number) => Promise<{ title: string; url: string; snippet: string }[]>): Script {
  return async (frame, self) => {
    self.send({ type: 'accept', attempt_id: frame.attempt_id });
    const results = await search(String(frame.payload.query), Number(frame.payload.count ?? 5));
    self.send({ type: 'result', attempt_id: frame.attempt_id, result: { results } });
  };
}

/** Answers every search with the same list of results, whatever the query. */
export const fixedSearchList: Script = (frame, self) => {
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  const results = Array.from({ length: Number(frame.payload.count ?? 5) }, (_, i) => ({ title: `Result ${i}`, url: `https://example.com/result/${i}`, snippet: 'A result.' }));
  self.send({ type: 'result', attempt_id: frame.attempt_id, result: { results } });
};

function streamChat(frame: TaskMessage, self: FrameSink, deltas: Record<string, unknown>[], usage: Record<string, number>) {
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  for (const delta of deltas) self.send({ type: 'chunk', attempt_id: frame.attempt_id, delta });
  self.send({ type: 'result', attempt_id: frame.attempt_id, result: { finish_reason: 'stop', usage } });
}

/** A strong-tier chat solver that answers as a capable model would, audits included (modelAnswer reads an audit's answer from `db`). */
export const honestChat =
  (db: Db): Script =>
  async (frame, self) => {
    const answer = await modelAnswer(db, frame.task_id, frame.payload as Record<string, unknown>);
    const toolCall = answer.deltas.some((delta) => 'tool_calls' in delta);
    self.send({ type: 'accept', attempt_id: frame.attempt_id });
    for (const delta of answer.deltas) self.send({ type: 'chunk', attempt_id: frame.attempt_id, delta });
    self.send({ type: 'result', attempt_id: frame.attempt_id, result: { finish_reason: toolCall ? 'tool_calls' : 'stop', usage: answer.usage } });
  };

/** Claims a strong model but answers everything with the same sentence, as no model that reads the prompt would. */
export const wrongChat: Script = (frame, self) =>
  streamChat(frame, self, [{ content: 'I am a ' }, { content: 'helpful model' }], { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 });

/**
 * A strong-tier chat solver that answers as a capable model would, but one chat in `n` (at random, audits
 * and client chats alike: it cannot tell them apart) with the same wrong sentence; `wrong` collects the
 * task ids it answered wrongly.
 */
export const wrongOneChatIn =
  (n: number, db: Db, wrong: Set<string>): Script =>
  async (frame, self) => {
    if (Math.random() >= 1 / n) return honestChat(db)(frame, self);
    wrong.add(frame.task_id);
    return wrongChat(frame, self);
  };

/** Claims a strong model but runs none: every answer is empty. */
export const emptyChat: Script = (frame, self) =>
  streamChat(frame, self, [], { prompt_tokens: 12, completion_tokens: 0, total_tokens: 12 });
