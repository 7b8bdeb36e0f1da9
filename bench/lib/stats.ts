/** Latency samples → median, p95, p99 (nearest-rank), in milliseconds. */
export interface Summary {
  samples: number;
  p50: number;
  p95: number;
  p99: number;
  mean: number;
}

export function summarize(values: number[]): Summary {
  const sorted = [...values].sort((a, b) => a - b);
  const rank = (p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? NaN;
  const round = (value: number) => Math.round(value * 100) / 100;
  return {
    samples: sorted.length,
    p50: round(rank(50)),
    p95: round(rank(95)),
    p99: round(rank(99)),
    mean: round(sorted.reduce((sum, value) => sum + value, 0) / (sorted.length || 1)),
  };
}

/**
 * Runs `total` calls of `fn` with `concurrency` callers; returns latencies (ms) and throughput (calls/s).
 * With `rampMs`, the callers start evenly spread over that time instead of all at once, so calls of a
 * fixed length do not stay in lockstep waves.
 */
export async function load(
  concurrency: number,
  total: number,
  fn: (i: number) => Promise<void>,
  options: { rampMs?: number } = {},
): Promise<{ latencies: number[]; perSecond: number; errors: number; firstError?: string }> {
  const latencies: number[] = [];
  let next = 0;
  let errors = 0;
  let firstError: string | undefined;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, caller) => {
      if (options.rampMs) await sleep((options.rampMs * caller) / concurrency);
      for (;;) {
        const i = next++;
        if (i >= total) return;
        const t0 = performance.now();
        try {
          await fn(i);
          latencies.push(performance.now() - t0);
        } catch (error) {
          errors += 1;
          firstError ??= String((error as Error)?.message ?? error);
        }
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  return { latencies, perSecond: Math.round((latencies.length / seconds) * 10) / 10, errors, firstError };
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
