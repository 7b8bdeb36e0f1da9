import crypto from 'node:crypto';
import express, { type ErrorRequestHandler, type RequestHandler } from 'express';
import { ApiError } from '../errors';
import type { Logger } from '../logger';
import { documentedMethods } from './openapi';
import { jsonErrorOffset, RequestValidationError } from './validation';

/** Accepts a caller's X-Request-Id when it looks sane, otherwise makes one; echoed on the response. */
export function requestContext(logger: Logger): RequestHandler {
  return (req, res, next) => {
    const incoming = req.header('x-request-id');
    const requestId = incoming && /^[\w.:-]{1,128}$/.test(incoming) ? incoming : `req_${crypto.randomBytes(8).toString('hex')}`;
    res.locals.requestId = requestId;
    res.locals.log = logger.child({ request_id: requestId });
    res.setHeader('X-Request-Id', requestId);
    const started = process.hrtime.bigint();
    res.on('finish', () => {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      res.locals.log.info(
        { method: req.method, path: req.path, status: res.statusCode, duration_ms: Math.round(ms * 10) / 10, account_id: res.locals.account?.account_id },
        'request',
      );
    });
    next();
  };
}

/**
 * Reads any body as text (clients such as `curl -d` send form content types) and parses it as JSON.
 * Malformed JSON becomes the 422 `json_invalid` error with the byte offset, as pydantic reports it.
 */
export function jsonBody(limitBytes: number): RequestHandler[] {
  return [
    express.text({ type: () => true, limit: limitBytes }),
    (req, _res, next) => {
      const text: unknown = req.body;
      if (typeof text !== 'string' || text.trim() === '') {
        req.body = undefined;
        return next();
      }
      try {
        req.body = JSON.parse(text);
      } catch (error) {
        const offset = jsonErrorOffset(text);
        return next(
          new RequestValidationError([
            { type: 'json_invalid', loc: ['body', offset], msg: 'JSON decode error', input: {}, ctx: { error: (error as Error).message } },
          ]),
        );
      }
      next();
    },
  ];
}

export const notFound: RequestHandler = (req, _res, next) => {
  const allowed = documentedMethods(req.path);
  // A documented method that got here is the solver socket's path without its upgrade: plain 404.
  if (allowed.length > 0 && !allowed.includes(req.method)) {
    const allow = allowed.includes('GET') ? [...allowed, 'HEAD'] : allowed;
    return next(new ApiError('method_not_allowed', `${req.method} is not served at ${req.path}; use ${allow.join(' or ')}.`, {}, { Allow: allow.join(', ') }));
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
      res.status(422).json({ detail: [{ type: 'string_unicode', loc: ['path'], msg: 'Input should be a valid string, unable to parse raw data as a unicode string', input: req.path }] });
      return;
    }
    const bodyParserType = (error as { type?: string }).type;
    if (bodyParserType === 'entity.too.large') {
      const limit = (error as { limit?: number }).limit;
      res.status(413).json(new ApiError('payload_too_large', `The request body is larger than the ${limit} byte limit.`).toBody());
      return;
    }
    if (bodyParserType === 'encoding.unsupported' || bodyParserType === 'charset.unsupported') {
      res.status(415).json(new ApiError('unsupported_media_type', 'Send the body as UTF-8 JSON.').toBody());
      return;
    }
    (res.locals.log ?? console).error({ err: error }, 'unhandled error');
    res.status(500).json(new ApiError('internal_error', `Something went wrong on our side; retry, and quote request id ${res.locals.requestId ?? ''} if it persists.`).toBody());
  };
}
