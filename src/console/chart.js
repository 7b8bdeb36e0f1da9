// The last hour of each queue, as an inline SVG line per task type.

const SVG = 'http://www.w3.org/2000/svg';
const HOUR_MS = 60 * 60 * 1000;
const COLOURS = ['#1f6feb', '#d1242f', '#1a7f37', '#9a6700', '#8250df', '#bf3989'];

const svg = (tag, attrs, text) => {
  const el = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, String(value));
  if (text !== undefined) el.textContent = text;
  return el;
};

/** samples: [{at, queues: {type: {queued, ...}}}]; draws `queued` per type over the hour up to now. */
export function queueChart(samples, { width = 900, height = 200 } = {}) {
  const now = Date.now();
  const from = now - HOUR_MS;
  const types = [...new Set(samples.flatMap((sample) => Object.keys(sample.queues)))].sort();
  const max = Math.max(1, ...samples.flatMap((sample) => Object.values(sample.queues).map((queue) => queue.queued)));
  const pad = { left: 34, right: 8, top: 8, bottom: 20 };
  const x = (at) => pad.left + ((Date.parse(at) - from) / HOUR_MS) * (width - pad.left - pad.right);
  const y = (value) => height - pad.bottom - (value / max) * (height - pad.top - pad.bottom);
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, class: 'chart', role: 'img', 'aria-labelledby': 'chart-title' });
  root.append(svg('title', { id: 'chart-title' }, `Tasks waiting per task type over the last hour (most: ${max})`));
  root.append(svg('line', { x1: pad.left, x2: width - pad.right, y1: y(0), y2: y(0), class: 'axis' }));
  root.append(svg('line', { x1: pad.left, x2: pad.left, y1: pad.top, y2: y(0), class: 'axis' }));
  root.append(svg('text', { x: pad.left - 4, y: pad.top + 8, 'text-anchor': 'end', class: 'tick' }, String(max)));
  root.append(svg('text', { x: pad.left - 4, y: y(0), 'text-anchor': 'end', class: 'tick' }, '0'));
  root.append(svg('text', { x: pad.left, y: height - 4, class: 'tick' }, '−60 min'));
  root.append(svg('text', { x: width - pad.right, y: height - 4, 'text-anchor': 'end', class: 'tick' }, 'now'));
  types.forEach((type, index) => {
    const shown = samples.filter((sample) => Date.parse(sample.at) >= from);
    const points = shown.map((sample) => [x(sample.at), y(sample.queues[type]?.queued ?? 0)]);
    const colour = COLOURS[index % COLOURS.length];
    root.append(svg('polyline', { points: points.map(([px, py]) => `${px.toFixed(1)},${py.toFixed(1)}`).join(' '), fill: 'none', stroke: colour, 'stroke-width': 2, 'data-type': type }));
    // The latest value as a dot: a line of one sample has no length to show.
    const last = points[points.length - 1];
    if (last) root.append(svg('circle', { cx: last[0].toFixed(1), cy: last[1].toFixed(1), r: 3.5, fill: colour }));
  });
  const legend = document.createElement('ul');
  legend.className = 'legend';
  types.forEach((type, index) => {
    const item = document.createElement('li');
    const swatch = document.createElement('span');
    swatch.className = `swatch c${index % COLOURS.length}`;
    item.append(swatch, type);
    legend.append(item);
  });
  const figure = document.createElement('figure');
  figure.className = 'chart-box';
  figure.append(root, legend);
  return figure;
}
