import { MAX_JSON_DEPTH, tooDeepAt } from '../../src/http/middleware';

describe('the nesting scan that runs before JSON.parse', () => {
  test.each([
    ['[[1]]', 1, 1],
    ['[[1]]', 2, -1],
    ['[[]][[]]', 2, -1],
    ['{"a":{"b":"}}}{{{"}}', 2, -1],
    ['["[[[["]', 1, -1],
    ['["a\\"[[["]', 1, -1],
    ['["a\\\\",[[1]]]', 2, 8],
    ['"unterminated [[[', 0, -1],
  ])('%s with at most %i levels: %i', (text, max, offset) => {
    expect(tooDeepAt(text, max)).toBe(offset);
  });

  test('half a million brackets are judged without recursion, at the first level too deep', () => {
    expect(tooDeepAt('['.repeat(500_000) + ']'.repeat(500_000))).toBe(MAX_JSON_DEPTH);
    expect(tooDeepAt(`{"text":"${'['.repeat(500_000)}"}`)).toBe(-1);
  });
});
