import { sql } from 'slonik';
import { DEFAULT_TRUST_POLICY, evidenceOf, scoreOf, trusted } from '../../src/db/reputation';

/**
 * The trust rule's SQL fragments are made once per policy and table alias (oncePer, src/db/fragments.ts):
 * the same fragment whenever asked again, and another policy's values for another policy.
 */

const policy = { ...DEFAULT_TRUST_POLICY, probationCanaries: 1, minScore: 0.3 };

test('a fragment asked again under the same policy and alias is the one made first', () => {
  expect(scoreOf(policy, 'rep')).toBe(scoreOf(policy, 'rep'));
  expect(evidenceOf(policy, 'rep')).toBe(evidenceOf(policy, 'rep'));
  expect(trusted(policy, 'c')).toBe(trusted(policy, 'c'));
  expect(scoreOf(policy, 'r')).not.toBe(scoreOf(policy, 'rep'));
  expect(scoreOf(policy, 'r').sql).toContain('"r"."successes"');
});

test('another policy gets fragments with its own values', () => {
  const other = { ...policy, halfLifeSeconds: 7, minScore: 0.45 };
  expect(scoreOf(other, 'rep').values).toContain(7);
  expect(scoreOf(policy, 'rep').values).not.toContain(7);
  expect(trusted(other, 'c').values).toContain(0.45);
  expect(trusted(policy, 'c').values).not.toContain(0.45);
});

test('the capability\'s own price made once is what naming that price builds each time', () => {
  const named = trusted(policy, 'c', sql.fragment`${sql.identifier(['c', 'min_price_points'])}`);
  expect({ sql: trusted(policy, 'c').sql, values: trusted(policy, 'c').values }).toEqual({ sql: named.sql, values: named.values });
});
