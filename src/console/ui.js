// DOM helpers: every value from the API is set as text, never parsed as markup.

/** Builds an element: h('a', { href: '#/x', class: 'btn' }, 'text', child, ...). */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on') && typeof value === 'function') el.addEventListener(name.slice(2), value);
    else if (name === 'dataset') Object.assign(el.dataset, value);
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

/** Replaces an element's content. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A table from rows: columns are [heading, row => cell]. */
export function table(columns, rows, { caption, empty = 'None.' } = {}) {
  if (!rows.length) return h('p', { class: 'empty' }, empty);
  return h('div', { class: 'scroll' },
    h('table', {},
      caption ? h('caption', {}, caption) : null,
      h('thead', {}, h('tr', {}, columns.map(([name]) => h('th', { scope: 'col' }, name)))),
      h('tbody', {}, rows.map((row) => h('tr', {}, columns.map(([name, cell]) => h('td', { 'data-label': name }, cell(row))))))));
}

export const time = (iso) => (iso ? new Date(iso).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '—');
export const seconds = (value) => (value === null || value === undefined ? '—' : `${Number(value).toFixed(1)} s`);
export const points = (value) => (value === null || value === undefined ? '—' : `${value} pts`);

/** A labelled form field. */
export function field(label, input, hint) {
  const id = input.id || `f-${Math.random().toString(36).slice(2, 9)}`;
  input.id = id;
  return h('div', { class: 'field' }, h('label', { for: id }, label), input, hint ? h('small', {}, hint) : null);
}

export function toast(message, kind = 'ok') {
  const el = document.getElementById('toast');
  fill(el, h('p', { class: `toast ${kind}` }, message));
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => fill(el), 6000);
}

/** The message of an API error body, or of a thrown error. */
export function errorText(error) {
  const body = error?.body;
  if (body?.error) return `${body.error.type}: ${body.error.message}`;
  if (body?.detail) return body.detail.map((d) => `${(d.loc ?? []).join('.')}: ${d.msg}`).join('; ');
  return String(error?.message ?? error);
}

export function section(title, ...children) {
  return h('section', { class: 'card' }, h('h2', {}, title), ...children);
}

export function link(href, text) {
  return h('a', { href }, text);
}
