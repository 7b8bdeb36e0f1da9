import { isUtf8 } from 'node:buffer';
import crypto from 'node:crypto';
import express, { type ErrorRequestHandler, type Request, type RequestHandler } from 'express';
import { ApiError } from '../errors';
import type { Logger } from '../logger';
import { StepTimes } from './server-timing';
import { declaredMethods, type Route } from './route';
import { jsonErrorOffset, RequestValidationError } from './validation';

/** Accepts a caller's X-Request-Id when it looks sane, otherwise makes one; echoed on the response. */
export function requestContext(logger: Logger): RequestHandler {
  return (req, res, next) => {
    const incoming = req.header('x-request-id');
    const requestId =
      incoming && /^[\w.:-]{1,128}$/.test(incoming) ? incoming : `req_${crypto.randomBytes(8).toString('hex')}`;
    res.locals.requestId = requestId;
    res.locals.log = logger.child({ request_id: requestId });
    res.setHeader('X-Request-Id', requestId);
    res.locals.stepTimes = new StepTimes();
    const started = process.hrtime.bigint();
    res.on('finish', () => {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      res.locals.log.info(
        {
          method: req.method,
          path: req.path,
          status: res.statusCode,
          duration_ms: Math.round(ms * 10) / 10,
          account_id: res.locals.account?.account_id,
        },
        'request',
      );
    });
    next();
  };
}

/**
 * How deeply arrays and objects may nest in a body. Every walk over a parsed body (the text rule, zod,
 * serialisation for jsonb) recurses once per level, so depth is refused before anything parses it; no
 * real payload comes near (an OpenAI tool schema nests a few dozen levels).
 */
export const MAX_JSON_DEPTH = 128;

/** Offset of the bracket that opens level MAX_JSON_DEPTH + 1, or -1: one pass, strings skipped whole. */
export function tooDeepAt(text: string, maxDepth = MAX_JSON_DEPTH): number {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const char = text.charCodeAt(i);
    if (char === 0x22) {
      // To the closing quote: the next one not escaped by an odd run of backslashes.
      let end = i;
      for (;;) {
        end = text.indexOf('"', end + 1);
        if (end < 0) return -1;
        let slashes = 0;
        while (text.charCodeAt(end - 1 - slashes) === 0x5c) slashes++;
        if (slashes % 2 === 0) break;
      }
      i = end;
    } else if (char === 0x5b || char === 0x7b) {
      if (++depth > maxDepth) return i;
    } else if (char === 0x5d || char === 0x7d) depth--;
  }
  return -1;
}

const UTF8_CHARSET = /^utf-?8$/i;

class NotUtf8 extends Error {
  readonly type = 'body.not_utf8';
}

/** The body parser's own failures in the documented shapes: bad UTF-8 is 422, an undecodable body 400. */
function bodyReadError(error: { status?: number; type?: string; message?: string }, req: Request): unknown {
  if (error.type === 'body.not_utf8') {
    return new RequestValidationError([
      {
        type: 'string_unicode',
        loc: ['body'],
        msg:
          'Input should be a valid string, unable to parse raw data as a unicode string (the body is ' +
          'not valid UTF-8)',
        input: null,
      },
    ]);
  }
  if (error.status === 400 && error.type !== 'request.aborted') {
    const encoding = req.header('content-encoding');
    const what = encoding && encoding.toLowerCase() !== 'identity' ? `as ${encoding}` : 'as sent';
    return new ApiError('bad_request', `The request body could not be read ${what}: ${error.message ?? 'malformed'}.`);
  }
  return error;
}

/**
 * Reads any body as text (clients such as `curl -d` send form content types) and parses it as JSON.
 * A body in gzip, deflate or br is decoded first (an unknown Content-Encoding is 415, one that does not
 * decode 400); UTF-8 that is not valid is refused, never altered (docs/decisions.md, "Validation").
 * Malformed JSON becomes the 422 `json_invalid` error with the byte offset, as pydantic reports it, and
 * so does nesting deeper than MAX_JSON_DEPTH.
 */
