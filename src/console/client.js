// What a client (its API key) sees and does: its tasks and spend, its keys, each task's webhook deliveries.

import { call, get, query } from './api.js';
import { errorText, field, fill, h, link, points, section, table, time, toast } from './ui.js';

/** Points per UTC day as bars (spend: captures; earnings: payouts), newest day last. */
export function dayBars(days, label) {
  const max = Math.max(1, ...days.map((d) => Number(d.value)));
  return h('ol', { class: 'bars', 'aria-label': label },
    days.map((d) => {
      const bar = h('span', { class: 'fill' });
      bar.style.setProperty('width', `${((Number(d.value) / max) * 100).toFixed(1)}%`);
      return h('li', {}, h('span', { class: 'day' }, d.day), h('span', { class: 'track' }, bar), h('span', { class: 'value' }, points(d.value)));
    }));
}

/** Sums a ledger summary's amounts of `kind` per day, oldest first. */
export function perDay(summary, kind) {
  const days = new Map();
  for (const row of summary) days.set(row.day, (days.get(row.day) ?? 0) + Number(row.amounts?.[kind] ?? 0));
  return [...days].map(([day, value]) => ({ day, value: String(Math.round(value * 1e6) / 1e6) })).reverse();
}

async function myTasks(main, _args, params) {
  const since = new Date(Date.now() - 30 * 86400_000).toISOString();
  const [balance, page, summary] = await Promise.all([
    get('/v1/balance'),
    get(`/v1/tasks${query({ limit: 50, cursor: params.get('cursor') })}`),
    get(`/v1/account/ledger/summary${query({ created_after: since })}`),
  ]);
  fill(main,
    section('Balance', h('dl', { class: 'facts' },
      h('dt', {}, 'Available'), h('dd', { id: 'available' }, points(balance.available_points)),
      h('dt', {}, 'Held'), h('dd', {}, points(balance.held_points)),
      h('dt', {}, 'Spent in all'), h('dd', {}, points(balance.lifetime_spent_points)))),
    section('Spend per day (last 30 days)', perDay(summary.data, 'capture').length ? dayBars(perDay(summary.data, 'capture'), 'Points spent per UTC day') : h('p', { class: 'empty' }, 'Nothing spent.')),
    section('Tasks', table([
      ['Task', (t) => link(`#/my-task/${encodeURIComponent(t.task_id)}`, t.task_id)],
      ['Type', (t) => t.task_type], ['Status', (t) => h('span', { class: `status ${t.status}` }, t.status)],
      ['Created', (t) => time(t.created_at)], ['Charged', (t) => points(t.charged_points)],
    ], page.data, { empty: 'No task yet.' }),
    page.next_cursor ? h('p', {}, link(`#/my-tasks?cursor=${encodeURIComponent(page.next_cursor)}`, 'Older tasks →')) : null));
}

async function myTask(main, [taskId]) {
  const [task, hooks] = await Promise.all([get(`/v1/tasks/${encodeURIComponent(taskId)}`), get(`/v1/tasks/${encodeURIComponent(taskId)}/webhooks`)]);
  const running = task.status === 'queued' || task.status === 'assigned';
  fill(main,
    section(`Task ${task.task_id}`,
      h('dl', { class: 'facts' },
        h('dt', {}, 'Status'), h('dd', {}, task.status), h('dt', {}, 'Type'), h('dd', {}, task.task_type),
        h('dt', {}, 'Charged'), h('dd', {}, points(task.charged_points)), h('dt', {}, 'Created'), h('dd', {}, time(task.created_at))),
      running ? h('button', { type: 'button', onclick: async () => {
        try {
          await call('POST', `/v1/tasks/${encodeURIComponent(taskId)}/cancel`);
          toast('Task cancelled.');
          myTask(main, [taskId]);
        } catch (error) {
          toast(errorText(error), 'error');
        }
      } }, 'Cancel this task') : null),
    section('Webhook deliveries', hooks.webhook ? h('p', {}, `To ${hooks.webhook.url} (${hooks.webhook.events.join(', ')})`) : h('p', { class: 'empty' }, 'This task has no webhook.'),
      hooks.deliveries.map((d) => h('article', { class: 'evidence' },
        h('h3', {}, `${d.event} → ${d.status}`), h('p', {}, `${d.url}, written ${time(d.created_at)}, finished ${time(d.finished_at)}`),
        table([['#', (a) => String(a.attempt)], ['At', (a) => time(a.started_at)], ['Took', (a) => `${a.duration_ms} ms`], ['Answer', (a) => (a.status_code === null ? '—' : String(a.status_code))], ['Error', (a) => a.error ?? '']], d.attempts, { empty: 'No attempt yet.' })))));
}

