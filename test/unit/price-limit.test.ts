import { pointsBelow, pointsLeft, pointsShare, pointsSum, scrapePriceLimit } from '../../src/compat/price-limit';

describe('a scrape\'s maxPricePoints', () => {
  test('decimal points are exact: sums, differences at least 0, shares rounded down', () => {
    expect(pointsSum('0.1', '0.2', '-0.3')).toBe('0');
    expect(pointsSum('10', '0.000000000000000000001')).toBe('10.000000000000000000001');
    expect(pointsLeft('30', '9.192')).toBe('20.808');
    expect(pointsLeft('2', '2.5')).toBe('0');
    expect(pointsShare('10', 3)).toBe('3.333333');
    expect(pointsShare('1.0000000003', 2)).toBe('0.5000000001');
    expect(pointsBelow('0.808', '2')).toBe(true);
    expect(pointsBelow('2', '2.000')).toBe(false);
  });

  test('shares never add up to more than the limit', () => {
    const prices = scrapePriceLimit('10', { pageTasks: 3, extractions: 2, completionFloor: '1.5' });
    expect(prices.pageShare).toBe('2.333333');
    expect(prices.afterFetch('2')).toBe('0.333333');
    expect(prices.extractionShare('3.1')).toBe('3.45');
    const spent = pointsSum(...Array.from({ length: 3 }, () => prices.pageShare), prices.extractionShare('6.999999'), prices.extractionShare('6.999999'));
    expect(pointsBelow('10', spent)).toBe(false);
  });

  test('a limit below the completions\' floor is refused, naming maxPricePoints', () => {
    expect(() => scrapePriceLimit('2.9', { pageTasks: 1, extractions: 2, completionFloor: '1.5' })).toThrow(expect.objectContaining({ type: 'no_solver_within_price', extra: { param: 'maxPricePoints' } }));
    expect(scrapePriceLimit('3', { pageTasks: 1, extractions: 2, completionFloor: '1.5' }).pageShare).toBe('0');
  });
});
