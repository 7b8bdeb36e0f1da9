// Two texts side by side, with the words one has and the other lacks marked (a longest-common-subsequence diff).

import { h } from './ui.js';

/** Most words compared: evidence excerpts are 500 characters, so this is room enough. */
const MAX_WORDS = 400;

export function wordDiff(left, right) {
  const a = String(left ?? '').split(/(\s+)/).slice(0, MAX_WORDS * 2);
  const b = String(right ?? '').split(/(\s+)/).slice(0, MAX_WORDS * 2);
  const n = a.length;
  const m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Uint16Array(m + 1));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const leftOut = [];
  const rightOut = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) {
      leftOut.push(a[i++]);
      rightOut.push(b[j++]);
    } else if (j < m && (i === n || lcs[i][j + 1] >= lcs[i + 1][j])) {
      rightOut.push(/^\s+$/.test(b[j]) ? b[j] : h('mark', { class: 'added' }, b[j]));
      j++;
    } else {
      leftOut.push(/^\s+$/.test(a[i]) ? a[i] : h('mark', { class: 'removed' }, a[i]));
      i++;
    }
  }
  return [leftOut, rightOut];
}

/** Two panes side by side; text is diffed, lists of URLs are compared as sets. */
export function sideBySide(leftTitle, left, rightTitle, right) {
  let [l, r] = [left, right];
  if (Array.isArray(left) || Array.isArray(right)) {
    const a = new Set(left ?? []);
    const b = new Set(right ?? []);
    l = h('ul', {}, (left ?? []).map((url) => h('li', {}, b.has(url) ? url : h('mark', { class: 'removed' }, url))));
    r = h('ul', {}, (right ?? []).map((url) => h('li', {}, a.has(url) ? url : h('mark', { class: 'added' }, url))));
  } else if (typeof left === 'string' || typeof right === 'string') {
    const [x, y] = wordDiff(left, right);
    l = h('pre', {}, x);
    r = h('pre', {}, y);
  }
  return h('div', { class: 'pair' },
    h('div', { class: 'pane' }, h('h4', {}, leftTitle), l),
    h('div', { class: 'pane' }, h('h4', {}, rightTitle), r));
}
