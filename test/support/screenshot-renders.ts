import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { CHROMIUM_ARGS } from '../../src/solver/browser/browser-pool';
import { canaryPage, seededRandom } from '../../src/trust/canary-pages';
import { encodeGrayPng } from '../../src/trust/png';

/**
 * Renders of a small local site as honest solvers and cheats would answer its screenshots, for the
 * calibration of the screenshot measure (docs/trust.md, "Verified client tasks"). The verifier renders
 * as the bundled solver does (Debian's Chromium, 1280 × 800, device scale 1, animations and caret
 * off); an honest solver differs from it by its fonts, font rendering flags, device scale, viewport
 * width, a caret or animation frame, and a lossy encoder; a cheat answers with something else.
 */

export const CHROMIUM = '/usr/bin/chromium';
const VIEWPORT = { width: 1280, height: 800 };

export interface SitePage {
  name: string;
  html: string;
  /** Another page of the same site (same host, same template where one is drawn). */
  sibling: string;
  fullPage?: boolean;
}

// Canary pages of three sites (article, product, docs, listing templates), a page with images, the
// verification test's plain page, and one animated page with a focused field.
function sitePages(): SitePage[] {
  const drawn = (host: string, template: string, skip = 0) => {
    const found = [];
    for (let i = 0; found.length < 2 + skip; i++) {
      const page = canaryPage(`calibration-${host}-${i}`, 'proxy_fetch', host);
      if (page.template === template) found.push(page.html);
    }
    return found.slice(skip);
  };
  const pages: SitePage[] = [];
  for (const [host, template] of [
    ['quiet-harbor.example', 'article'],
    ['golden-kettle-12.example', 'product'],
    ['slow-meadow.example', 'docs'],
    ['notes.example', 'listing'],
    ['notes.example', 'article'],
  ] as const) {
    const [html, sibling] = drawn(host, template);
    pages.push({ name: `${host} ${template}`, html: html!, sibling: sibling! });
  }
  const [long, longSibling] = drawn('quiet-harbor.example', 'article', 2);
  pages.push({ name: 'quiet-harbor.example article, full page', html: long!, sibling: longSibling!, fullPage: true });
  const gallery = (seed: string) => {
    const rng = seededRandom(seed);
    const tiles = Array.from({ length: 6 }, (_, i) => `<figure><img src="/img/${seed}-${i}.png" width="360" height="220" alt=""><figcaption>Photo ${i + 1}: the ${['harbor', 'market', 'orchard', 'studio', 'trail', 'bakery'][Math.floor(rng() * 6)]} in ${['May', 'June', 'July'][i % 3]}</figcaption></figure>`).join('');
    return `<!doctype html><html><head><title>Gallery</title><style>body{font-family:system-ui,sans-serif;margin:0}header{background:#234;color:#fff;padding:16px 24px;font-size:22px}main{display:grid;grid-template-columns:repeat(3,1fr);gap:16px;padding:24px}figure{margin:0}img{width:100%;height:auto;display:block}</style></head>
<body><header>Harbor photo journal</header><main>${tiles}</main></body></html>`;
  };
  pages.push({ name: 'photo gallery (images)', html: gallery('gallery-a'), sibling: gallery('gallery-b') });
  const plain = (path: string) => `<!doctype html><html><head><title>${path}</title></head><body><main><h1>Notes on ${path}</h1>
<p>This page at ${path} describes the harbour, the lighthouse keeper and the ferry timetable of a small island town.</p>
<p>Visitors to ${path} read about tides, the fish market on Thursdays and the walk along the northern cliffs.</p></main></body></html>`;
  pages.push({ name: 'plain page (the verification test\'s site)', html: plain('/shots/first'), sibling: plain('/shots/second') });
  const animated = (seed: string) =>
    canaryPage(seed, 'proxy_fetch', 'slow-meadow.example').html.replace(
      '</header>',
      '</header><form style="padding:8px 24px"><input autofocus name="q" placeholder="Search" style="font-size:16px;width:300px"><span class="spin" style="display:inline-block;width:18px;height:18px;margin-left:12px;background:#c33;animation:pulse 1s infinite alternate"></span></form><style>@keyframes pulse{from{opacity:1;transform:rotate(0)}to{opacity:.2;transform:rotate(90deg)}}</style>',
    );
  pages.push({ name: 'slow-meadow.example with a caret and an animation', html: animated('calibration-animated-0'), sibling: animated('calibration-animated-1') });
  return pages;
}

