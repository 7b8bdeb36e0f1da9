// What an operator (the admin key) sees and does: queues, solvers, tasks, manual completion, money, trust.

import { call, followEvents, get, query } from './api.js';
import { queueChart } from './chart.js';
import { sideBySide } from './diff.js';
import { validate } from './schema.js';
import { errorText, field, fill, h, link, points, seconds, section, table, time, toast } from './ui.js';

const TASK_TYPES = ['proxy_fetch', 'web_search', 'screenshot', 'page_snapshot', 'chat_completion'];
const TASK_STATES = ['queued', 'assigned', 'completed', 'failed', 'timed_out', 'cancelled'];
const TERMINAL = new Set(['completed', 'failed', 'timed_out', 'cancelled']);

const json = (value) => h('pre', { class: 'json' }, JSON.stringify(value, null, 2));
const taskLink = (id) => link(`#/task/${encodeURIComponent(id)}`, id);
const solverLink = (id) => (id ? link(`#/solver/${encodeURIComponent(id)}`, id) : '—');

/**
 * The operator's alert when the platform account cannot pay the checks that take new solvers off
 * probation (`platform` of GET /v1/admin/status): who waits, and what to deposit where. Nothing when it can.
 */
function platformAlert(platform) {
  if (!platform?.checks_unfunded) return null;
  const waiting = platform.solvers_awaiting_checks;
  return h('div', { class: 'alert error', role: 'alert', id: 'platform-alert' },
    h('p', {}, h('strong', {}, 'Checks unfunded. '),
      `The platform account (${platform.account_id}) has ${points(platform.available_points)} available, less than the ${points(platform.check_price_points)} a new solver's check needs (its hold and the reserve kept for the others' checks). `,
      waiting > 0
        ? `${waiting} solver${waiting === 1 ? '' : 's'} online wait${waiting === 1 ? 's' : ''} on probation (${platform.task_types_awaiting_checks.join(', ')}) and serve${waiting === 1 ? 's' : ''} nobody; clients are refused with solver_checks_unfunded.`
        : 'No new solver can leave probation.'),
    h('p', {}, `Deposit at least ${points(platform.recommended_points)} into account "${platform.account_id}" (`, link('#/tools', 'Money & policy'), '); waiting solvers get their checks at once.'));
}

/** Queues now and over the hour, and the solvers online; kept current by the event stream. */
async function queues(main) {
  const liveState = h('span', { class: 'live', 'aria-live': 'polite' }, 'connecting…');
  const alertBox = h('div', { id: 'alerts' });
  const queueBox = h('div', { id: 'queues' });
  const chartBox = h('div', { id: 'chart' });
  const solverBox = h('div', { id: 'solvers' }, h('p', {}, 'Loading…'));
  fill(main,
    alertBox,
    section('Queues', h('p', {}, 'Client tasks waiting for a solver slot, per task type. Updates: ', liveState), queueBox, chartBox),
    section('Solvers online', solverBox));
  const drawAlerts = async () => {
    try {
      const { platform } = await get('/v1/admin/status');
      fill(alertBox, platformAlert(platform));
    } catch {
      // The status is read again with the solvers; the queues stay shown meanwhile.
    }
  };
  let samples = [];
  const drawQueues = (latest) => {
    const rows = Object.entries(latest?.queues ?? {}).map(([type, queue]) => ({ type, ...queue }));
    fill(queueBox, table([
      ['Task type', (r) => link(`#/tasks?task_type=${r.type}&status=queued`, r.type)],
      ['Waiting', (r) => h('span', { 'data-queued': r.type }, String(r.queued))],
      ['Oldest wait', (r) => seconds(r.oldest_wait_seconds)],
      ['Free slots', (r) => `${r.free_slots} of ${r.slots}`],
    ], rows, { empty: 'No task waiting and no solver online.', caption: latest ? `As of ${time(latest.at)}` : undefined }));
    fill(chartBox, queueChart(samples));
  };
  const drawSolvers = async () => {
    try {
      const { data } = await get('/v1/admin/solvers');
      fill(solverBox, table([
        ['Solver', (s) => solverLink(s.solver_id)],
        ['Node', (s) => s.node_id + (s.draining ? ' (draining)' : '')],
        ['Offers (price, slots taken)', (s) => h('ul', { class: 'plain' }, s.capabilities.map((c) => h('li', {}, `${c.task_type} ${c.model_name}: ${points(c.min_price_points)}, ${c.active_attempts}/${c.max_concurrent}`)))],
        ['Reputation', (s) => h('ul', { class: 'plain' }, s.reputation.map((r) => h('li', {}, `${r.task_type}: ${r.score}${r.client_work ? '' : ' (no client work)'}${r.on_probation ? ' (probation)' : ''}`)))],
      ], data, { empty: 'No solver is online.' }));
    } catch (error) {
      fill(solverBox, h('p', { class: 'error' }, errorText(error)));
    }
  };
  drawQueues(null);
  await Promise.all([drawSolvers(), drawAlerts()]);
  let lastSolvers = Date.now();
  return followEvents((name, data) => {
    if (name === 'history') samples = data.samples;
    if (name === 'status') samples.push(data);
    if (name === 'history' || name === 'status') drawQueues(samples[samples.length - 1]);
    if (name === 'status' && Date.now() - lastSolvers > 4000) {
      lastSolvers = Date.now();
      drawSolvers();
      drawAlerts();
    }
  }, (state) => fill(liveState, state));
}

