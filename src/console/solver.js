// What a solver (its API key) sees: earnings, reputation and checks per task type, its latest payouts.

import { get, query } from './api.js';
import { dayBars, perDay } from './client.js';
import { fill, h, points, section, table, time } from './ui.js';

async function earnings(main) {
  const since = new Date(Date.now() - 30 * 86400_000).toISOString();
  const [stats, balance, held, summary, payouts, attempts] = await Promise.all([
    get('/v1/solver/stats'),
    get('/v1/balance'),
    get('/v1/solver/earnings'),
    get(`/v1/account/ledger/summary${query({ created_after: since })}`),
    get(`/v1/account/ledger${query({ kind: 'payout', limit: 20 })}`),
    get('/v1/solver/attempts'),
  ]);
  const trust = stats.trust;
  const days = perDay(summary.data, 'payout');
  fill(main,
    section('Earnings', h('dl', { class: 'facts' },
      h('dt', {}, 'Earned in all'), h('dd', { id: 'earned' }, points(stats.lifetime_earned_points)),
      h('dt', {}, 'Vested (available)'), h('dd', { id: 'vested' }, points(balance.available_points)),
      h('dt', {}, 'Held, not vested yet'), h('dd', { id: 'unvested' }, `${points(held.unvested_points)} over ${held.unvested_tasks} tasks`,
        held.frozen ? ': frozen while quarantined' : held.next_vesting_at ? `; the oldest vests by ${time(held.next_vesting_at)}` : ''),
      h('dt', {}, 'Attempts'), h('dd', {}, `${stats.attempts}: ${stats.completed} completed, ${stats.failed} failed${stats.success_rate === null ? '' : ` (${Math.round(stats.success_rate * 100)}%)`}`),
      h('dt', {}, 'Online'), h('dd', {}, stats.connected ? `yes${stats.draining ? ', draining' : ''}, ${stats.active_attempts} running` : 'no')),
      h('p', {}, 'Pay for a task is held until it vests (after a while, or sooner when checks vouch for you); held pay cannot be spent, and a confirmed quarantine gives it back to the clients.'),
      trust.quarantine ? h('p', { class: 'error' }, `Quarantined since ${time(trust.quarantine.started_at)}: ${trust.quarantine.reason} (${trust.quarantine.task_type}). Nothing vests until an operator clears it (releasing the held pay) or confirms it (refunding it).`) : null),
    section('Earned per day (last 30 days)', days.length ? dayBars(days, 'Points earned per UTC day') : h('p', { class: 'empty' }, 'Nothing earned yet.')),
    section('Reputation per task type', table([
      ['Task type', (r) => r.task_type], ['Score', (r) => String(r.score)], ['Successes', (r) => String(r.successes)], ['Failures', (r) => String(r.failures)],
      ['Gets client work', (r) => (r.client_work ? 'yes' : 'no') + (r.on_probation ? ' (probation)' : '')],
    ], trust.reputation, { empty: 'No reputation yet.' })),
    section('Offers', table([
      ['Task type', (c) => c.task_type], ['Model', (c) => c.model_name], ['Price', (c) => points(c.min_price_points)], ['Slots taken', (c) => `${c.active_attempts}/${c.max_concurrent}`],
    ], stats.capabilities, { empty: 'No capability registered.' })),
    section('Latest attempts (last 7 days)', table([
      ['Started', (a) => time(a.started_at)], ['Task', (a) => a.task_id], ['Type', (a) => a.task_type], ['Price', (a) => points(a.price_points)],
      ['Outcome', (a) => h('span', { class: `outcome ${a.outcome}` }, a.outcome)],
      ['Why', (a) => (a.error ? `${a.error.type ?? 'error'}: ${a.error.message ?? ''}` : '')],
    ], attempts.data, { empty: 'No attempt in the last 7 days.' })),
    section('Latest payouts', table([
      ['When', (e) => time(e.created_at)], ['Task', (e) => e.task_id ?? '—'], ['Type', (e) => e.task_type ?? '—'], ['Amount', (e) => points(e.amount)],
    ], payouts.data, { empty: 'No payout yet.' })));
}

export const solverViews = {
  earnings: { title: 'Earnings & reputation', render: earnings },
};
