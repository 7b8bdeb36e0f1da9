/**
 * Runs a statement for many items without waiting to gather them: an item that comes while no statement
 * runs goes at once, and those that come while one runs go together when it ends. Each caller waits for
 * the statement that carries its item, as if it ran alone, so what a write promises its caller (or what
 * a read returns) is unchanged.
 */
export class Batches<T, R> {
  private waiting: Array<{ item: T; resolve: (result: R) => void; reject: (error: unknown) => void }> = [];
  private running = false;

  constructor(private readonly run: (items: T[]) => Promise<R[]>) {}

  add(item: T): Promise<R> {
    return new Promise<R>((resolve, reject) => {
      this.waiting.push({ item, resolve, reject });
      if (!this.running) void this.drain();
    });
  }

  private async drain(): Promise<void> {
    this.running = true;
    while (this.waiting.length > 0) {
      const batch = this.waiting.splice(0);
      try {
        const results = await this.run(batch.map(({ item }) => item));
        batch.forEach(({ resolve }, index) => resolve(results[index]!));
      } catch (error) {
        batch.forEach(({ reject }) => reject(error));
      }
    }
    this.running = false;
  }
}
