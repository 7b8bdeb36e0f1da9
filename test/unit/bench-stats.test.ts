import { alternate, jainIndex, summarize, type LoadRun } from '../../bench/lib/stats';

describe('benchmark statistics', () => {
  it('summarizes by nearest rank', () => {
    const values = Array.from({ length: 100 }, (_, i) => 100 - i);
    expect(summarize(values)).toEqual({ samples: 100, p50: 50, p95: 95, p99: 99, mean: 50.5 });
  });

  it("takes Jain's fairness index: 1 for an even split, 1/n when one party got everything", () => {
    expect(jainIndex([25, 25, 25, 25])).toBe(1);
    expect(jainIndex([100, 0, 0, 0])).toBe(0.25);
    expect(jainIndex([99, 1])).toBe(0.51);
    expect(jainIndex([0, 0])).toBe(1);
  });

  it('alternates the loads batch by batch and pools each one', async () => {
    const order: string[] = [];
    const batch = async (name: 'a' | 'b', _concurrency: number, total: number): Promise<LoadRun> => {
      order.push(`${name}${total}`);
      const latency = name === 'a' ? 10 : 30;
      return { latencies: Array(total).fill(latency), perSecond: 0, seconds: total / (name === 'a' ? 100 : 20), errors: name === 'b' ? 1 : 0, firstError: name === 'b' ? `b failed after ${total}` : undefined };
    };
    const noop = async () => undefined;
    const pooled = await alternate({ a: noop, b: noop }, 8, 10, 4, batch);
    expect(order).toEqual(['a3', 'b3', 'b2', 'a2', 'a3', 'b3', 'b2', 'a2']);
    expect(pooled.a).toMatchObject({ perSecond: 100, errors: 0 });
    expect(pooled.a!.latencies).toHaveLength(10);
    expect(pooled.a!.seconds).toBeCloseTo(0.1);
    expect(pooled.b).toMatchObject({ perSecond: 20, errors: 4, firstError: 'b failed after 3' });
    expect(pooled.b!.latencies).toEqual(Array(10).fill(30));
  });

  it('runs every call of each load by default', async () => {
    const calls = { a: 0, b: 0 };
    const pooled = await alternate({ a: async () => void calls.a++, b: async () => void calls.b++ }, 3, 7, 2);
    expect(calls).toEqual({ a: 7, b: 7 });
    expect(pooled.a!.latencies).toHaveLength(7);
    expect(pooled.b!.latencies).toHaveLength(7);
  });

  it('runs only the loads it is given', async () => {
    let calls = 0;
    const pooled = await alternate<'a' | 'b'>({ b: async () => void calls++ }, 2, 5, 2);
    expect(calls).toBe(5);
    expect(Object.keys(pooled)).toEqual(['b']);
  });
});
