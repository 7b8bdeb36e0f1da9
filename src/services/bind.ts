import type { Db } from '../db/pool';

/** A statement of src/db (or a read of the services) with its database handle bound. */
type Bound<F> = F extends (db: Db, ...args: infer A) => infer R ? (...args: A) => R : never;

export type BoundTo<T> = { readonly [K in keyof T]: Bound<T[K]> };

/**
 * Binds the database handle to each of `statements`: what the HTTP layer is given to read and write
 * through, so that it never holds the pool itself.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function bindDb<T extends Record<string, (db: Db, ...args: any[]) => unknown>>(
  db: Db,
  statements: T,
): BoundTo<T> {
  return Object.fromEntries(
    Object.entries(statements).map(([name, statement]) => [name, (...args: unknown[]) => statement(db, ...args)]),
  ) as BoundTo<T>;
}