export function jsonBody(limitBytes: number): RequestHandler[] {
  const readText = express.text({
    type: () => true,
    limit: limitBytes,
    verify: (_req, _res, bytes, charset) => {
      if (UTF8_CHARSET.test(charset) && !isUtf8(bytes)) throw new NotUtf8('not UTF-8');
    },
  });
  return [
    (req, res, next) =>
      readText(req, res, (error?: unknown) =>
        next(error ? bodyReadError(error as { status?: number }, req) : undefined),
      ),
    (req, _res, next) => {
      const text: unknown = req.body;
      if (typeof text !== 'string' || text.trim() === '') {
        req.body = undefined;
        return next();
      }
      const deepAt = tooDeepAt(text);
      if (deepAt >= 0) {
        return next(
          new RequestValidationError([
            {
              type: 'json_invalid',
              loc: ['body', deepAt],
              msg: 'JSON decode error',
              input: {},
              ctx: { error: `arrays and objects nest deeper than ${MAX_JSON_DEPTH} levels` },
            },
          ]),
        );
      }
      try {
        req.body = JSON.parse(text);
      } catch (error) {
        const offset = jsonErrorOffset(text);
        return next(
          new RequestValidationError([
            {
              type: 'json_invalid',
              loc: ['body', offset],
              msg: 'JSON decode error',
              input: {},
              ctx: { error: (error as Error).message },
            },
          ]),
        );
      }
      next();
    },
  ];
}

/** 405 with Allow at a path some route declares with another method, 404 elsewhere. */
export const notFound =
  (routes: Route[]): RequestHandler =>
  (req, _res, next) => {
    const allowed = declaredMethods(routes, req.path);
    // A documented method that got here is the solver socket's path without its upgrade: plain 404.
    if (allowed.length > 0 && !allowed.includes(req.method)) {
      const allow = allowed.includes('GET') ? [...allowed, 'HEAD'] : allowed;
      return next(
        new ApiError(
          'method_not_allowed',
          `${req.method} is not served at ${req.path}; use ${allow.join(' or ')}.`,
          {},
          { Allow: allow.join(', ') },
        ),
      );
    }
    next(new ApiError('not_found', `No route ${req.method} ${req.path}. See /docs for the API reference.`));
  };

export function errorHandler(): ErrorRequestHandler {
  return (error, req, res, _next) => {
    if (res.headersSent) {
      res.end();
      return;
    }
    if (error instanceof RequestValidationError) {
      res.status(422).json({ detail: error.detail });
      return;
    }
    if (error instanceof ApiError) {
      for (const [name, value] of Object.entries(error.headers)) res.setHeader(name, value);
      res.status(error.status).json(error.toBody());
      return;
    }
    // The router could not percent-decode a path parameter: not UTF-8 text, so no id can match it.
    if (error instanceof URIError && (error as { status?: number }).status === 400) {
      res.status(422).json({
        detail: [
          {
            type: 'string_unicode',
            loc: ['path'],
            msg: 'Input should be a valid string, unable to parse raw data as a unicode string',
            input: req.path,
          },
        ],
      });
      return;
    }
    const bodyParserType = (error as { type?: string }).type;
    if (bodyParserType === 'entity.too.large') {
      const limit = (error as { limit?: number }).limit;
      res
        .status(413)
        .json(new ApiError('payload_too_large', `The request body is larger than the ${limit} byte limit.`).toBody());
      return;
    }
    if (bodyParserType === 'encoding.unsupported' || bodyParserType === 'charset.unsupported') {
      res.status(415).json(new ApiError('unsupported_media_type', 'Send the body as UTF-8 JSON.').toBody());
      return;
    }
    (res.locals.log ?? console).error({ err: error }, 'unhandled error');
    res
      .status(500)
      .json(
        new ApiError(
          'internal_error',
          `Something went wrong on our side; retry, and quote request id ${res.locals.requestId ?? ''} ` +
            `if it persists.`,
        ).toBody(),
      );
  };
}
