import type { sql } from 'slonik';

export type Fragment = ReturnType<typeof sql.fragment>;

/*
 * Statement parts made once. A fragment is immutable, and one built anew for every statement is much of
 * what a statement costs to build: slonik renumbers the placeholders of every nested fragment at each
 * level, so a fragment made per statement costs again at every level above it. Parts that depend only on
 * an owner (a trust policy, a request's figures) and a key (a table alias, a column) are made once.
 */

/** `build` made once per key. */
export function oncePerKey<K, V>(build: (key: K) => V): (key: K) => V {
  const made = new Map<K, V>();
  return (key) => {
    let value = made.get(key);
    if (value === undefined) made.set(key, (value = build(key)));
    return value;
  };
}

/** `build` made once per owner and key; kept only as long as its owner is. */
export function oncePer<O extends object, K, V = Fragment>(build: (owner: O, key: K) => V): (owner: O, key: K) => V {
  const made = new WeakMap<O, (key: K) => V>();
  return (owner, key) => {
    let byKey = made.get(owner);
    if (!byKey) made.set(owner, (byKey = oncePerKey((k: K) => build(owner, k))));
    return byKey(key);
  };
}