/** The task finder: by id, account, type, status and time. */
async function tasks(main, _args, params) {
  const input = (name, attrs = {}) => h('input', { name, value: params.get(name) ?? '', ...attrs });
  const select = (name, values) => h('select', { name }, h('option', { value: '' }, 'any'), values.map((v) => h('option', { value: v, selected: params.get(name) === v }, v)));
  const localTime = (name) => {
    const value = params.get(name);
    return h('input', { name, type: 'datetime-local', value: value ? value.slice(0, 16) : '' });
  };
  const form = h('form', { class: 'finder', onsubmit: (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const next = new URLSearchParams();
    for (const [name, value] of data) if (value) next.set(name, /^created_/.test(name) ? `${value}:00Z` : String(value));
    location.hash = `#/tasks?${next}`;
  } },
    field('Task id', input('task_id')),
    field('Account', input('account_id')),
    field('Type', select('task_type', TASK_TYPES)),
    field('Status', select('status', TASK_STATES)),
    field('Created after (UTC)', localTime('created_after')),
    field('Created before (UTC)', localTime('created_before')),
    h('button', { type: 'submit' }, 'Find'));
  const results = h('div', { id: 'found' });
  fill(main, section('Find tasks', form, results));
  const filter = Object.fromEntries(['task_id', 'account_id', 'task_type', 'status', 'created_after', 'created_before', 'cursor'].map((name) => [name, params.get(name)]));
  const page = await get(`/v1/admin/tasks${query({ ...filter, limit: 50 })}`);
  fill(results, table([
    ['Task', (t) => taskLink(t.task_id)],
    ['Account', (t) => t.account_id],
    ['Type', (t) => t.task_type],
    ['Status', (t) => h('span', { class: `status ${t.status}` }, t.status)],
    ['Created', (t) => time(t.created_at)],
    ['Price', (t) => points(t.price_points ?? t.max_price_points)],
  ], page.data, { empty: 'No task matches.' }),
  page.next_cursor ? h('p', {}, link(`#/tasks?${new URLSearchParams({ ...Object.fromEntries(params), cursor: page.next_cursor })}`, 'Older tasks →')) : null);
}

