import type { Request, RequestHandler } from 'express';
import type { ZodTypeAny, z } from 'zod';
import { zodErrorToDetail, type ValidationDetail } from '../schemas/issues';
import { unstorableInput } from '../schemas/text';

export type { ValidationDetail };

/** A request refused with the 422 body of FastAPI/pydantic v2: {"detail":[{type, loc, msg, input, ctx?}]}. */
export class RequestValidationError extends Error {
  constructor(readonly detail: ValidationDetail[]) {
    super('request validation failed');
  }
}

/** Parses `value` with `schema` or throws a RequestValidationError rendered as 422. */
export function parseOrThrow<S extends ZodTypeAny>(
  schema: S,
  value: unknown,
  prefix: (string | number)[] = ['body'],
): z.infer<S> {
  if (value === undefined && prefix.length === 1 && prefix[0] === 'body') {
    throw new RequestValidationError([{ type: 'missing', loc: ['body'], msg: 'Field required', input: null }]);
  }
  // Text and numbers PostgreSQL cannot store are refused wherever they sit, free-form JSON included
  // (src/schemas/text.ts).
  const unstorable = unstorableInput(value, prefix);
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    // A number refused as not finite is not reported again by its schema (`int_from_float` of Infinity).
    const refused = new Set(
      unstorable.filter((issue) => issue.type === 'finite_number').map((issue) => JSON.stringify(issue.loc)),
    );
    throw new RequestValidationError([
      ...unstorable,
      ...zodErrorToDetail(parsed.error, value, prefix).filter((detail) => !refused.has(JSON.stringify(detail.loc))),
    ]);
  }
  if (unstorable.length) throw new RequestValidationError(unstorable);
  return parsed.data;
}

/** Middleware: validates the JSON body, replacing req.body with the parsed (defaults applied) value. */
export function validateBody<S extends ZodTypeAny>(schema: S): RequestHandler {
  return (req, _res, next) => {
    req.body = parseOrThrow(schema, req.body);
    next();
  };
}

/** Middleware: validates the path parameters (loc `["path", name]`). */
export function validateParams<S extends ZodTypeAny>(schema: S): RequestHandler {
  return (req, _res, next) => {
    parseOrThrow(schema, { ...req.params }, ['path']);
    next();
  };
}

export const bodyOf = <T>(req: Request) => req.body as T;

/**
 * Byte offset of the first syntax error in a JSON text (the position pydantic reports as
 * `loc: ["body", offset]`). Only called after JSON.parse failed.
 */
export function jsonErrorOffset(text: string): number {
  let i = 0;
  const fail = (): never => {
    throw i;
  };
  const ws = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i])) i++;
  };
  // Offsets follow Python's json module, as FastAPI reports them: the start of a bad literal or string.
  const literal = (word: string) => {
    if (text.startsWith(word, i)) i += word.length;
    else fail();
  };
  const string = () => {
    const start = i;
    const failAtStart = (): never => {
      i = start;
      return fail();
    };
    i++;
    while (i < text.length) {
      const char = text[i];
      if (char === '"') {
        i++;
        return;
      }
      if (char === '\\') {
        i++;
        if (text[i] === 'u') {
          for (let k = 1; k <= 4; k++)
            if (!/[0-9a-fA-F]/.test(text[i + k] ?? '')) {
              i += k;
              fail();
            }
          i += 5;
        } else if ('"\\/bfnrt'.includes(text[i] ?? '')) i++;
        else fail();
      } else if (char < ' ') fail();
      else i++;
    }
    failAtStart();
  };
  const number = () => {
    const match = /^-?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?/.exec(text.slice(i));
    if (!match) fail();
    i += match![0].length;
  };
  const value = (): void => {
    ws();
    const char = text[i];
    if (char === '{') {
      i++;
      ws();
      if (text[i] === '}') {
        i++;
        return;
      }
      for (;;) {
        ws();
        if (text[i] !== '"') fail();
        string();
        ws();
        if (text[i] !== ':') fail();
        i++;
        value();
        ws();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i] === '}') {
          i++;
          return;
        }
        fail();
      }
    } else if (char === '[') {
      i++;
      ws();
      if (text[i] === ']') {
        i++;
        return;
      }
      for (;;) {
        value();
        ws();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i] === ']') {
          i++;
          return;
        }
        fail();
      }
    } else if (char === '"') string();
    else if (char === 't') literal('true');
    else if (char === 'f') literal('false');
    else if (char === 'n') literal('null');
    else number();
  };
  try {
    value();
    ws();
    return i < text.length ? i : text.length;
  } catch (offset) {
    return typeof offset === 'number' ? Math.min(offset, text.length) : 0;
  }
}
