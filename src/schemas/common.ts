import { z } from './zod';
import { pydanticIssue } from './issues';
import { ERROR_STATUS, type ErrorType } from '../errors';

/** Optional sign, digits with an optional decimal point, not made only of signs and dots. */
export const DECIMAL_PATTERN = /^[+-]?(\d+(\.\d*)?|\.\d+)$/;

/** Decimal text of a number's shortest form, exponent written out ("1.5e-7" → "0.00000015"), exactly. */
function plainDecimal(text: string): string {
  const match = /^(-?)(\d+)(?:\.(\d+))?e([+-]?\d+)$/i.exec(text);
  if (!match) return text;
  const [, sign, whole, fraction = '', exponent] = match;
  const digits = whole + fraction;
  const point = whole.length + Number(exponent);
  const shifted =
    point <= 0
      ? `0.${'0'.repeat(-point)}${digits}`
      : point >= digits.length
        ? digits + '0'.repeat(point - digits.length)
        : `${digits.slice(0, point)}.${digits.slice(point)}`;
  return sign + shifted;
}

/** Canonical decimal text for an amount given as number or string ("010.50" → "10.50", 5e-324 exactly). */
export function decimalText(value: number | string): string {
  const text = plainDecimal(typeof value === 'number' ? value.toString() : value.trim());
  const unsigned = text.replace(/^\+/, '');
  const [whole, fraction] = unsigned.split('.');
  // A zero is "0" whatever its sign and form ("-0", "-.0", "+0.00"): PostgreSQL takes no bare "-".
  if (!/[1-9]/.test(unsigned)) return '0';
  const cleanWhole = (whole ?? '').replace(/^(-?)0+(?=\d)/, '$1').replace(/^-?$/, (sign) => `${sign}0`);
  const cleanFraction = (fraction ?? '').replace(/0+$/, '');
  return cleanFraction ? `${cleanWhole}.${cleanFraction}` : cleanWhole;
}

/**
 * The digits an amount may have before and after the point, leading and trailing zeros aside. Every
 * points column is an unconstrained numeric, which PostgreSQL caps at 131,072 digits before the point
 * and 16,383 after; amounts are summed into balances and divided (fees, per-token prices), whose
 * quotients it keeps to 1,000 fractional digits. A thousand each side stays clear of all of these, and
 * far beyond any real price.
 */
export const AMOUNT_MAX_WHOLE_DIGITS = 1000;
export const AMOUNT_MAX_FRACTION_DIGITS = 1000;

const W = AMOUNT_MAX_WHOLE_DIGITS;
const F = AMOUNT_MAX_FRACTION_DIGITS;
/** The decimal strings >= 0 (a minus sign only on a zero) within the digit bounds, as documented in OpenAPI. */
const NON_NEGATIVE_DECIMAL_PATTERN = `^(\\+?((0*[1-9]\\d{0,${W - 1}}|0+)(\\.(\\d{0,${F - 1}}[1-9])?0*)?|\\.(\\d{0,${F - 1}}[1-9]0*|0+))|-(0+(\\.0*)?|\\.0+))$`;
/** The decimal strings > 0 within the digit bounds, as documented in OpenAPI. */
const POSITIVE_DECIMAL_PATTERN = `^\\+?(0*[1-9]\\d{0,${W - 1}}(\\.(\\d{0,${F - 1}}[1-9])?0*)?|0*\\.\\d{0,${F - 1}}[1-9]0*)$`;

/**
 * Digits before and after the point of a well-formed decimal string, leading and trailing zeros aside (linear:
 * no regex backtracking).
 */
function significantDigits(text: string): { whole: number; fraction: number } {
  const [whole = '', fraction = ''] = text.replace(/^[+-]/, '').split('.');
  let first = 0;
  while (first < whole.length && whole[first] === '0') first++;
  let last = fraction.length;
  while (last > 0 && fraction[last - 1] === '0') last--;
  return { whole: whole.length - first, fraction: last };
}

const wholeDigitsIssue = pydanticIssue(
  'decimal_whole_digits',
  `Decimal input should have no more than ${W} digits before the decimal point`,
  { whole_digits: W },
);
const fractionDigitsIssue = pydanticIssue(
  'decimal_max_places',
  `Decimal input should have no more than ${F} decimal places`,
  { decimal_places: F },
);

