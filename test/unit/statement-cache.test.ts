import { StatementCache } from '../../src/db/statement-cache';

describe("a connection's statement cache", () => {
  test('a text keeps its name; a new text gets a new one', () => {
    const cache = new StatementCache(10);
    const first = cache.nameFor('SELECT $1');
    expect(cache.nameFor('SELECT $1')).toEqual({ name: first.name });
    expect(cache.nameFor('SELECT $2').name).not.toBe(first.name);
  });

  test('beyond its limit it evicts the least recently used text, and names are never reused', () => {
    const cache = new StatementCache(2);
    const a = cache.nameFor('a').name;
    const b = cache.nameFor('b').name;
    cache.nameFor('a'); // b is now the least recently used
    const c = cache.nameFor('c');
    expect(c.evicted).toBe(b);
    expect(cache.size).toBe(2);
    expect(cache.nameFor('a')).toEqual({ name: a });
    const bAgain = cache.nameFor('b');
    expect([a, b, c.name]).not.toContain(bAgain.name);
    expect(bAgain.evicted).toBe(c.name);
  });

  test('a forgotten text is named anew', () => {
    const cache = new StatementCache(5);
    const before = cache.nameFor('x').name;
    cache.forget('x');
    expect(cache.size).toBe(0);
    expect(cache.nameFor('x').name).not.toBe(before);
  });

  test('a limit below one is refused', () => {
    expect(() => new StatementCache(0)).toThrow(RangeError);
  });
});
