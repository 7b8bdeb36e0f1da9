import type { WebTaskType } from '../schemas/domain';
import { htmlToMarkdown } from '../solver/html/markdown';
import { readPng, type GrayImage } from './png';

/**
 * How alike two solvers' results for one task are, per task type (docs/trust.md, "Redundant runs"):
 * a number from 0 (nothing in common) to 1 (the same), and the threshold below which they disagree.
 * The thresholds are low on purpose: pages change between two fetches and search backends differ, and
 * what is looked for is a result made up, emptied or substituted, not drift.
 */

export const SIMILARITY_MEASURES = Object.freeze({
  /** Jaccard of the sets of 3-word shingles of the normalised text. */
  proxy_fetch: { measure: 'text_shingles', threshold: 0.3 },
  /**
   * The mean of the text's shingle Jaccard and the structure's (line kinds and depths, as multisets); 0 across
   * formats.
   */
  page_snapshot: { measure: 'snapshot_text_and_structure', threshold: 0.4 },
  /**
   * Shared normalised result URLs among the first `count` of each list (what a client is shown), over the longer
   * list's count.
   */
  web_search: { measure: 'result_url_overlap', threshold: 0.2 },
  /**
   * The lower of two scales: 1 − Hamming distance / 64 of the 8 × 8 average hashes, and the weighted
   * Jaccard (Σ min / Σ max) of the ink of a grid of square cells, 20 across. The threshold lies midway
   * between honest renders and a drawn page, as calibrated (docs/trust.md, "Verified client tasks").
   */
  screenshot: { measure: 'average_hash_and_ink_grid', threshold: 0.63 },
} as const satisfies Record<WebTaskType, { measure: string; threshold: number }>);

export interface Comparison {
  measure: string;
  threshold: number;
  /** Null: the results could not be compared (`incomparable` says why). */
  similarity: number | null;
  /**
   * Why the check cannot answer: its own result is empty while the checked one is not (a verifier's
   * backend that finds nothing, a page it got blank), or its image does not decode, or the checked image
   * is above the decoder's size limit. A checked image that no decoder reads is no reason: it is wrong.
   */
  incomparable?: 'check_empty' | 'check_unreadable' | 'too_large';
  /** What each side looked like, for an admin to read. */
  first: Record<string, unknown>;
  second: Record<string, unknown>;
}

// What an admin sees of each text: enough to tell a made-up page from the real one.
export const EXCERPT_CHARS = 500;
const SHINGLE_WORDS = 3;

/** A web_search payload's `count` when it names none (SearchBody's default). */
export const DEFAULT_SEARCH_COUNT = 5;

/** The number of results a client is shown of a web_search task with this payload: its `count`. */
export const searchCount = (payload: Record<string, unknown> | undefined) =>
  typeof payload?.count === 'number' && Number.isInteger(payload.count) && payload.count > 0
    ? payload.count
    : DEFAULT_SEARCH_COUNT;

/**
 * Compares two results of a web task type: `first` the result checked (a client's, a canary's), `second`
 * the check's (a verifier's or another solver's run of the same task, an oracle's). Not symmetric: a
 * check that found nothing (`second` empty) while the checked result holds something proves nothing
 * (incomparable), while a checked result that is empty where the check found something disagrees.
 * `payload` is the task's: a search is compared on what its client is shown, the first `count` results
 * of each side in their order, so results listed after them (which the client never sees) do not count.
 */
export function compareResults(
  taskType: WebTaskType,
  first: Record<string, unknown>,
  second: Record<string, unknown>,
  payload?: Record<string, unknown>,
): Comparison {
  const { measure, threshold } = SIMILARITY_MEASURES[taskType];
  if (taskType === 'web_search')
    [first, second] = [shownOf(first, searchCount(payload)), shownOf(second, searchCount(payload))];
  const compared = COMPARE[taskType](first, second);
  if (compared.similarity !== null && isEmptyResult(taskType, second) && !isEmptyResult(taskType, first)) {
    return { measure, threshold, ...compared, similarity: null, incomparable: 'check_empty' };
  }
  return {
    measure,
    threshold,
    ...compared,
    similarity: compared.similarity === null ? null : round(compared.similarity),
  };
}

