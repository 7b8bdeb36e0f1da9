import type { TaskMessage } from '../../src/schemas/frames';
import { honestAnswer } from './chat-answers';

/**
 * Scripted solver behaviours, honest and cheating, shared by the trust tests and the benchmark's trust
 * phase (docs/trust.md, "Detection"). Each takes a task frame and a connection that sends frames (a
 * test's FakeSolver or the benchmark's SimSolver) and answers like that kind of solver would.
 */

export interface FrameSink {
  send(frame: object): void;
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
 * Fetches the page it is given and returns its text (proxy_fetch and page_snapshot); a target that fails
 * is reported as the reference solver reports it (src/solver/guarded-fetch.ts).
 */
export const honestFetch: Script = async (frame, self) => {
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  const url = String(frame.payload.url);
  let html: string;
  try {
    html = await (await fetch(url)).text();
  } catch (error) {
    const code = ((error as Error).cause as NodeJS.ErrnoException | undefined)?.code;
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
      text = fetch(url).then(async (response) => pageText(await response.text()));
      cache.set(origin, text);
    }
    self.send({ type: 'result', attempt_id: frame.attempt_id, result: fetchResult(url, await text, frame.task_type) });
  };
}

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

/** A strong-tier chat solver that answers as a capable model would (test/support/chat-answers.ts). */
export const honestChat: Script = (frame, self) => {
  const answer = honestAnswer(frame.payload as Record<string, unknown>);
  streamChat(frame, self, answer.deltas, answer.usage);
};

/** Claims a strong model but answers everything with the same sentence, as no model that reads the prompt would. */
export const wrongChat: Script = (frame, self) =>
  streamChat(frame, self, [{ content: 'I am a ' }, { content: 'helpful model' }], { prompt_tokens: 12, completion_tokens: 5, total_tokens: 17 });