async function keys(main) {
  const { data } = await get('/v1/account/keys');
  const name = h('input', { name: 'name', required: true, maxlength: 100 });
  const limit = h('input', { name: 'limit', inputmode: 'decimal', pattern: '\\d+(\\.\\d+)?' });
  const period = h('select', { name: 'period' }, h('option', { value: 'day' }, 'per UTC day'), h('option', { value: 'total' }, 'in total'));
  const created = h('div', { role: 'status' });
  const revoke = async (key) => {
    try {
      await call('DELETE', `/v1/account/keys/${encodeURIComponent(key.key_id)}`);
      toast(`Key ${key.name} revoked.`);
      keys(main);
    } catch (error) {
      toast(errorText(error), 'error');
    }
  };
  const setLimit = async (key) => {
    const value = prompt(`Spend limit of ${key.name} in points per day (empty: no limit)`, key.spend_limit?.points ?? '');
    if (value === null) return;
    try {
      await call('PATCH', `/v1/account/keys/${encodeURIComponent(key.key_id)}`, { spend_limit: value.trim() ? { points: value.trim(), period: key.spend_limit?.period ?? 'day' } : null });
      keys(main);
    } catch (error) {
      toast(errorText(error), 'error');
    }
  };
  fill(main,
    section('API keys', table([
      ['Name', (k) => k.name], ['Prefix', (k) => h('code', {}, k.prefix)], ['Created', (k) => time(k.created_at)], ['Last used', (k) => time(k.last_used_at)],
      ['Spend limit', (k) => (k.spend_limit ? `${k.spend_limit.spent_points} of ${points(k.spend_limit.points)} ${k.spend_limit.period === 'day' ? 'today' : 'in total'}` : 'none')],
      ['', (k) => (k.revoked_at ? `revoked ${time(k.revoked_at)}` : h('span', { class: 'actions' },
        h('button', { type: 'button', onclick: () => setLimit(k), 'aria-label': `Set the spend limit of ${k.name}` }, 'Limit…'),
        h('button', { type: 'button', class: 'danger', onclick: () => revoke(k), 'aria-label': `Revoke ${k.name}` }, 'Revoke')))],
    ], data)),
    section('New key', h('form', { id: 'new-key', onsubmit: async (event) => {
      event.preventDefault();
      try {
        const key = await call('POST', '/v1/account/keys', { name: name.value.trim(), spend_limit: limit.value.trim() ? { points: limit.value.trim(), period: period.value } : null });
        await keys(main);
        fill(main.querySelector('#new-key-out'), h('p', {}, 'Store this key now; it is shown only once: ', h('code', { id: 'new-key-value' }, key.api_key)));
      } catch (error) {
        fill(created, h('p', { class: 'error' }, errorText(error)));
      }
    } }, field('Name', name), field('Spend limit (points, optional)', limit), field('Period', period), h('button', { type: 'submit' }, 'Create key'), created),
    h('div', { id: 'new-key-out', role: 'status' })));
}


const EVENTS = ['completed', 'failed', 'timed_out', 'cancelled'];

/** The account's default webhook and the secret that signs its deliveries. */
async function webhook(main) {
  let current = null;
  try {
    current = await get('/v1/account/webhook');
  } catch (error) {
    if (error.status !== 404) throw error;
  }
  const secret = await get('/v1/account/webhook-secret');
  const url = h('input', { name: 'url', type: 'url', required: true, value: current?.url ?? '' });
  const boxes = EVENTS.map((event) => h('input', { type: 'checkbox', name: 'events', value: event, checked: !current || current.events.includes(event) }));
  const out = h('div', { role: 'status' });
  const shown = h('code', { id: 'secret' }, `${secret.secret.slice(0, 10)}…`);
  fill(main,
    section('Default webhook', h('p', {}, current ? `Every new task tells ${current.url} when it ends (${current.events.join(', ')}).` : 'No default webhook: only tasks that name their own have one.'),
      h('form', { onsubmit: async (event) => {
        event.preventDefault();
        try {
          await call('PUT', '/v1/account/webhook', { url: url.value.trim(), events: boxes.filter((box) => box.checked).map((box) => box.value) });
          toast('Webhook saved.');
          webhook(main);
        } catch (error) {
          fill(out, h('p', { class: 'error' }, errorText(error)));
        }
      } },
        field('URL', url),
        h('fieldset', {}, h('legend', {}, 'Events'), boxes.map((box) => h('label', { class: 'check' }, box, ` ${box.value}`))),
        h('span', { class: 'actions' }, h('button', { type: 'submit' }, 'Save'),
          current ? h('button', { type: 'button', class: 'danger', onclick: async () => {
            await call('DELETE', '/v1/account/webhook');
            toast('Default webhook removed.');
            webhook(main);
          } }, 'Remove') : null),
        out)),
    section('Signing secret', h('p', {}, 'Deliveries are signed with this secret (Standard Webhooks). Rotated ', time(secret.rotated_at),
      secret.previous_secret_expires_at ? `; the replaced one still signs until ${time(secret.previous_secret_expires_at)}` : '', '.'),
      h('p', {}, shown),
      h('span', { class: 'actions' },
        h('button', { type: 'button', onclick: () => fill(shown, secret.secret) }, 'Show the secret'),
        h('button', { type: 'button', onclick: async () => {
          await call('POST', '/v1/account/webhook-secret/rotate');
          toast('Secret rotated: the old one signs too for 24 h.');
          webhook(main);
        } }, 'Rotate'))),
    section('Deliveries', h('p', {}, 'Each task\'s deliveries, with every attempt, are on its page (Tasks & spend).')));
}

export const clientViews = {
  'my-tasks': { title: 'Tasks & spend', render: myTasks },
  keys: { title: 'Keys', render: keys },
  webhook: { title: 'Webhook', render: webhook },
  'my-task': { render: myTask },
};
