import { FetchBody } from '../../schemas/requests';
import type { FetchResultData } from '../../schemas/frames';
import { withTimeLimit } from '../abort';
import { SolverError, toSolverError } from '../errors';
import { guardedFetch, type FetchedResponse } from '../guarded-fetch';
import { decodeBody } from '../html/charset';
import { htmlToMarkdown, titleOfHtml } from '../html/markdown';
import type { NetPolicy } from '../net-guard';
import { parsePayload, type TaskHandler } from './types';

export type ProxyFetchOptions = {
  policy: NetPolicy;
  maxBytes: number;
  /** Upper bound for one fetch; a payload `timeout` (seconds) can only shorten it. */
  timeoutMs: number;
};

type BodyKind = 'html' | 'text' | 'binary';

const TEXT_MIME =
  /^(text\/.+|application\/(json|xml|javascript|ecmascript|x-javascript|yaml|x-yaml|toml|x-ndjson|csv)|application\/.+\+(json|xml))$/;

export function createProxyFetchHandler(options: ProxyFetchOptions): TaskHandler {
  return async (payload, { signal }) => {
    const request = parsePayload(FetchBody, payload);
    const limitMs = request.timeout ? Math.min(request.timeout * 1000, options.timeoutMs) : options.timeoutMs;
    const limit = withTimeLimit(signal, limitMs, `fetching ${request.url} took longer than ${limitMs} ms`);
    try {
      const response = await guardedFetch(request.url, {
        policy: options.policy,
        signal: limit.signal,
        maxBytes: options.maxBytes,
      });
      return toFetchResult(response, request.raw_html);
    } catch (error) {
      throw toSolverError(error, limit.signal);
    } finally {
      limit.dispose();
    }
  };
}

export function toFetchResult(response: FetchedResponse, rawHtml: boolean): FetchResultData {
  const kind = bodyKind(response.contentType, response.body);
  if (kind === 'binary') {
    throw new SolverError(
      'unsupported_content',
      `the response is ${response.contentType ?? 'binary data'}, not a text or HTML page`,
    );
  }
  const text = decodeBody(response.body, response.contentType, kind === 'html');
  const base = { url: response.url, final_url: response.finalUrl, status_code: response.status };
  if (kind === 'text') return { ...base, content_type: 'markdown', content: text, title: null };
  if (rawHtml) return { ...base, content_type: 'html', content: text, title: titleOfHtml(text) };
  const page = htmlToMarkdown(text, response.finalUrl);
  return { ...base, content_type: 'markdown', content: page.markdown, title: page.title };
}

function bodyKind(contentType: string | undefined, body: Buffer): BodyKind {
  const mime = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  if (mime === 'text/html' || mime === 'application/xhtml+xml') return 'html';
  if (TEXT_MIME.test(mime)) return 'text';
  if (mime !== '' && mime !== 'application/octet-stream') return 'binary';
  // No usable Content-Type: look at the bytes.
  const head = body.subarray(0, 1024);
  if (head.includes(0)) return 'binary';
  if (/^\s*(<!doctype html|<html|<head|<body)/i.test(head.toString('latin1'))) return 'html';
  return 'text';
}