// Each tile is drawn once: drawing one takes about 0.1 s in Jest's vm context, on the event loop that
// also serves the pages, and every variation's browser asks for every tile again.
const tiles = new Map<string, Buffer>();
function tile(name: string): Buffer {
  const known = tiles.get(name);
  if (known) return known;
  const drawn = drawTile(name);
  tiles.set(name, drawn);
  return drawn;
}

/** A photo-like tile: gradients and noise, different per name. */
function drawTile(name: string): Buffer {
  const rng = seededRandom(name);
  const [a, b, c] = [rng() * 200, rng() * 0.05, rng() * 0.05];
  return encodeGrayPng(360, 220, (x, y) => Math.max(0, Math.min(255, Math.round(a * 0.5 + 60 + 60 * Math.sin(x * b + y * c) + (rng() - 0.5) * 30))));
}

export interface Variation {
  name: string;
  args?: string[];
  deviceScaleFactor?: number;
  width?: number;
  /** CSS injected into every page. */
  css?: string;
  /** The caret shown and animations running, captured a moment in. */
  live?: boolean;
  /** Encoded as JPEG at this quality, then captured again as PNG: a lossy encoder's pixels. */
  jpegQuality?: number;
}

const HINTING = ['--disable-font-subpixel-positioning', '--font-render-hinting=none'];
export const HONEST_VARIATIONS: Variation[] = [
  { name: 'the verifier again' },
  { name: 'all text serif', css: '*{font-family:serif!important}' },
  { name: 'all text sans-serif', css: '*{font-family:sans-serif!important}' },
  { name: 'all text Liberation Sans', css: '*{font-family:"Liberation Sans",sans-serif!important}' },
  { name: 'no subpixel positioning, no hinting', args: HINTING },
  { name: 'device scale 2', deviceScaleFactor: 2 },
  { name: 'viewport 16 px narrower', width: VIEWPORT.width - 16 },
  { name: 'viewport 16 px wider', width: VIEWPORT.width + 16 },
  { name: 'caret and animation frame', live: true },
  { name: 'JPEG at quality 40', jpegQuality: 40 },
  { name: 'serif, device scale 2, 16 px wider, no hinting, JPEG 60', css: '*{font-family:serif!important}', deviceScaleFactor: 2, width: VIEWPORT.width + 16, args: HINTING, jpegQuality: 60 },
  { name: 'sans-serif, 16 px narrower, caret and animation', css: '*{font-family:sans-serif!important}', width: VIEWPORT.width - 16, live: true },
];

export interface Renders {
  pages: SitePage[];
  /** [page][variation]: honest renders; `verifier` is the first variation. */
  honest: Buffer[][];
  /** [page]: what each cheat answers for that page. */
  cheats: Record<string, Buffer[]>;
}

/** The page-like drawing of test/support/cheats.ts (`pageLikeScreenshot`). */
export function pageLikeDrawing(width = VIEWPORT.width, height = VIEWPORT.height): Buffer {
  const dark = (x: number, y: number) => {
    const line = Math.floor((y - 20) / 30);
    const inLine = (y - 20) % 30 < (line === 0 ? 26 : 14);
    return x >= 8 && y >= 20 && line < 5 && inLine && x < (line === 0 ? 700 : 1200 - line * 90);
  };
  return encodeGrayPng(width, height, (x, y) => (dark(x, y) ? 30 : 255));
}

