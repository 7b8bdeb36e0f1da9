/**
 * The names of one connection's prepared statements, by text. Beyond the limit the least recently used one
 * is evicted, so a connection never holds more than `limit` statements however varied their texts.
 */
export class StatementCache {
  private readonly names = new Map<string, string>();
  private count = 0;

  constructor(private readonly limit: number) {
    if (!(limit >= 1)) throw new RangeError('A statement cache holds at least one statement.');
  }

  /** The statement's name, new if it has none; `evicted` names a statement to deallocate first. */
  nameFor(text: string): { name: string; evicted?: string } {
    const known = this.names.get(text);
    if (known !== undefined) {
      // A Map iterates in insertion order: inserting again makes this the most recently used.
      this.names.delete(text);
      this.names.set(text, known);
      return { name: known };
    }
    // Names are never reused, so a statement deallocated late can never be mistaken for a newer one.
    const name = `s${++this.count}`;
    this.names.set(text, name);
    if (this.names.size <= this.limit) return { name };
    const [oldest, evicted] = this.names.entries().next().value as [string, string];
    this.names.delete(oldest);
    return { name, evicted };
  }

  forget(text: string): void {
    this.names.delete(text);
  }

  get size(): number {
    return this.names.size;
  }
}
