/**
 * Payloads of the tasks this node has just created, for its own dispatch activities: the first attempt
 * usually runs on the creating node a few milliseconds later, and need not read back what it just wrote.
 * Each payload is handed out once; later attempts, and attempts on other nodes, read the task row.
 * Bounded, since a task whose first attempt runs elsewhere (or never) leaves its entry behind.
 */
export class RecentPayloads {
  private readonly entries = new Map<string, Record<string, unknown>>();

  constructor(private readonly capacity = 256) {}

  remember(taskId: string, payload: Record<string, unknown>): void {
    this.entries.set(taskId, payload);
    // Maps iterate in insertion order: the first key is the oldest.
    while (this.entries.size > this.capacity) this.entries.delete(this.entries.keys().next().value!);
  }

  take(taskId: string): Record<string, unknown> | undefined {
    const payload = this.entries.get(taskId);
    this.entries.delete(taskId);
    return payload;
  }
}