/** Replaces every word of the page's text by another word of the same length (the page's own words where one fits). */
export function sameLengthText(html: string, seed: string): string {
  const rng = seededRandom(seed);
  const vocabulary = new Map<number, string[]>();
  const body = html.replace(/^[\s\S]*?<body>/i, '');
  for (const word of body.replace(/<[^>]*>/g, ' ').match(/[A-Za-z]+/g) ?? []) {
    const list = vocabulary.get(word.length) ?? [];
    if (!list.includes(word.toLowerCase())) list.push(word.toLowerCase());
    vocabulary.set(word.length, list);
  }
  const replace = (text: string) =>
    text.replace(/[A-Za-z]+/g, (word) => {
      const list = (vocabulary.get(word.length) ?? []).filter((other) => other !== word.toLowerCase());
      let other = list.length > 0 ? list[Math.floor(rng() * list.length)]! : Array.from(word, () => String.fromCharCode(97 + Math.floor(rng() * 26))).join('');
      if (word[0] === word[0]!.toUpperCase()) other = other.charAt(0).toUpperCase() + other.slice(1);
      return other;
    });
  const [head, rest] = [html.slice(0, html.length - body.length), body];
  // Text between tags only; tags, styles and attributes kept.
  return head + rest.replace(/(<style[\s\S]*?<\/style>)|(<[^>]*>)|([^<]+)/gi, (all, style, tag, text) => (text ? replace(text) : all));
}

