import http from 'node:http';
import https from 'node:https';
import zlib from 'node:zlib';
import { pipeline } from 'node:stream/promises';
import { Writable, type Transform } from 'node:stream';
import { SolverError, firstLine } from './errors';
import { guardedLookup, parseTargetUrl, assertTargetAllowed, type NetPolicy } from './net-guard';

/**
 * GET with the network guard applied to every hop: redirects are followed by hand so each target is
 * checked before it is contacted, and the connection itself resolves through the guard so a DNS
 * answer that changes after the check cannot redirect the request inward.
 */

export const MAX_REDIRECTS = 10;
const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);

export const SOLVER_USER_AGENT = 'Mozilla/5.0 (compatible; task-marketplace-solver/0.1)';

export type GuardedFetchOptions = {
  policy: NetPolicy;
  signal: AbortSignal;
  maxBytes: number;
  accept?: string;
};

export type FetchedResponse = {
  url: string;
  finalUrl: string;
  status: number;
  contentType: string | undefined;
  body: Buffer;
};

export async function guardedFetch(rawUrl: string, options: GuardedFetchOptions): Promise<FetchedResponse> {
  let current = await assertTargetAllowed(parseTargetUrl(rawUrl), options.policy);
  for (let hop = 0; ; hop++) {
    const response = await request(current, options);
    const location = response.headers.location;
    if (REDIRECT_STATUSES.has(response.statusCode ?? 0) && location) {
      response.resume();
      if (hop >= MAX_REDIRECTS)
        throw new SolverError('too_many_redirects', `more than ${MAX_REDIRECTS} redirects starting at ${rawUrl}`);
      let next: URL;
      try {
        next = new URL(location, current);
      } catch {
        throw new SolverError('fetch_failed', `redirect to an invalid location: ${location.slice(0, 200)}`);
      }
      current = await assertTargetAllowed(next, options.policy);
      continue;
    }
    const body = await readBody(response, options);
    return {
      url: rawUrl,
      finalUrl: current.href,
      status: response.statusCode ?? 0,
      contentType: response.headers['content-type'],
      body,
    };
  }
}

function request(url: URL, options: GuardedFetchOptions): Promise<http.IncomingMessage> {
  const transport = url.protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = transport.request(
      url,
      {
        method: 'GET',
        signal: options.signal,
        lookup: guardedLookup(options.policy) as unknown as http.RequestOptions['lookup'],
        headers: {
          'user-agent': SOLVER_USER_AGENT,
          accept: options.accept ?? 'text/html,application/xhtml+xml,application/xml;q=0.9,text/plain;q=0.8,*/*;q=0.5',
          'accept-encoding': 'gzip, deflate, br',
          'accept-language': 'en;q=1.0, *;q=0.5',
        },
      },
      resolve,
    );
    req.on('error', (error) => reject(requestError(error, url, options.signal)));
    req.end();
  });
}

function requestError(error: unknown, url: URL, signal: AbortSignal): SolverError {
  if (signal.aborted && signal.reason instanceof SolverError) return signal.reason;
  if (error instanceof SolverError) return error;
  const cause = (error as { cause?: unknown }).cause;
  if (cause instanceof SolverError) return cause;
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ECONNREFUSED')
    return new SolverError('connection_refused', `could not fetch ${url.href}: the server refused the connection`);
  const detail = code ? `${code}` : firstLine((error as Error).message ?? String(error));
  return new SolverError('fetch_failed', `could not fetch ${url.href}: ${detail}`);
}

function decoderFor(response: http.IncomingMessage): Transform | null {
  switch ((response.headers['content-encoding'] ?? '').trim().toLowerCase()) {
    case 'gzip':
    case 'x-gzip':
      return zlib.createGunzip();
    case 'deflate':
      return zlib.createInflate();
    case 'br':
      return zlib.createBrotliDecompress();
    default:
      return null;
  }
}

/** Reads at most maxBytes of the decoded body (the cap applies after decompression: no zip bombs). */
async function readBody(response: http.IncomingMessage, options: GuardedFetchOptions): Promise<Buffer> {
  const tooLarge = () =>
    new SolverError('response_too_large', `the response is larger than the ${options.maxBytes}-byte limit`);
  const declared = Number(response.headers['content-length']);
  const encoded = Boolean(response.headers['content-encoding']);
  if (!encoded && Number.isFinite(declared) && declared > options.maxBytes) {
    response.destroy();
    throw tooLarge();
  }
  const chunks: Buffer[] = [];
  let size = 0;
  const sink = new Writable({
    write(chunk: Buffer, _encoding, callback) {
      size += chunk.length;
      if (size > options.maxBytes) return callback(tooLarge());
      chunks.push(chunk);
      callback();
    },
  });
  try {
    const decoder = decoderFor(response);
    if (decoder) await pipeline(response, decoder, sink, { signal: options.signal });
    else await pipeline(response, sink, { signal: options.signal });
  } catch (error) {
    response.destroy();
    if (error instanceof SolverError) throw error;
    if (options.signal.aborted && options.signal.reason instanceof SolverError) throw options.signal.reason;
    throw new SolverError(
      'fetch_failed',
      `the response body could not be read: ${firstLine((error as Error).message)}`,
    );
  }
  return Buffer.concat(chunks);
}
