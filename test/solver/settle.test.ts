import { SETTLE_RESERVE_MS, settleDeadline } from '../../src/solver/browser/settle';

describe('the settle wait\'s end', () => {
  test('the first of the time limit and the deadline, less the waits that follow and the capture\'s reserve', () => {
    expect(settleDeadline([10_000, 8_000])).toBe(8_000 - SETTLE_RESERVE_MS);
    expect(settleDeadline([10_000, 12_000], 500)).toBe(10_000 - 500 - SETTLE_RESERVE_MS);
  });

  test('an attempt without a deadline is bounded by its time limit alone', () => {
    expect(settleDeadline([10_000, undefined], 2_000)).toBe(10_000 - 2_000 - SETTLE_RESERVE_MS);
  });
});
