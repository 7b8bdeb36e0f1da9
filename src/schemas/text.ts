/**
 * The one rule for text that reaches PostgreSQL: every string of a request (body fields, object keys
 * and strings nested in JSON payloads, path parameters) is stored as sent or refused. PostgreSQL's text
 * and jsonb cannot hold U+0000, and an unpaired UTF-16 surrogate has no UTF-8 form (the driver would
 * store U+FFFD in its place, jsonb refuses its escape), so both are refused with a 422 at their `loc`:
 * NUL as `string_pattern_mismatch`, an unpaired surrogate as `string_unicode` (not Unicode text).
 * A JSON number too large for a double (`1e400`) parses as Infinity, which no column, jsonb or JSON
 * text can hold: it is refused as `finite_number` wherever it sits, extra fields included.
 */

/** The strings accepted, as a JSON Schema pattern: no NUL. */
export const STORABLE_TEXT_PATTERN = '^[^\\x00]*$';

// With the `u` flag a surrogate pair is one code point, so only an unpaired surrogate matches \p{Cs}.
const UNPAIRED_SURROGATE = /\p{Cs}/u;

type Problem = 'nul' | 'surrogate' | null;
const problemOf = (text: string): Problem =>
  text.includes('\u0000') ? 'nul' : UNPAIRED_SURROGATE.test(text) ? 'surrogate' : null;

export const isStorableText = (text: string) => problemOf(text) === null;

export type InputIssue =
  | { type: 'string_pattern_mismatch'; loc: (string | number)[]; msg: string; input: string; ctx: { pattern: string } }
  | { type: 'string_unicode'; loc: (string | number)[]; msg: string; input: string }
  | { type: 'finite_number'; loc: (string | number)[]; msg: string; input: string };

function issueOf(problem: Exclude<Problem, null>, loc: (string | number)[], input: string): InputIssue {
  if (problem === 'nul')
    return {
      type: 'string_pattern_mismatch',
      loc,
      msg: `String should match pattern '${STORABLE_TEXT_PATTERN}' (no NUL character)`,
      input,
      ctx: { pattern: STORABLE_TEXT_PATTERN },
    };
  return {
    type: 'string_unicode',
    loc,
    msg:
      'Input should be a valid string, unable to parse raw data as a unicode string (unpaired ' + 'UTF-16 surrogate)',
    input,
  };
}

/**
 * Every string and number of a parsed JSON value that cannot be stored, at its path; an object key is
 * reported at `[...path, key, "[key]"]`, as pydantic reports a dictionary key. The walk recurses once
 * per level: bodies arrive here with their depth already bounded (src/http/middleware.ts).
 */
export function unstorableInput(value: unknown, path: (string | number)[] = []): InputIssue[] {
  if (typeof value === 'string') {
    const problem = problemOf(value);
    return problem ? [issueOf(problem, path, value)] : [];
  }
  if (typeof value === 'number')
    return Number.isFinite(value)
      ? []
      : [{ type: 'finite_number', loc: path, msg: 'Input should be a finite number', input: String(value) }];
  if (Array.isArray(value)) return value.flatMap((item, index) => unstorableInput(item, [...path, index]));
  if (value === null || typeof value !== 'object') return [];
  return Object.entries(value).flatMap(([key, item]) => {
    const problem = problemOf(key);
    return [
      ...(problem ? [issueOf(problem, [...path, key, '[key]'], key)] : []),
      ...unstorableInput(item, [...path, key]),
    ];
  });
}
