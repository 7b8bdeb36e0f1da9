import { Batches } from '../../src/db/batches';

describe('statement batches (a crawl’s page bookkeeping, the notification bus)', () => {
  test('a lone item is written at once; items arriving during a write go together in the next; each caller gets its own result', async () => {
    const batches: number[][] = [];
    let release!: () => void;
    const writes = new Batches<number, string>(async (items) => {
      batches.push(items);
      if (batches.length === 1) await new Promise<void>((resolve) => (release = resolve));
      return items.map((item) => `wrote ${item}`);
    });
    const first = writes.add(1);
    const later = [writes.add(2), writes.add(3), writes.add(4)];
    expect(batches).toEqual([[1]]);
    release();
    expect(await first).toBe('wrote 1');
    expect(await Promise.all(later)).toEqual(['wrote 2', 'wrote 3', 'wrote 4']);
    expect(batches).toEqual([[1], [2, 3, 4]]);
  });

  test('a failed write fails its own callers only, and the next batch is still written', async () => {
    let calls = 0;
    let release!: () => void;
    const writes = new Batches<number, number>(async (items) => {
      calls += 1;
      if (calls === 1) {
        await new Promise<void>((resolve) => (release = resolve));
        throw new Error('connection lost');
      }
      return items;
    });
    const failed = writes.add(1);
    const next = writes.add(2);
    release();
    await expect(failed).rejects.toThrow('connection lost');
    await expect(next).resolves.toBe(2);
  });
});