/**
 * Whether a result holds nothing to compare: no words of text, no result URL. A screenshot is never empty (a
 * blank page is an image).
 */
export function isEmptyResult(taskType: WebTaskType, result: Record<string, unknown>): boolean {
  if (taskType === 'proxy_fetch') return words(text(result.content)).length === 0;
  if (taskType === 'page_snapshot') return words(snapshotView(result)).length === 0;
  if (taskType === 'web_search') return resultUrls(result.results).size === 0;
  return false;
}

/** A search result cut to the first `count` entries of its list, in order: what its client is shown. */
const shownOf = (result: Record<string, unknown>, count: number) =>
  Array.isArray(result.results) ? { ...result, results: result.results.slice(0, count) } : result;

type Compared = Omit<Comparison, 'measure' | 'threshold'>;

const COMPARE: Record<WebTaskType, (a: Record<string, unknown>, b: Record<string, unknown>) => Compared> = {
  proxy_fetch: (a, b) => {
    const [x, y] = [text(a.content), text(b.content)];
    return {
      similarity: textSimilarity(x, y),
      first: { excerpt: x.slice(0, EXCERPT_CHARS) },
      second: { excerpt: y.slice(0, EXCERPT_CHARS) },
    };
  },
  page_snapshot: (a, b) => {
    const [x, y] = [snapshotView(a), snapshotView(b)];
    // Both were asked for the payload's mode: a snapshot in another format is not that page's.
    const sameFormat = a.snapshot_format === b.snapshot_format;
    const structure = multisetJaccard(structureOf(x, structureFormat(a)), structureOf(y, structureFormat(b)));
    const words = textSimilarity(x, y);
    return {
      similarity: sameFormat ? (words + structure) / 2 : 0,
      first: {
        excerpt: x.slice(0, EXCERPT_CHARS),
        format: a.snapshot_format,
        text_similarity: round(words),
        structure_similarity: round(structure),
      },
      second: { excerpt: y.slice(0, EXCERPT_CHARS), format: b.snapshot_format },
    };
  },
  web_search: (a, b) => {
    const [x, y] = [resultUrls(a.results), resultUrls(b.results)];
    const longer = Math.max(x.size, y.size);
    const shared = [...x].filter((url) => y.has(url)).length;
    return {
      similarity: longer === 0 ? 1 : shared / longer,
      first: { urls: [...x].slice(0, 10) },
      second: { urls: [...y].slice(0, 10) },
    };
  },
  screenshot: (a, b) => {
    const [readX, readY] = [readImage(a.image_base64), readImage(b.image_base64)];
    const [x, y] = [imageOf(readX), imageOf(readY)];
    const [hashX, hashY] = [x && averageHashOf(x), y && averageHashOf(y)];
    const describe = (result: Record<string, unknown>, hash: bigint | null, read: ReturnType<typeof readImage>) => ({
      width: result.width,
      height: result.height,
      average_hash: hash === null ? null : hash.toString(16).padStart(16, '0'),
      ...('unreadable' in read ? { unreadable: read.message } : {}),
    });
    const sides = () => ({ first: describe(a, hashX, readX), second: describe(b, hashY, readY) });
    // The check cannot read its own image, or the checked one is above the decoder's limit: no answer.
    if (y === null)
      return {
        similarity: null,
        incomparable: 'unreadable' in readY && readY.unreadable === 'too_large' ? 'too_large' : 'check_unreadable',
        ...sides(),
      };
    if (x === null && 'unreadable' in readX && readX.unreadable === 'too_large')
      return { similarity: null, incomparable: 'too_large', ...sides() };
    // The checked image is one no decoder reads (the decoder reads every PNG the standard allows): it shows
    // nothing of the page.
    if (x === null) return { similarity: 0, ...sides() };
    const hash = 1 - popcount(hashX! ^ hashY!) / 64;
    const ink = inkGridSimilarity(x, y);
    const { first, second } = sides();
    return {
      similarity: Math.min(hash, ink),
      first: { ...first, average_hash_similarity: round(hash), ink_grid_similarity: round(ink) },
      second,
    };
  },
};

