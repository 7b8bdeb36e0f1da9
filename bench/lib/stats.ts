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
export interface LoadRun {
  latencies: number[];
  perSecond: number;
  seconds: number;
  errors: number;
  firstError?: string;
}

export async function load(
  concurrency: number,
  total: number,
  fn: (i: number) => Promise<void>,
  options: { rampMs?: number } = {},
): Promise<LoadRun> {
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
  return { latencies, perSecond: perSecond(latencies.length, seconds), seconds, errors, firstError };
}

const perSecond = (calls: number, seconds: number) => Math.round((calls / (seconds || Infinity)) * 10) / 10;

/**
 * Runs `total` calls of each named load at `concurrency`, split into `batches` rounds whose order
 * alternates (A B, B A, A B, …), and pools each load's latencies and time. The machine's speed drifts
 * over minutes: two loads measured one whole phase after the other meet it at different speeds, and
 * their ratio follows the drift. `batch` runs one batch (the default is `load`); wrap it to measure more.
 */
export async function alternate<K extends string>(
  loads: Partial<Record<K, () => Promise<void>>>,
  concurrency: number,
  total: number,
  batches: number,
  batch: (name: K, concurrency: number, total: number) => Promise<LoadRun> = (name, c, n) => load(c, n, loads[name]!),
): Promise<Partial<Record<K, LoadRun>>> {
  const names = Object.keys(loads) as K[];
  const pooled: Partial<Record<K, LoadRun>> = {};
  for (const name of names) pooled[name] = { latencies: [], perSecond: 0, seconds: 0, errors: 0 };
  for (let round = 0; round < batches; round++) {
    // Each round's share of the total, so the rounds add up to it exactly.
    const count = Math.round((total * (round + 1)) / batches) - Math.round((total * round) / batches);
    for (const name of round % 2 === 0 ? names : [...names].reverse()) {
      const run = await batch(name, concurrency, count);
      const into = pooled[name]!;
      into.latencies.push(...run.latencies);
      into.seconds += run.seconds;
      into.errors += run.errors;
      into.firstError ??= run.firstError;
      into.perSecond = perSecond(into.latencies.length, into.seconds);
    }
  }
  return pooled;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Jain's fairness index of what each of n parties got: (Σx)² / (n Σx²), 1 when equal, 1/n when one got all. */
export function jainIndex(values: number[]): number {
  const sum = values.reduce((total, value) => total + value, 0);
  const squares = values.reduce((total, value) => total + value * value, 0);
  return squares === 0 ? 1 : Math.round(((sum * sum) / (values.length * squares)) * 1000) / 1000;
}

/** Probes every half second until `probe` says true or `timeoutMs` has passed. */
export async function waitUntil(probe: () => Promise<boolean>, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe()) && Date.now() < deadline) await sleep(500);
}
