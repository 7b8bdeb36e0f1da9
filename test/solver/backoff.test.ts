import { reconnectDelay } from '../../src/solver/backoff';

test('doubles from the base delay up to the maximum', () => {
  const top = () => 1;
  expect([0, 1, 2, 3, 6, 7, 20].map((failures) => reconnectDelay(failures, 500, 30_000, top))).toEqual([500, 1000, 2000, 4000, 30_000, 30_000, 30_000]);
});

test('jitter keeps each delay between half and all of its ceiling', () => {
  expect(reconnectDelay(3, 500, 30_000, () => 0)).toBe(2000);
  for (let i = 0; i < 100; i++) {
    const delay = reconnectDelay(4, 500, 30_000);
    expect(delay).toBeGreaterThanOrEqual(4000);
    expect(delay).toBeLessThanOrEqual(8000);
  }
});