// Only a well-formed decimal is judged by its sign and size; a malformed one already has its decimal_parsing error.
// The sign is read from the text, not from a Number, which would turn 400 digits into 0 or Infinity.
const decimalString = (
  sign: { holds: (text: string) => boolean; issue: ReturnType<typeof pydanticIssue> },
  pattern: string,
) =>
  z
    .string()
    .regex(DECIMAL_PATTERN, 'decimal')
    .refine((value) => !DECIMAL_PATTERN.test(value) || sign.holds(value), sign.issue)
    .refine((value) => !DECIMAL_PATTERN.test(value) || significantDigits(value).whole <= W, wholeDigitsIssue)
    .refine((value) => !DECIMAL_PATTERN.test(value) || significantDigits(value).fraction <= F, fractionDigitsIssue)
    .openapi({ pattern });

const nonZero = (text: string) => /[1-9]/.test(text);
const atLeastZero = {
  holds: (text: string) => !text.startsWith('-') || !nonZero(text),
  issue: pydanticIssue('greater_than_equal', 'Input should be greater than or equal to 0', { ge: 0 }),
};
const aboveZero = {
  holds: (text: string) => !text.startsWith('-') && nonZero(text),
  issue: pydanticIssue('greater_than', 'Input should be greater than 0', { gt: 0 }),
};

/** Every price: a number >= 0, or a decimal string >= 0 (api-spec "Numeric string"; negatives are 422). */
export const NonNegativeNumeric = z
  .union([z.number().min(0), decimalString(atLeastZero, NON_NEGATIVE_DECIMAL_PATTERN)])
  .openapi({ description: 'A number >= 0 or a decimal string >= 0', example: '10' });

/** An amount that must be positive (deposits): a number > 0, or a decimal string > 0. */
export const PositiveNumeric = z
  .union([z.number().gt(0), decimalString(aboveZero, POSITIVE_DECIMAL_PATTERN)])
  .openapi({ description: 'A number > 0 or a decimal string > 0', example: '100' });

/** An integer; the marker message lets the 422 mapper say int_type rather than float_type. */
export const Int = () => z.number({ invalid_type_error: 'int_type' }).int();
export const PositiveInt = Int().gt(0);

/** The error types answered with `status`, in ERROR_STATUS order (`dialect` maps a status first). */
export function errorTypesOf(status: number, dialect: (status: number) => number = (same) => same): ErrorType[] {
  return (Object.entries(ERROR_STATUS) as [ErrorType, number][])
    .filter(([, own]) => dialect(own) === status)
    .map(([type]) => type);
}

const typeEnum = (types: ErrorType[]) => z.enum(types as [ErrorType, ...ErrorType[]]);

const errorBodies = new Map<number, z.ZodTypeAny>();

/** The body of every error of one status: `{"error":{"type","message",...}}`, `type` one of that status's types. */
export function errorBodyOf(status: number): z.ZodTypeAny {
  const body =
    errorBodies.get(status) ??
    z
      .object({ error: z.object({ type: typeEnum(errorTypesOf(status)), message: z.string() }).passthrough() })
      .openapi(`Error${status}`);
  errorBodies.set(status, body);
  return body;
}

const openAiErrorBodies = new Map<number, z.ZodTypeAny>();

/**
 * The same errors on the OpenAI-compatible routes: OpenAI's error object, `code` the type again
 * (src/chat/openai-format.ts).
 */
export function openAiErrorBodyOf(status: number): z.ZodTypeAny {
  const types = typeEnum(errorTypesOf(status));
  const body =
    openAiErrorBodies.get(status) ??
    z
      .object({
        error: z.object({ message: z.string(), type: types, param: z.string().nullable(), code: types }).passthrough(),
      })
      .openapi(`OpenAIError${status}`);
  openAiErrorBodies.set(status, body);
  return body;
}

export const ValidationErrorBody = z
  .object({
    detail: z
      .array(
        z.object({
          loc: z.array(z.union([z.string(), z.number().int()])),
          msg: z.string(),
          type: z.string(),
          input: z.any().optional(),
          ctx: z.record(z.any()).optional(),
        }),
      )
      .optional(),
  })
  .openapi('HTTPValidationError');

export const StringMap = z.record(z.string());
export const FreeForm = z.record(z.any());

/**
 * A validation error on the OpenAI-compatible routes: the same `detail`, and OpenAI's error object for its first
 * issue.
 */
export const OpenAIValidationErrorBody = ValidationErrorBody.extend({
  error: z.object({
    message: z.string(),
    type: z.literal('invalid_request_error'),
    param: z
      .string()
      .nullable()
      .openapi({ description: "The first issue's field (messages[0].content), null for a malformed body" }),
    code: z.string().openapi({ description: "The first issue's type (missing, too_short, json_invalid, ...)" }),
  }),
}).openapi('OpenAIValidationError');