const round = (value: number) => Math.round(value * 10_000) / 10_000;
const text = (value: unknown) => (typeof value === 'string' ? value : '');

/**
 * What a snapshot is compared by. A rendered page (html mode) is compared as the markdown of its HTML,
 * followed by what its actions returned (the pages they scraped, as markdown, and their script values),
 * so a made-up action result disagrees like a made-up page; action screenshots are not compared.
 */
function snapshotView(result: Record<string, unknown>): string {
  if (result.snapshot_format !== 'html') return snapshotText(result.snapshot);
  const pageUrl = typeof result.url === 'string' ? result.url : 'http://invalid/';
  const asMarkdown = (html: unknown) =>
    htmlToMarkdown(typeof html === 'string' ? html : '', pageUrl, { mainContentOnly: false, titleHeading: false })
      .markdown;
  const actions = (result.actions ?? {}) as { scrapes?: Array<{ html?: unknown }>; javascript_returns?: unknown[] };
  return [
    asMarkdown(result.snapshot),
    ...(actions.scrapes ?? []).map((scrape) => asMarkdown(scrape.html)),
    ...(actions.javascript_returns ?? []).map((value) => JSON.stringify(value)),
  ].join('\n\n');
}

const structureFormat = (result: Record<string, unknown>) =>
  result.snapshot_format === 'html' ? 'markdown' : String(result.snapshot_format);

/** A snapshot's text: a string as it is, an object (a tree) as its JSON. */
function snapshotText(value: unknown): string {
  if (typeof value === 'string') return value;
  return value && typeof value === 'object' ? JSON.stringify(value, null, 1) : '';
}

/** Lower-case words (letters and digits of any script), markup and punctuation dropped. */
export function words(value: string): string[] {
  return value
    .replace(/<[^>]*>/g, ' ')
    .toLowerCase()
    .split(/[^\p{L}\p{N}]+/u)
    .filter(Boolean);
}

/**
 * Jaccard of the two texts' sets of 3-word shingles (of single words when either has fewer than
 * three): word order counts, so a page rebuilt from the same vocabulary does not pass. Two empty
 * texts are the same.
 */
export function textSimilarity(a: string, b: string): number {
  const [x, y] = [words(a), words(b)];
  if (x.length === 0 && y.length === 0) return 1;
  const size = Math.min(x.length, y.length) < SHINGLE_WORDS ? 1 : SHINGLE_WORDS;
  return jaccard(shingles(x, size), shingles(y, size));
}

function shingles(tokens: string[], size: number): Set<string> {
  const out = new Set<string>();
  for (let i = 0; i + size <= tokens.length; i++) out.add(tokens.slice(i, i + size).join(' '));
  return out;
}

/** Jaccard of two sets: what they share over what either has; two empty sets are the same. */
export function jaccard<T>(x: Set<T>, y: Set<T>): number {
  if (x.size === 0 && y.size === 0) return 1;
  let shared = 0;
  for (const item of x) if (y.has(item)) shared++;
  return shared / (x.size + y.size - shared);
}

/**
 * The structure of a snapshot: per non-empty line, its depth (indentation) and kind: the role of an
 * accessibility tree line (`- heading "…"`), or markdown's block kind (heading level, list item,
 * quote, table row, code fence, image, paragraph).
 */
