// The console's shell: sign-in, navigation by role, and a hash router (#/view/arg?query).

import { call, session, signIn, signOut } from './api.js';
import { errorText, field, fill, h } from './ui.js';
import { operatorViews } from './operator.js';
import { clientViews } from './client.js';
import { solverViews } from './solver.js';

const ROLES = {
  operator: { label: 'Operator (admin key)', views: operatorViews, home: 'queues', check: '/v1/admin/status' },
  client: { label: 'Client (API key)', views: clientViews, home: 'my-tasks', check: '/v1/profile' },
  solver: { label: 'Solver (API key)', views: solverViews, home: 'earnings', check: '/v1/solver/stats' },
};

const main = document.getElementById('main');
let cleanup = () => {};

function signInPage(message) {
  const role = h('select', { name: 'role' }, Object.entries(ROLES).map(([value, { label }]) => h('option', { value }, label)));
  const key = h('input', { type: 'password', name: 'key', autocomplete: 'off', required: true, spellcheck: 'false' });
  const problem = h('p', { class: 'error', role: 'alert' }, message ?? '');
  const form = h('form', { class: 'card narrow', onsubmit: async (event) => {
    event.preventDefault();
    signIn(role.value, key.value.trim());
    try {
      await call('GET', ROLES[role.value].check);
      show(`#/${ROLES[role.value].home}`);
    } catch (error) {
      signOut();
      fill(problem, `That key was refused: ${errorText(error)}`);
    }
  } },
    h('h2', {}, 'Sign in'),
    h('p', {}, 'The key stays in this tab only (session storage) and is sent as the API expects it; closing the tab forgets it.'),
    field('Role', role),
    field('Key', key),
    h('button', { type: 'submit' }, 'Sign in'),
    problem);
  fill(main, form);
  role.focus();
}

function navigation(current) {
  const nav = document.getElementById('nav');
  const who = document.getElementById('who');
  if (!current) {
    fill(nav);
    fill(who);
    return;
  }
  const role = ROLES[current.role];
  fill(nav, h('ul', {}, Object.entries(role.views).filter(([, view]) => view.title).map(([name, view]) => h('li', {}, h('a', { href: `#/${name}` }, view.title)))));
  fill(who, h('span', {}, role.label.split(' ')[0]), ' ', h('button', { type: 'button', class: 'link', onclick: () => {
    signOut();
    show('#/');
  } }, 'Sign out'));
}

/** Goes to `hash` with one render: a changed hash renders through its hashchange event. */
function show(hash) {
  if (location.hash === hash) render();
  else location.hash = hash;
}

export function render() {
  cleanup();
  cleanup = () => {};
  const current = session();
  navigation(current);
  if (!current || !ROLES[current.role]) return signInPage();
  const [path, search] = location.hash.replace(/^#\/?/, '').split('?');
  const [name, ...args] = path.split('/').map(decodeURIComponent);
  const views = ROLES[current.role].views;
  const view = views[name] ?? views[ROLES[current.role].home];
  for (const a of document.querySelectorAll('#nav a')) a.toggleAttribute('aria-current', a.getAttribute('href') === `#/${name}`);
  // Each render draws into its own box: a slower view left behind draws into a detached one, never over the next.
  const box = h('div', { class: 'view' }, h('p', {}, 'Loading…'));
  fill(main, box);
  // What has the focus now, once the old view and links are gone: moving it to the view when the view is
  // drawn helps only a reader who has not moved it since; one who has tabbed on keeps where they went.
  const focused = document.activeElement;
  const params = new URLSearchParams(search ?? '');
  Promise.resolve(view.render(box, args, params))
    .then((stop) => {
      if (!box.isConnected) return typeof stop === 'function' ? stop() : undefined;
      if (typeof stop === 'function') cleanup = stop;
      if (document.activeElement === focused || document.activeElement === document.body) main.focus({ preventScroll: true });
    })
    .catch((error) => {
      if (!box.isConnected) return;
      if (error?.status === 401) {
        signOut();
        return signInPage('The key is no longer accepted; sign in again.');
      }
      fill(box, h('p', { class: 'error', role: 'alert' }, errorText(error)));
    });
}

window.addEventListener('hashchange', render);
render();