/** A local site serving each page at its own path, and the gallery's images. */
async function serve(pages: Record<string, string>): Promise<{ url: string; close: () => Promise<void> }> {
  const server = http.createServer((req, res) => {
    const path = req.url ?? '/';
    if (path.startsWith('/img/')) return void res.writeHead(200, { 'content-type': 'image/png' }).end(tile(path));
    const html = pages[path];
    if (html === undefined) return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(html);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

/** A variation's browser context, with the page that renders and the page that redraws a JPEG. */
interface Renderer {
  context: BrowserContext;
  page: Page;
  viewer?: Page;
}

/**
 * The variation's page, made once and reused for every render of it: a new page costs a renderer process
 * (most of a render's time), and a navigation starts from a fresh document whichever page runs it.
 */
function rendererOf(browsers: Map<string, Promise<Browser>>, renderers: Map<Variation, Promise<Renderer>>, variation: Variation): Promise<Renderer> {
  const known = renderers.get(variation);
  if (known) return known;
  const key = (variation.args ?? []).join(' ');
  if (!browsers.has(key)) browsers.set(key, chromium.launch({ executablePath: CHROMIUM, headless: true, args: [...CHROMIUM_ARGS, ...(variation.args ?? [])] }));
  const renderer = (async () => {
    const browser = await browsers.get(key)!;
    const context = await browser.newContext({ viewport: { width: variation.width ?? VIEWPORT.width, height: VIEWPORT.height }, deviceScaleFactor: variation.deviceScaleFactor ?? 1 });
    return { context, page: await context.newPage() };
  })();
  renderers.set(variation, renderer);
  return renderer;
}

/** Renders `path` of the site under one variation, as a PNG. */
async function render(browsers: Map<string, Promise<Browser>>, renderers: Map<Variation, Promise<Renderer>>, url: string, variation: Variation, fullPage: boolean): Promise<Buffer> {
  const renderer = await rendererOf(browsers, renderers, variation);
  const { page } = renderer;
  await page.goto(url, { waitUntil: 'load' });
  if (variation.css) await page.addStyleTag({ content: variation.css });
  if (variation.live) await page.waitForTimeout(350);
  const shot = await page.screenshot({ type: variation.jpegQuality ? 'jpeg' : 'png', quality: variation.jpegQuality, fullPage, animations: variation.live ? 'allow' : 'disabled', caret: variation.live ? 'initial' : 'hide' });
  if (!variation.jpegQuality) return shot;
  // The JPEG's pixels, as a PNG: drawn 1:1 in a page of its size and captured.
  const image = (await page.evaluate(`(async () => {
    const img = new Image();
    img.src = 'data:image/jpeg;base64,${shot.toString('base64')}';
    await img.decode();
    return { width: img.naturalWidth, height: img.naturalHeight };
  })()`)) as { width: number; height: number };
  renderer.viewer ??= await renderer.context.newPage();
  const viewer = renderer.viewer;
  await viewer.setViewportSize({ width: Math.round(image.width / (variation.deviceScaleFactor ?? 1)), height: Math.round(image.height / (variation.deviceScaleFactor ?? 1)) });
  await viewer.setContent(`<style>html,body{margin:0}img{display:block;width:100%}</style><img src="data:image/jpeg;base64,${shot.toString('base64')}">`);
  await viewer.waitForFunction('document.images[0].complete');
  return await viewer.screenshot({ type: 'png', fullPage: true });
}

const RENDERS_AT_ONCE = 3;

/** `work` for each item, `size` at a time, the results in the items' order. */
async function inBatches<T, R>(items: T[], size: number, work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  for (let i = 0; i < items.length; i += size) results.push(...(await Promise.all(items.slice(i, i + size).map(work))));
  return results;
}

/** Every page under every honest variation, and each cheat's answer for each page. */
export async function renderAll(variations = HONEST_VARIATIONS): Promise<Renders> {
  const pages = sitePages();
  const routes: Record<string, string> = {};
  pages.forEach((page, i) => {
    routes[`/page/${i}`] = page.html;
    routes[`/sibling/${i}`] = page.sibling;
    routes[`/same-length/${i}`] = sameLengthText(page.html, `same-length-${i}`);
  });
  // An unrelated page: a dark, image-heavy landing page of another site.
  routes['/unrelated'] = `<!doctype html><html><body style="margin:0;background:#111;color:#eee;font:20px sans-serif"><div style="height:420px;background:linear-gradient(135deg,#345,#a63)"></div><h1 style="padding:0 40px">Welcome to the night market</h1><p style="padding:0 40px">Open every Friday.</p></body></html>`;
  const site = await serve(routes);
  const browsers = new Map<string, Promise<Browser>>();
  const renderers = new Map<Variation, Promise<Renderer>>();
  try {
    const honest: Buffer[][] = [];
    const cheats: Record<string, Buffer[]> = { 'simple page drawing': [], 'another page of the site': [], 'its text replaced by other text of the same length': [], blank: [], 'unrelated page': [] };
    const verifier = variations[0]!;
    const unrelated = await render(browsers, renderers, `${site.url}/unrelated`, verifier, false);
    for (const [i, page] of pages.entries()) {
      const fullPage = page.fullPage === true;
      // Each variation renders on its own page, so a few at once keep both cores busy.
      const renders = await inBatches(variations, RENDERS_AT_ONCE, (variation) => render(browsers, renderers, `${site.url}/page/${i}`, variation, fullPage));
      honest.push(renders);
      const { width, height } = { width: renders[0]!.readUInt32BE(16), height: renders[0]!.readUInt32BE(20) };
      cheats['simple page drawing']!.push(pageLikeDrawing(width, Math.min(height, VIEWPORT.height)));
      cheats['another page of the site']!.push(await render(browsers, renderers, `${site.url}/sibling/${i}`, verifier, fullPage));
      cheats['its text replaced by other text of the same length']!.push(await render(browsers, renderers, `${site.url}/same-length/${i}`, verifier, fullPage));
      cheats.blank!.push(encodeGrayPng(width, height, () => 255));
      cheats['unrelated page']!.push(unrelated);
    }
    return { pages, honest, cheats };
  } finally {
    for (const renderer of renderers.values()) await renderer.then((made) => made.context.close(), () => undefined);
    for (const browser of browsers.values()) await browser.then((made) => made.close(), () => undefined);
    await site.close();
  }
}