export function structureOf(snapshot: string, format: string): Map<string, number> {
  const kinds = new Map<string, number>();
  for (const line of snapshot.split('\n')) {
    if (!line.trim()) continue;
    const depth = Math.floor((line.length - line.trimStart().length) / 2);
    const body = line.trim();
    let kind: string;
    if (format !== 'markdown') kind = /^-\s*([\w-]+)/.exec(body)?.[1] ?? 'text';
    else if (/^#{1,6}\s/.test(body)) kind = `h${/^#+/.exec(body)![0].length}`;
    else if (/^[-*+]\s/.test(body)) kind = 'li';
    else if (/^\d+[.)]\s/.test(body)) kind = 'oli';
    else if (body.startsWith('>')) kind = 'quote';
    else if (body.startsWith('|')) kind = 'row';
    else if (body.startsWith('```')) kind = 'code';
    else if (body.startsWith('![')) kind = 'img';
    else kind = 'p';
    const key = `${depth}:${kind}`;
    kinds.set(key, (kinds.get(key) ?? 0) + 1);
  }
  return kinds;
}

/** Σ min / Σ max of the counts: how much of two multisets is shared. */
function multisetJaccard(x: Map<string, number>, y: Map<string, number>): number {
  let shared = 0;
  let total = 0;
  for (const key of new Set([...x.keys(), ...y.keys()])) {
    shared += Math.min(x.get(key) ?? 0, y.get(key) ?? 0);
    total += Math.max(x.get(key) ?? 0, y.get(key) ?? 0);
  }
  return total === 0 ? 1 : shared / total;
}

const TRACKING_PARAM = /^(utm_|fbclid$|gclid$|ref$)/;

/**
 * A result URL as two engines listing the same page would agree on: no scheme, `www.`, fragment, tracking or
 * trailing slash.
 */
export function normaliseUrl(raw: string): string {
  try {
    const url = new URL(raw.trim());
    const host = url.hostname.toLowerCase().replace(/^www\./, '');
    const params = [...url.searchParams]
      .filter(([key]) => !TRACKING_PARAM.test(key))
      .sort(([a], [b]) => a.localeCompare(b));
    const query = params.length ? `?${new URLSearchParams(params).toString()}` : '';
    return `${host}${url.pathname.replace(/\/+$/, '')}${query}`;
  } catch {
    return raw.trim().toLowerCase();
  }
}

function resultUrls(results: unknown): Set<string> {
  if (!Array.isArray(results)) return new Set();
  return new Set(
    results.flatMap((result) =>
      result && typeof result === 'object' && typeof result.url === 'string' ? [normaliseUrl(result.url)] : [],
    ),
  );
}

const HASH_SIDE = 8;

const readImage = (imageBase64: unknown): ReturnType<typeof readPng> =>
  typeof imageBase64 === 'string'
    ? readPng(Buffer.from(imageBase64, 'base64'))
    : { unreadable: 'corrupt', message: 'no image' };
const imageOf = (read: ReturnType<typeof readPng>): GrayImage | null => ('image' in read ? read.image : null);
const decodeImage = (imageBase64: unknown): GrayImage | null => imageOf(readImage(imageBase64));

/**
 * The 64-bit average hash of a base64 PNG: its luminance averaged over an 8 × 8 grid of cells, one bit
 * per cell, set where the cell is brighter than the mean of all cells. Scaling, recompression and small
 * changes leave most bits as they are; another page does not. Null when the image does not decode.
 */
export function averageHash(imageBase64: unknown): bigint | null {
  const image = decodeImage(imageBase64);
  return image && averageHashOf(image);
}

function averageHashOf(image: GrayImage): bigint {
  const { sums, counts } = gridSums(image, HASH_SIDE, HASH_SIDE, (y) => Math.floor((y * HASH_SIDE) / image.height));
  // An image smaller than the grid leaves cells empty: each takes its nearest pixel's value instead.
  const cells = Array.from(sums, (sum, cell) => {
    if (counts[cell] > 0) return sum / counts[cell];
    const x = Math.min(image.width - 1, Math.floor((((cell % HASH_SIDE) + 0.5) * image.width) / HASH_SIDE));
    const y = Math.min(image.height - 1, Math.floor(((Math.floor(cell / HASH_SIDE) + 0.5) * image.height) / HASH_SIDE));
    return image.pixels[y * image.width + x];
  });
  const mean = cells.reduce((sum, value) => sum + value, 0) / cells.length;
  return cells.reduce((hash, value, cell) => (value > mean ? hash | (1n << BigInt(cell)) : hash), 0n);
}

