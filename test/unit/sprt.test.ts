import { SPRT, sprtStep, sprtThresholds, verificationRate, VERIFICATION_RATE_HALVING } from '../../src/trust/sprt';

/** The sequential test on verified outcomes and the verification rate (docs/trust.md, "Verified client tasks"). */

const run = (outcomes: boolean[]) => {
  let llr = 0;
  const decisions = outcomes.map((failed) => {
    const step = sprtStep(llr, failed);
    llr = step.llr;
    return step.decision;
  });
  return { llr, decisions };
};

// A deterministic stream with failures at rate p (a failure each time the running count passes a whole number).
const stream = (n: number, p: number) => Array.from({ length: n }, (_, i) => Math.floor((i + 1) * p) > Math.floor(i * p));

test('the thresholds follow from alpha and beta', () => {
  const { upper, lower } = sprtThresholds();
  expect(upper).toBeCloseTo(Math.log(0.99 / 0.001), 10);
  expect(lower).toBeCloseTo(Math.log(0.01 / 0.999), 10);
});

test('three proven wrong answers in a row quarantine; two do not', () => {
  expect(run([true, true]).decisions).toEqual(['continue', 'continue']);
  expect(run([true, true, true]).decisions.at(-1)).toBe('quarantine');
});

test('an honest record is accepted and the test starts again from zero', () => {
  const { decisions, llr } = run(Array(49).fill(false));
  expect(decisions.indexOf('accept')).toBe(48);
  expect(llr).toBe(0);
  // After an accepted test, three wrong answers in a row still quarantine: no credit is banked.
  expect(run([...Array(49).fill(false), true, true, true]).decisions.at(-1)).toBe('quarantine');
});

test('a solver wrong 10 % of the time is quarantined within about 50 verified outcomes; one wrong 1 % never is', () => {
  const cheat = run(stream(200, SPRT.p1)).decisions;
  expect(cheat.indexOf('quarantine')).toBeGreaterThan(0);
  expect(cheat.indexOf('quarantine')).toBeLessThan(100);
  expect(run(stream(10_000, SPRT.p0)).decisions).not.toContain('quarantine');
});

test('the verification rate starts high, halves with verified passes and stops at the floor', () => {
  expect(verificationRate(0, 0.5, 0.02)).toBe(0.5);
  expect(verificationRate(VERIFICATION_RATE_HALVING, 0.5, 0.02)).toBeCloseTo(0.25, 10);
  expect(verificationRate(10_000, 0.5, 0.02)).toBe(0.02);
  // A floor above the start (every task verified, as a test sets it) wins.
  expect(verificationRate(0, 0.5, 1)).toBe(1);
  expect(verificationRate(0, 0, 0)).toBe(0);
});