/** Attempts as bars on the task's own time line, from its creation to its end (or now). */
function timeline(task) {
  const start = Date.parse(task.created_at);
  const end = Math.max(Date.parse(task.completed_at ?? new Date().toISOString()), ...task.attempts.map((a) => Date.parse(a.ended_at ?? new Date().toISOString())), start + 1);
  const pct = (iso) => `${(((Date.parse(iso) - start) / (end - start)) * 100).toFixed(2)}%`;
  return h('ol', { class: 'timeline', 'aria-label': 'Attempts on the task\'s time line' },
    task.attempts.map((a) => {
      const width = `${Math.max(1, ((Date.parse(a.ended_at ?? new Date(end).toISOString()) - Date.parse(a.started_at)) / (end - start)) * 100).toFixed(2)}%`;
      const bar = h('span', { class: `bar ${a.outcome}` });
      bar.style.setProperty('margin-left', pct(a.started_at));
      bar.style.setProperty('width', width);
      return h('li', {},
        h('div', { class: 'track' }, bar),
        h('p', {}, `#${a.attempt_number} `, solverLink(a.solver_id), ` on ${a.node_id} at ${points(a.price_points)}: `, h('strong', {}, a.outcome),
          ` — ${time(a.started_at)} → ${time(a.ended_at)}`, a.error ? ` (${a.error.type ?? ''}: ${a.error.message ?? JSON.stringify(a.error)})` : ''));
    }));
}

let schemas;
async function resultSchema(taskType) {
  schemas ??= await fetch('/console/solver-schemas.json', { credentials: 'omit' }).then((response) => response.json());
  return { root: schemas, schema: schemas.results?.[taskType] };
}

const TEMPLATES = {
  proxy_fetch: (p) => ({ url: p.url, final_url: p.url, status_code: 200, content_type: 'markdown', content: '', title: null }),
  web_search: () => ({ results: [{ title: '', url: '', snippet: '' }] }),
  screenshot: () => ({ mime_type: 'image/png', image_base64: '', width: 1280, height: 800 }),
  page_snapshot: (p) => ({ url: p.url, snapshot: '', snapshot_format: p.mode ?? 'markdown', title: null }),
  chat_completion: () => ({ finish_reason: 'stop', usage: { prompt_tokens: 0, completion_tokens: 0 } }),
};

function completeForm(task, reload) {
  const solver = h('input', { name: 'solver_id', required: true, value: task.solver_id ?? '', spellcheck: 'false' });
  const result = h('textarea', { name: 'result', rows: 10, spellcheck: 'false' }, JSON.stringify((TEMPLATES[task.task_type] ?? (() => ({})))(task.payload), null, 2));
  const problems = h('div', { role: 'alert', class: 'error' });
  const form = h('form', { id: 'complete', onsubmit: async (event) => {
    event.preventDefault();
    let value;
    try {
      value = JSON.parse(result.value);
    } catch (error) {
      return fill(problems, `The result is not JSON: ${error.message}`);
    }
    const { root, schema } = await resultSchema(task.task_type);
    const found = schema ? validate(schema, value, root) : [];
    if (found.length) return fill(problems, h('ul', {}, found.map((p) => h('li', {}, `${p.loc}: ${p.msg}`))));
    try {
      await call('POST', `/v1/admin/tasks/${encodeURIComponent(task.task_id)}/complete`, { solver_id: solver.value.trim(), result: value });
      toast('Task completed by hand.');
      reload(true);
    } catch (error) {
      fill(problems, errorText(error));
    }
  } },
    h('p', {}, `The result is checked against the ${task.task_type} result schema before it is sent; the named solver is paid the task's price.`),
    field('Solver paid', solver),
    field('Result (JSON)', result),
    h('button', { type: 'submit' }, 'Complete task'),
    problems);
  return section('Complete by hand', form);
}

function resultView(result) {
  if (!result) return h('p', { class: 'empty' }, 'No result.');
  if (typeof result.image_base64 === 'string' && result.image_base64) {
    const { image_base64: image, ...rest } = result;
    return h('div', {}, h('img', { class: 'shot', src: `data:image/png;base64,${image}`, alt: `Screenshot result, ${result.width}×${result.height}` }), json(rest));
  }
  return json(result);
}

