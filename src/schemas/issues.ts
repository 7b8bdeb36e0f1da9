import type { ZodError, ZodIssue } from 'zod';

/** A refinement names its pydantic error type with `params: { pydantic: {...} }`; the 422 mapper reads it. */
export const pydanticIssue = (type: string, msg: string, ctx?: Record<string, unknown>) => ({
  params: { pydantic: { type, msg, ctx } },
});

/**
 * Turns zod issues into the 422 body clients of FastAPI/pydantic v2 know:
 * {"detail":[{type, loc, msg, input, ctx?}]}, every violated field reported.
 */

export interface ValidationDetail {
  type: string;
  loc: (string | number)[];
  msg: string;
  input?: unknown;
  ctx?: Record<string, unknown>;
}

function valueAt(root: unknown, path: (string | number)[]): unknown {
  let current: unknown = root;
  for (const key of path) {
    if (current === null || typeof current !== 'object') return undefined;
    current = (current as Record<string | number, unknown>)[key];
  }
  return current;
}

const quoteList = (values: readonly unknown[]) => {
  const quoted = values.map((value) => `'${String(value)}'`);
  return quoted.length <= 1 ? quoted.join('') : `${quoted.slice(0, -1).join(', ')} or ${quoted[quoted.length - 1]}`;
};

const TYPE_NAMES: Record<string, { type: string; msg: string }> = {
  string: { type: 'string_type', msg: 'Input should be a valid string' },
  number: { type: 'float_type', msg: 'Input should be a valid number' },
  integer: { type: 'int_type', msg: 'Input should be a valid integer' },
  boolean: { type: 'bool_type', msg: 'Input should be a valid boolean' },
  array: { type: 'list_type', msg: 'Input should be a valid list' },
  object: { type: 'dict_type', msg: 'Input should be a valid dictionary' },
};

function isIntegerSchemaIssue(issue: ZodIssue) {
  return issue.code === 'invalid_type' && (issue.expected === 'integer' || issue.message === 'int_type');
}

function mapInvalidType(
  issue: Extract<ZodIssue, { code: 'invalid_type' }>,
  input: unknown,
  loc: (string | number)[],
  parent: unknown,
): ValidationDetail {
  if (issue.received === 'undefined') return { type: 'missing', loc, msg: 'Field required', input: parent };
  if (isIntegerSchemaIssue(issue)) {
    if (typeof input === 'number') {
      return {
        type: 'int_from_float',
        loc,
        msg: 'Input should be a valid integer, got a number with a fractional part',
        input,
      };
    }
    if (typeof input === 'string') {
      return {
        type: 'int_parsing',
        loc,
        msg: 'Input should be a valid integer, unable to parse string as an integer',
        input,
      };
    }
    return { type: 'int_type', loc, msg: TYPE_NAMES.integer.msg, input };
  }
  if (issue.expected === 'boolean' && typeof input === 'string') {
    return { type: 'bool_parsing', loc, msg: 'Input should be a valid boolean, unable to interpret input', input };
  }
  const known = TYPE_NAMES[issue.expected] ?? (issue.expected.includes('|') ? undefined : TYPE_NAMES.object);
  if (known) return { type: known.type, loc, msg: known.msg, input };
  return { type: 'value_error', loc, msg: `Input should be ${issue.expected}`, input };
}

