/**
 * Delay before reconnection attempt number `failures` (0-based): doubling from `baseMs` up to `maxMs`,
 * with "equal jitter" (between half and all of it) so solvers dropped together do not return together.
 */
export function reconnectDelay(
  failures: number,
  baseMs: number,
  maxMs: number,
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(failures, 30));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}
