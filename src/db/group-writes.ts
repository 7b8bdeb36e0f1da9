/**
 * Writes items in batches without waiting for one: an item that comes while no write runs is written at
 * once, and those that come while one runs are written together when it ends. Each caller waits for the
 * write that carries its item, as if it wrote alone, so what a write promises its caller is unchanged.
 */
export class GroupWrites<T, R> {
  private waiting: Array<{ item: T; resolve: (result: R) => void; reject: (error: unknown) => void }> = [];
  private writing = false;

  constructor(private readonly write: (items: T[]) => Promise<R[]>) {}

  add(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.waiting.push({ item, resolve, reject });
      if (!this.writing) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.writing = true;
    while (this.waiting.length > 0) {
      const batch = this.waiting.splice(0);
      try {
        const results = await this.write(batch.map(({ item }) => item));
        batch.forEach(({ resolve }, index) => resolve(results[index]!));
      } catch (error) {
        batch.forEach(({ reject }) => reject(error));
      }
    }
    this.writing = false;
  }
}