async function task(main, [taskId]) {
  let shown;
  const draw = async (force = false) => {
    const t = await get(`/v1/admin/tasks/${encodeURIComponent(taskId)}`);
    if (force) shown = undefined;
    // Redrawn only when something changed: a half-typed manual result is not thrown away.
    const key = JSON.stringify([t.status, t.attempts, t.ledger.length, t.queue?.position]);
    if (key === shown) return t;
    shown = key;
    fill(main,
      section(`Task ${t.task_id}`,
        h('dl', { class: 'facts' },
          h('dt', {}, 'Status'), h('dd', {}, h('span', { class: `status ${t.status}`, id: 'task-status' }, t.status), t.queue ? ` (position ${t.queue.position}, waited ${seconds(t.queue.waited_seconds)})` : ''),
          h('dt', {}, 'Type'), h('dd', {}, t.task_type),
          h('dt', {}, 'Account'), h('dd', {}, link(`#/tasks?account_id=${encodeURIComponent(t.account_id)}`, t.account_id)),
          h('dt', {}, 'Solver'), h('dd', {}, solverLink(t.solver_id)),
          h('dt', {}, 'Price'), h('dd', {}, `${points(t.price_points)} (at most ${points(t.max_price_points)}; charged ${points(t.charged_points)})`),
          h('dt', {}, 'Created'), h('dd', {}, time(t.created_at)),
          h('dt', {}, 'Ended'), h('dd', {}, time(t.completed_at)),
          h('dt', {}, 'Workflow'), h('dd', {}, t.workflow_url ? h('a', { href: t.workflow_url, target: '_blank', rel: 'noopener noreferrer' }, `${t.workflow_id} in the Temporal UI`) : `${t.workflow_id} (set TEMPORAL_UI_URL for a link)`)),
        t.error ? h('p', { class: 'error' }, `${t.error.type}: ${t.error.message}`) : null),
      section('Attempts', t.attempts.length ? timeline(t) : h('p', { class: 'empty' }, TERMINAL.has(t.status) ? 'No solver attempt.' : 'No attempt yet.')),
      section('Ledger', table([
        ['Entry', (e) => e.entry_id], ['Account', (e) => e.account_id], ['Kind', (e) => e.kind], ['Amount', (e) => points(e.amount)],
        ['Available', (e) => e.available_change], ['Held', (e) => e.held_change], ['When', (e) => time(e.created_at)],
      ], t.ledger, { empty: 'No ledger entry.' })),
      section('Payload', json(t.payload)),
      section('Result', resultView(t.result)),
      TERMINAL.has(t.status) ? null : completeForm(t, draw));
    return t;
  };
  let current = await draw();
  return followEvents((name, data) => {
    const mine = name === 'task_finished' && data.task_id === taskId;
    // A task still running changes without ending (an attempt starts or fails): the snapshots refresh it.
    if (mine || (name === 'status' && !TERMINAL.has(current.status))) {
      draw().then((t) => (current = t)).catch(() => undefined);
    }
  });
}

async function quarantines(main) {
  const { quarantines: open } = await get('/v1/admin/quarantines');
  const solverId = h('input', { name: 'solver_id', required: true });
  fill(main,
    section('Quarantined solvers', table([
      ['Solver', (q) => solverLink(q.solver_id)], ['Task type', (q) => q.task_type], ['Reason', (q) => q.reason],
      ['Since', (q) => time(q.started_at)], ['Held', (q) => `${points(q.held_points)} over ${q.held_tasks} tasks`],
    ], open, { empty: 'No solver is quarantined.' })),
    section('Any solver\'s record', h('form', { onsubmit: (event) => {
      event.preventDefault();
      location.hash = `#/solver/${encodeURIComponent(solverId.value.trim())}`;
    } }, field('Solver id', solverId), h('button', { type: 'submit' }, 'Open'))));
}