// 64 px cells at the default 1280 px viewport: a few words by a line or two. Finer cells see the line
// wraps and spacing an honest solver's other fonts change (32 px: honest renders down to 0.63, a drawn
// page up to 0.46, too close); coarser ones blur a drawn page's bars into text.
const INK_GRID_COLUMNS = 20;

/**
 * How much of two images' ink (darkness, 0 white to 1 black) is shared, cell by cell: Σ min / Σ max
 * over square cells, INK_GRID_COLUMNS across each image's own width, so a render at another device
 * scale or a viewport a few pixels wider lands on the same grid. The shorter image is padded with white:
 * a strip of a page does not pass for the page. Two blank images are the same.
 */
export function inkGridSimilarity(a: GrayImage, b: GrayImage): number {
  const rows = Math.max(inkRows(a), inkRows(b));
  const [x, y] = [inkGrid(a, rows), inkGrid(b, rows)];
  let shared = 0;
  let total = 0;
  for (let cell = 0; cell < x.length; cell++) {
    shared += Math.min(x[cell]!, y[cell]!);
    total += Math.max(x[cell]!, y[cell]!);
  }
  return total === 0 ? 1 : shared / total;
}

const inkRows = (image: GrayImage) => Math.ceil((image.height * INK_GRID_COLUMNS) / image.width);

function inkGrid(image: GrayImage, rows: number): Float64Array {
  const { sums, counts } = gridSums(image, INK_GRID_COLUMNS, rows, (y) =>
    Math.floor((y * INK_GRID_COLUMNS) / image.width),
  );
  // Cells past the image's end (padding) stay 0: white.
  return sums.map((sum, cell) => (counts[cell] > 0 ? 1 - sum / counts[cell] / 255 : 0));
}

/**
 * The luminance summed, and the pixels counted, in each cell of a grid `columns` across the image's
 * width and `rows` down, a pixel row's grid row given by `rowOf` (past the last, the last).
 */
function gridSums(
  image: GrayImage,
  columns: number,
  rows: number,
  rowOf: (y: number) => number,
): { sums: Float64Array; counts: Float64Array } {
  const { width, height, pixels } = image;
  const sums = new Float64Array(columns * rows);
  const counts = new Float64Array(columns * rows);
  // Where each column's cells end, worked out once: a row is summed run by run into a local, with no
  // Math call or array write per pixel (slow where code runs in a vm context, see png.ts). The sums are
  // integers, so the order of the additions leaves them exact.
  const columnEnd = new Int32Array(columns);
  for (let x = 0; x < width; x++) columnEnd[Math.min(columns - 1, Math.floor((x * columns) / width))] = x + 1;
  for (let column = 1; column < columns; column++)
    columnEnd[column] = Math.max(columnEnd[column]!, columnEnd[column - 1]!);
  for (let y = 0; y < height; y++) {
    const row = Math.min(rows - 1, rowOf(y)) * columns;
    const start = y * width;
    let x = 0;
    for (let column = 0; column < columns; column++) {
      const end = columnEnd[column]!;
      let sum = 0;
      for (; x < end; x++) sum += pixels[start + x]!;
      sums[row + column] += sum;
      counts[row + column] += end - (column === 0 ? 0 : columnEnd[column - 1]!);
    }
  }
  return { sums, counts };
}

function popcount(value: bigint): number {
  let count = 0;
  for (let rest = value; rest > 0n; rest >>= 1n) count += Number(rest & 1n);
  return count;
}

/** Whether a comparison is a disagreement: a similarity below its type's threshold. */
export const disagrees = (comparison: Comparison) =>
  comparison.similarity !== null && comparison.similarity < comparison.threshold;
