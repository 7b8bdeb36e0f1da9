import { RequestValidationError } from './validation';

/**
 * Cursors are opaque to clients: the key where a page ended, as base64url JSON. A cursor that does not
 * decode to the expected shape is a 422 at `["query","cursor"]`.
 */

export const encodeCursor = (key: readonly string[]): string => Buffer.from(JSON.stringify(key)).toString('base64url');

/** The key of a cursor: `size` strings, each matching `part` when given. */
export function decodeCursor(cursor: string | undefined, size: number, part?: RegExp): string[] | undefined {
  if (cursor === undefined) return undefined;
  let key: unknown;
  try {
    key = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
  } catch {
    key = undefined;
  }
  if (!Array.isArray(key) || key.length !== size || !key.every((value) => typeof value === 'string' && (!part || part.test(value)))) {
    throw new RequestValidationError([{ type: 'value_error', loc: ['query', 'cursor'], msg: 'Value error, not a cursor this list returned', input: cursor }]);
  }
  return key;
}