/** The two results of a screenshot disagreement, as the tasks hold them. */
async function screenshots(evidence) {
  const shot = async (id) => {
    if (!id) return h('p', { class: 'empty' }, 'No task.');
    try {
      const t = await get(`/v1/admin/tasks/${encodeURIComponent(id)}`);
      return t.result?.image_base64 ? h('img', { class: 'shot', src: `data:image/png;base64,${t.result.image_base64}`, alt: `Screenshot by ${t.solver_id} (task ${id})` }) : h('p', { class: 'empty' }, 'No image kept.');
    } catch (error) {
      return h('p', { class: 'error' }, errorText(error));
    }
  };
  const [first, second] = await Promise.all([shot(evidence.client_task_id), shot(evidence.run_task_id)]);
  return h('div', { class: 'pair shots' },
    h('div', { class: 'pane' }, h('h4', {}, `First: ${evidence.first?.solver_id} (hash ${evidence.first?.average_hash ?? '—'})`), first),
    h('div', { class: 'pane' }, h('h4', {}, `Second: ${evidence.second?.solver_id} (hash ${evidence.second?.average_hash ?? '—'})`), second));
}

function quarantineEvidence(q) {
  const e = q.evidence ?? {};
  const panes = e.search
    ? sideBySide('Oracle URLs', e.search.oracle_urls, 'Returned URLs', e.search.returned_urls)
    : e.page ? sideBySide(`Expected (the page's text at ${e.page.host ?? ''}${e.page.path ?? ''}, first 500 characters)`, String(e.page.expected_excerpt ?? ''), 'Returned (first 500 characters)', String(e.returned_excerpt ?? ''))
    : e.expected_token !== undefined ? sideBySide('Expected (the canary\'s token)', String(e.expected_token), 'Returned (first 500 characters)', String(e.returned_excerpt ?? '')) : json(e);
  return h('article', { class: 'evidence' },
    h('h3', {}, `${q.reason} (${q.task_type}) since ${time(q.started_at)}`, q.cleared_at ? ` — cleared ${time(q.cleared_at)}${q.cleared_note ? `: ${q.cleared_note}` : ''}` : '',
      q.confirmed_at ? ` — confirmed ${time(q.confirmed_at)}${q.confirmed_note ? `: ${q.confirmed_note}` : ''}` : ''),
    e.canary_task_id ? h('p', {}, 'Canary task ', taskLink(e.canary_task_id)) : null,
    panes,
    e.problems ? h('p', {}, `Problems: ${e.problems.join(', ')}`) : null);
}

async function disagreement(run) {
  const e = run.evidence ?? {};
  const verdict = run.wrong_solver_id ? `${run.status}: ${run.wrong_solver_id} proven wrong${e.by_verifier ? ' by a verifier' : ' by a third run'}` : run.status;
  const header = h('h3', {}, `${run.task_type}: ${run.measure} ${run.similarity} < ${run.threshold}, ${verdict} (${time(run.judged_at)})`);
  const tasksLine = h('p', {}, 'Client task ', taskLink(e.client_task_id ?? run.task_id), ', run again as ', e.run_task_id ? taskLink(e.run_task_id) : '—');
  let body;
  if (run.task_type === 'screenshot') body = await screenshots(e);
  else if (e.first?.urls || e.second?.urls) body = sideBySide(`First: ${e.first?.solver_id}`, e.first?.urls ?? [], `Second: ${e.second?.solver_id}`, e.second?.urls ?? []);
  else body = sideBySide(`First: ${e.first?.solver_id}`, String(e.first?.excerpt ?? ''), `Second: ${e.second?.solver_id}`, String(e.second?.excerpt ?? ''));
  const third = e.third?.solver_id
    ? h('p', {}, `Third run by ${e.third.solver_id}: similarity ${e.third.similarity_to_first} to the first, ${e.third.similarity_to_second} to the second.`)
    : e.third?.reason ? h('p', {}, `No third verdict: ${e.third.reason}`) : null;
  return h('article', { class: 'evidence' }, header, tasksLine, body, third);
}

