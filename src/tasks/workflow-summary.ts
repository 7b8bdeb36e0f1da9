/**
 * The one-line summary each task, chat and crawl workflow is started with (Temporal's user metadata,
 * `staticSummary`), shown in the Temporal UI's workflow list: what it is, whose, and on what. It is
 * kept in Temporal's history and visibility for the namespace's retention, so it carries no secret and
 * little private data: a URL only as its host and path (no credentials, query or fragment, where tokens
 * travel), a search query cut short, never the request's headers, cookies, body or messages.
 */

/** The most of a target (host and path, or a query) a summary shows. */
const TARGET_CHARS = 60;
/** A search query is client text: less of it. */
const QUERY_CHARS = 40;

const SEPARATOR = ' · ';

/** Single-line, without the backticks that would end its code span, cut at `max` characters. */
function clip(text: string, max: number): string {
  const line = text
    .replace(/[\u0000-\u001f\u007f`]+/g, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/** A code span: the UI renders the summary as markdown, and a target is shown as typed, not rendered. */
const code = (text: string) => (text ? `\`${text}\`` : '');

/** A URL as host and path only; text that is not a URL, cut short. */
export function shortTarget(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.protocol === 'http:' || parsed.protocol === 'https:')
      return clip(`${parsed.host}${parsed.pathname === '/' ? '' : parsed.pathname}`, TARGET_CHARS);
  } catch {
    // Not a URL: shown cut short below, with no query part.
  }
  return clip(url.split(/[?#]/)[0], TARGET_CHARS);
}

const text = (value: unknown): string | undefined =>
  typeof value === 'string' && value.trim() !== '' ? value : undefined;

/** What a task is run on: the URL of a page task, the query of a search, the model of a chat. */
function targetOf(payload: Record<string, unknown> | undefined): string {
  if (!payload) return '';
  const url = text(payload.url);
  if (url) return code(shortTarget(url));
  const query = text(payload.query);
  if (query) return code(clip(query, QUERY_CHARS));
  const model = text(payload.model);
  if (model) return `model ${code(clip(model, TARGET_CHARS))}`;
  return '';
}

const join = (...parts: (string | undefined)[]) =>
  parts.filter((part): part is string => Boolean(part)).join(SEPARATOR);

/** A client's task or chat: `proxy_fetch · acct_… · `example.com/page``. */
export function taskSummary(task: {
  task_type: string;
  account_id: string;
  payload?: Record<string, unknown>;
}): string {
  return join(task.task_type, task.account_id, targetOf(task.payload));
}

/** A canary sent to one solver (the platform's task). */
export const canarySummary = (taskType: string, solverId: string): string =>
  join(`${taskType} canary`, 'platform', `solver ${solverId}`);

/**
 * A verification run: a client task's type run again by a second (or third) solver, the platform's task;
 * workflow code starts the third.
 */
export { verificationSummary } from '../contract/workflows';

/** A crawl or batch job: its kind, account and start URL (a batch has none). */
export const crawlSummary = (crawl: { kind: string; account_id: string; url: string | null }): string =>
  join(crawl.kind, crawl.account_id, crawl.url ? code(shortTarget(crawl.url)) : undefined);

/** A webhook delivery: its event and task (never the receiver's URL, which may carry a token). */
export const webhookSummary = (event: string, taskId: string): string => join(`webhook ${event}`, taskId);