function mapIssue(issue: ZodIssue, root: unknown, prefix: (string | number)[]): ValidationDetail[] {
  const loc = [...prefix, ...issue.path];
  const input = valueAt(root, issue.path);
  const parent = valueAt(root, issue.path.slice(0, -1));
  switch (issue.code) {
    case 'invalid_type':
      return [mapInvalidType(issue, input, loc, parent)];
    case 'unrecognized_keys':
      return issue.keys.map((key) => ({
        type: 'extra_forbidden',
        loc: [...loc, key],
        msg: 'Extra inputs are not permitted',
        input: valueAt(input, [key]),
      }));
    case 'too_small': {
      const min = Number(issue.minimum);
      if (issue.type === 'string') {
        return [
          {
            type: 'string_too_short',
            loc,
            msg: `String should have at least ${min} character${min === 1 ? '' : 's'}`,
            input,
            ctx: { min_length: min },
          },
        ];
      }
      if (issue.type === 'array') {
        const actual = Array.isArray(input) ? input.length : 0;
        return [
          {
            type: 'too_short',
            loc,
            msg: `List should have at least ${min} item${min === 1 ? '' : 's'} after validation, not ${actual}`,
            input,
            ctx: { field_type: 'List', min_length: min, actual_length: actual },
          },
        ];
      }
      return issue.inclusive
        ? [
            {
              type: 'greater_than_equal',
              loc,
              msg: `Input should be greater than or equal to ${min}`,
              input,
              ctx: { ge: min },
            },
          ]
        : [{ type: 'greater_than', loc, msg: `Input should be greater than ${min}`, input, ctx: { gt: min } }];
    }
    case 'too_big': {
      const max = Number(issue.maximum);
      if (issue.type === 'string') {
        return [
          {
            type: 'string_too_long',
            loc,
            msg: `String should have at most ${max} characters`,
            input,
            ctx: { max_length: max },
          },
        ];
      }
      if (issue.type === 'array') {
        return [
          {
            type: 'too_long',
            loc,
            msg: `List should have at most ${max} items after validation`,
            input,
            ctx: { field_type: 'List', max_length: max },
          },
        ];
      }
      return issue.inclusive
        ? [
            {
              type: 'less_than_equal',
              loc,
              msg: `Input should be less than or equal to ${max}`,
              input,
              ctx: { le: max },
            },
          ]
        : [{ type: 'less_than', loc, msg: `Input should be less than ${max}`, input, ctx: { lt: max } }];
    }
    case 'invalid_enum_value':
      return [
        {
          type: 'literal_error',
          loc,
          msg: `Input should be ${quoteList(issue.options)}`,
          input,
          ctx: { expected: quoteList(issue.options) },
        },
      ];
    case 'invalid_literal':
      return [
        {
          type: 'literal_error',
          loc,
          msg: `Input should be ${quoteList([issue.expected])}`,
          input,
          ctx: { expected: quoteList([issue.expected]) },
        },
      ];
    case 'invalid_union_discriminator':
      return [
        {
          type: 'union_tag_invalid',
          loc,
          msg: `Input tag should match one of the expected tags ${quoteList(issue.options)}`,
          input,
        },
      ];
    case 'invalid_union': {
      // Report the branch that got furthest: the one whose failure is not a plain type mismatch here.
      const depth = issue.path.length;
      const informative = issue.unionErrors.find((error) =>
        error.issues.every((inner) => !(inner.code === 'invalid_type' && inner.path.length === depth)),
      );
      const chosen = informative ?? issue.unionErrors[0];
      return chosen ? chosen.issues.flatMap((inner) => mapIssue(inner, root, prefix)) : [];
    }
    case 'invalid_string':
      if (issue.message === 'decimal')
        return [{ type: 'decimal_parsing', loc, msg: 'Input should be a valid decimal', input }];
      return [{ type: 'string_pattern_mismatch', loc, msg: issue.message, input }];
    case 'custom': {
      const named = (
        issue.params as { pydantic?: { type: string; msg: string; ctx?: Record<string, unknown> } } | undefined
      )?.pydantic;
      if (named) return [{ type: named.type, loc, msg: named.msg, input, ...(named.ctx ? { ctx: named.ctx } : {}) }];
      return [{ type: 'value_error', loc, msg: `Value error, ${issue.message}`, input, ctx: { error: issue.message } }];
    }
    default:
      return [{ type: 'value_error', loc, msg: `Value error, ${issue.message}`, input }];
  }
}

export function zodErrorToDetail(
  error: ZodError,
  root: unknown,
  prefix: (string | number)[] = ['body'],
): ValidationDetail[] {
  return error.issues.flatMap((issue) => mapIssue(issue, root, prefix));
}