/** Passed over judged, as a percentage; a dash when none was judged. */
const rate = (value) => (value === null ? '—' : `${(value * 100).toFixed(1)} %`);

/** A solver's chat audits per model, and where the sequential test on them stands (docs/trust.md, "Chat audits"). */
function chatAudits(trust) {
  const test = trust.chat_audit_test;
  return [
    table([
      ['Model', (r) => r.model], ['Passed/failed', (r) => `${r.passed}/${r.failed}`], ['Pass rate', (r) => rate(r.pass_rate)],
      ['Since the last clearing', (r) => `${r.passed_since_clear}/${r.failed_since_clear}`], ['Pass rate since', (r) => rate(r.pass_rate_since_clear)],
    ], trust.chat_audits, { caption: 'Chat audits per model', empty: 'No chat audit judged.' }),
    test
      ? h('p', { id: 'audit-test' }, `Sequential test: ${test.decision}, ratio ${test.llr} of ${test.threshold} to quarantine, over ${test.judged} audits (${test.failed} failed); expected pass rate ${rate(test.expected_pass_rate)}.`,
          test.near_quarantine ? h('strong', { class: 'status failed' }, ' Near quarantine.') : null)
      : null,
  ];
}

async function solverTrust(main, [solverId], _params, done = null) {
  const trust = await get(`/v1/admin/solvers/${encodeURIComponent(solverId)}/trust`);
  const note = h('input', { name: 'note', maxlength: 2000 });
  const decide = (verb) => async () => {
    try {
      const answer = await call('POST', `/v1/admin/solvers/${encodeURIComponent(solverId)}/quarantine/${verb}`, { note: note.value || null });
      await solverTrust(main, [solverId], _params, verb === 'clear'
        ? `Quarantine cleared; ${points(answer.released_points)} released.`
        : `Quarantine confirmed: ${answer.refunded_tasks} task(s) refunded, ${points(answer.refunded_points)} given back to their clients (${points(answer.forfeited_points)} forfeited by the solver).`);
    } catch (error) {
      toast(errorText(error), 'error');
    }
  };
  const actions = trust.quarantined
    ? h('form', { id: 'decide', onsubmit: (event) => event.preventDefault() },
        field('Note (kept with the quarantine)', note),
        h('span', { class: 'actions' },
          h('button', { type: 'button', onclick: decide('clear') }, 'Clear the quarantine and release held earnings'),
          h('button', { type: 'button', class: 'danger', onclick: decide('confirm') }, 'Confirm the quarantine and refund the clients of its held earnings')),
        h('p', {}, 'Clearing releases the held pay to the solver; confirming keeps the solver out and gives each held task\'s price back to its client.'))
    : null;
  // A verifier re-runs sampled client tasks of other solvers; its disagreement proves a result wrong.
  const markVerifier = async () => {
    try {
      const answer = await call('POST', `/v1/admin/solvers/${encodeURIComponent(solverId)}/verifier`, { verifier: !trust.verifier });
      await solverTrust(main, [solverId], _params, answer.verifier ? 'Marked verifier: it re-runs sampled client tasks of other solvers.' : 'No longer a verifier.');
    } catch (error) {
      toast(errorText(error), 'error');
    }
  };
  const runs = await Promise.all(trust.disagreements.map(disagreement));
  fill(main,
    section(`Solver ${solverId}`,
      h('p', {}, trust.quarantined ? h('strong', { class: 'status failed' }, 'Quarantined') : 'Not quarantined', `; held: ${points(trust.held_points)} over ${trust.held_tasks} tasks.`),
      h('p', { id: 'verifier' }, trust.verifier ? 'Verifier. ' : 'Not a verifier. ',
        h('button', { type: 'button', onclick: markVerifier }, trust.verifier ? 'Unmark verifier' : 'Mark verifier')),
      done ? h('p', { id: 'decided', role: 'status' }, done) : null,
      actions,
      table([
        ['Task type', (r) => r.task_type], ['Score', (r) => String(r.score)], ['Successes', (r) => String(r.successes)], ['Failures', (r) => String(r.failures)],
        ['Canaries passed/failed', (r) => `${r.canary_passes}/${r.canary_failures}`], ['Disagreements/runs', (r) => `${r.disagreements}/${r.redundant_runs}`],
        ['Verified passed/wrong', (r) => `${r.verified_passes}/${r.verified_failures}`],
        ['Client work', (r) => (r.client_work ? 'yes' : 'no') + (r.on_probation ? ' (probation)' : '')],
      ], trust.reputation, { caption: 'Reputation per task type', empty: 'No reputation yet.' })),
    section('Chat audits', chatAudits(trust)),
    section('Quarantines', trust.quarantines.length ? trust.quarantines.map(quarantineEvidence) : h('p', { class: 'empty' }, 'None.')),
    section('Disagreements and results proven wrong', runs.length ? runs : h('p', { class: 'empty' }, 'None.')));
}

async function tools(main) {
  const account = h('input', { name: 'account_id', required: true });
  const amount = h('input', { name: 'amount_points', required: true, inputmode: 'decimal', pattern: '\\d+(\\.\\d+)?' });
  const depositOut = h('div', { role: 'status' });
  const policyOut = h('div', { role: 'status' });
  const status = await get('/v1/admin/status');
  fill(main,
    section('Deposit points', h('form', { id: 'deposit', onsubmit: async (event) => {
      event.preventDefault();
      try {
        // One key per submission: a retried request deposits once.
        const done = await call('POST', '/v1/admin/deposit', { account_id: account.value.trim(), amount_points: amount.value.trim() }, { 'Idempotency-Key': crypto.randomUUID() });
        fill(depositOut, h('p', {}, `Deposited ${done.deposited_points} into ${done.account_id}: available ${done.available_points}.`));
      } catch (error) {
        fill(depositOut, h('p', { class: 'error' }, errorText(error)));
      }
    } }, field('Account', account), field('Points', amount), h('button', { type: 'submit' }, 'Deposit'), depositOut)),
    section('Domain policy', h('button', { type: 'button', onclick: async () => {
      try {
        const policy = await call('POST', '/v1/admin/domain-policy/reload');
        fill(policyOut, h('p', {}, `Reloaded from ${policy.file} on every node: default ${policy.default}, ${policy.allow.length} allow and ${policy.deny.length} deny rules.`));
      } catch (error) {
        fill(policyOut, h('p', { class: 'error' }, errorText(error)));
      }
    } }, 'Reload the domain policy'), policyOut),
    section('Service', h('dl', { class: 'facts' },
      h('dt', {}, 'Status'), h('dd', {}, status.status), h('dt', {}, 'Node'), h('dd', {}, status.node_id),
      h('dt', {}, 'Database'), h('dd', {}, status.database), h('dt', {}, 'Temporal'), h('dd', {}, `${status.temporal} (namespace ${status.temporal_namespace})`),
      h('dt', {}, 'Accounts'), h('dd', {}, String(status.counts?.accounts ?? '—')), h('dt', {}, 'Open holds'), h('dd', {}, String(status.counts?.open_holds ?? '—')),
      h('dt', {}, 'Platform account'), h('dd', {}, status.platform
        ? `${status.platform.account_id}: ${points(status.platform.available_points)} available for checks (one holds ${points(status.platform.check_price_points)}; ${points(status.platform.recommended_points)} hold a new solver's checks at once)`
        : '—')),
      platformAlert(status.platform)));
}

export const operatorViews = {
  queues: { title: 'Queues', render: queues },
  tasks: { title: 'Tasks', render: tasks },
  quarantines: { title: 'Trust', render: quarantines },
  tools: { title: 'Money & policy', render: tools },
  task: { render: task },
  solver: { render: solverTrust },
};
