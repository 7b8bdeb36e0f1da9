import { decodePng, encodeGrayPng } from '../../src/trust/png';
import { seededRandom } from '../../src/trust/canary-pages';
import { averageHash, compareResults, disagrees, inkGridSimilarity, normaliseUrl, structureOf, textSimilarity } from '../../src/trust/similarity';

/** The type-specific measures redundant runs compare two solvers' results with (docs/trust.md). */

const ARTICLE = `# Rivers of Europe

The Danube flows through ten countries before it reaches the Black Sea. Its delta is a
protected wetland, home to hundreds of bird species and a few fishing villages.

- Length: 2,850 km
- Source: Black Forest
`;

describe('fetched text', () => {
  test('the same page fetched twice, or with a line changed, agrees; a made-up or emptied page does not', () => {
    const fetch = (content: string) => ({ content });
    expect(compareResults('proxy_fetch', fetch(ARTICLE), fetch(ARTICLE)).similarity).toBe(1);
    const drifted = ARTICLE.replace('a few fishing villages', 'several fishing villages and a museum');
    expect(disagrees(compareResults('proxy_fetch', fetch(ARTICLE), fetch(drifted)))).toBe(false);
    // Markdown and HTML of one page: markup does not count.
    const html = `<h1>Rivers of Europe</h1><p>${ARTICLE.split('\n').slice(2, 4).join(' ')}</p><ul><li>Length: 2,850 km</li><li>Source: Black Forest</li></ul>`;
    expect(disagrees(compareResults('proxy_fetch', fetch(ARTICLE), fetch(html)))).toBe(false);
    expect(disagrees(compareResults('proxy_fetch', fetch(ARTICLE), fetch('# Hello')))).toBe(true);
    // An emptied client result disagrees with the check's page; a check that got nothing cannot answer.
    expect(disagrees(compareResults('proxy_fetch', fetch(''), fetch(ARTICLE)))).toBe(true);
    expect(compareResults('proxy_fetch', fetch(ARTICLE), fetch(''))).toMatchObject({ similarity: null, incomparable: 'check_empty' });
    expect(disagrees(compareResults('proxy_fetch', fetch(ARTICLE), fetch('')))).toBe(false);
    // The same words in another order are another page.
    const shuffled = ARTICLE.split(/\s+/).reverse().join(' ');
    expect(textSimilarity(ARTICLE, shuffled)).toBeLessThan(0.3);
    expect(compareResults('proxy_fetch', fetch(''), fetch('')).similarity).toBe(1);
  });
});

describe('snapshots', () => {
  const tree = `- heading "Rivers" [level=1]\n- paragraph: The Danube flows through ten countries\n- list:\n  - listitem: Length 2,850 km\n  - listitem: Source Black Forest`;
  test('structure is the kinds of lines and their depth', () => {
    expect(structureOf(tree, 'aria')).toEqual(new Map([['0:heading', 1], ['0:paragraph', 1], ['0:list', 1], ['1:listitem', 2]]));
    expect(structureOf(ARTICLE, 'markdown')).toEqual(new Map([['0:h1', 1], ['0:p', 2], ['0:li', 2]]));
  });
  test('the same tree agrees; another tree, or another format, does not', () => {
    const snap = (snapshot: unknown, format = 'aria') => ({ snapshot, snapshot_format: format });
    expect(compareResults('page_snapshot', snap(tree), snap(tree)).similarity).toBe(1);
    expect(disagrees(compareResults('page_snapshot', snap(tree), snap('- heading "Hello" [level=1]')))).toBe(true);
    expect(disagrees(compareResults('page_snapshot', snap(tree), snap(tree, 'markdown')))).toBe(true);
    // A tree given as an object is compared as its JSON.
    expect(compareResults('page_snapshot', snap({ role: 'main', children: [] }, 'ai'), snap({ role: 'main', children: [] }, 'ai')).similarity).toBe(1);
  });
  test('a rendered page is compared by its text and what its actions returned; made-up action results lower the similarity', () => {
    const page = '<html><head><script>var tracking = "ignored words here"</script></head><body><h1>Rivers</h1><p>The Danube flows through ten countries and four capitals on its way.</p><ul><li>Length 2,850 km</li><li>Source Black Forest</li></ul></body></html>';
    const rendered = (html: string, actions?: unknown) => ({ url: 'https://example.org/', snapshot: html, snapshot_format: 'html', ...(actions ? { actions } : {}) });
    const returned = (value: unknown) => ({ screenshots: [], scrapes: [{ url: 'https://example.org/', html: page }], javascript_returns: [{ type: typeof value, value }] });
    expect(compareResults('page_snapshot', rendered(page, returned('Rivers')), rendered(page.replace('<html>', '<html lang="en">'), returned('Rivers'))).similarity).toBe(1);
    expect(disagrees(compareResults('page_snapshot', rendered(page), rendered('<html><body><h1>Hello</h1><p>Nothing to see.</p></body></html>')))).toBe(true);
    // The same page with made-up scrapes and script values.
    const madeUp = { screenshots: [], scrapes: [{ url: 'https://example.org/', html: '<p>An invented page about something else entirely, with many other words in it.</p>' }], javascript_returns: [{ type: 'string', value: 'invented value that the page never held at all' }] };
    const honest = compareResults('page_snapshot', rendered(page, returned('Rivers')), rendered(page, returned('Rivers'))).similarity!;
    expect(compareResults('page_snapshot', rendered(page, returned('Rivers')), rendered(page, madeUp)).similarity!).toBeLessThan(honest);
  });
});

describe('search results', () => {
  const list = (urls: string[]) => ({ results: urls.map((url, i) => ({ title: `t${i}`, url, snippet: '' })) });
  test('URLs are compared as engines list one page', () => {
    expect(normaliseUrl('https://www.Example.com/a/?utm_source=x&b=2#top')).toBe('example.com/a?b=2');
    expect(normaliseUrl('http://example.com/a')).toBe('example.com/a');
  });
  test('two engines sharing a few of ten agree; a fixed list does not', () => {
    const honest = Array.from({ length: 10 }, (_, i) => `https://site${i}.org/page`);
    const other = [...honest.slice(0, 3), ...Array.from({ length: 7 }, (_, i) => `https://elsewhere${i}.net/`)];
    const ten = { query: 'q', count: 10 };
    expect(compareResults('web_search', list(honest), list(other), ten).similarity).toBe(0.3);
    expect(disagrees(compareResults('web_search', list(honest), list(other), ten))).toBe(false);
    const fixed = list(Array.from({ length: 10 }, (_, i) => `https://example.com/${i}`));
    expect(disagrees(compareResults('web_search', list(honest), fixed, ten))).toBe(true);
    expect(compareResults('web_search', list([]), list([])).similarity).toBe(1);
  });
  test('only what the client is shown is compared: the first `count` of each list, in order (5 when the payload names none)', () => {
    const real = Array.from({ length: 5 }, (_, i) => `https://real${i}.org/`);
    const madeUp = Array.from({ length: 5 }, (_, i) => `https://made-up${i}.example/`);
    // Made-up results first, the real ones after them: the client sees only the made-up ones.
    expect(compareResults('web_search', list([...madeUp, ...real]), list(real), { query: 'q', count: 5 })).toMatchObject({ similarity: 0 });
    expect(compareResults('web_search', list([...madeUp, ...real]), list(real)).similarity).toBe(0);
    // The whole list would have agreed (5 of 10).
    expect(compareResults('web_search', list([...madeUp, ...real]), list(real), { count: 10 }).similarity).toBe(0.5);
    // Extra results after the first `count` are not held against an honest solver.
    expect(compareResults('web_search', list([...real, ...madeUp]), list(real), { count: 5 }).similarity).toBe(1);
    expect(compareResults('web_search', list([...real.slice(0, 3), ...madeUp]), list(real), { count: 3 }).similarity).toBe(1);
  });
  test('a check that finds nothing cannot answer; a checked result with nothing, where the check found results, disagrees', () => {
    const found = list(['https://a.org/1', 'https://b.org/2']);
    expect(compareResults('web_search', found, list([]))).toMatchObject({ similarity: null, incomparable: 'check_empty' });
    expect(disagrees(compareResults('web_search', found, list([])))).toBe(false);
    expect(compareResults('web_search', list([]), found).similarity).toBe(0);
    expect(disagrees(compareResults('web_search', list([]), found))).toBe(true);
    // Snapshots alike: a blank check is no answer, a blank result is wrong.
    const snap = (snapshot: string) => ({ snapshot, snapshot_format: 'markdown' });
    expect(compareResults('page_snapshot', snap(ARTICLE), snap(''))).toMatchObject({ similarity: null, incomparable: 'check_empty' });
    expect(disagrees(compareResults('page_snapshot', snap(''), snap(ARTICLE)))).toBe(true);
  });
});

describe('screenshots', () => {
  const page = (shift = 0) => encodeGrayPng(64, 48, (x, y) => (y < 12 ? 40 : x > 32 + shift ? 220 : 120));
  const b64 = (png: Buffer) => png.toString('base64');

  test('the same page, or one a few pixels off, agrees; another page does not; the check\'s broken image is not compared, the checked one is wrong', () => {
    expect(compareResults('screenshot', { image_base64: b64(page()) }, { image_base64: b64(page()) }).similarity).toBe(1);
    expect(disagrees(compareResults('screenshot', { image_base64: b64(page()) }, { image_base64: b64(page(1)) }))).toBe(false);
    const other = encodeGrayPng(64, 48, (x, y) => ((x >> 3) + (y >> 3)) % 2 ? 230 : 30);
    expect(disagrees(compareResults('screenshot', { image_base64: b64(page()) }, { image_base64: b64(other) }))).toBe(true);
    const broken = compareResults('screenshot', { image_base64: b64(page()) }, { image_base64: 'bm90IGEgcG5n' });
    expect(broken).toMatchObject({ similarity: null, incomparable: 'check_unreadable' });
    expect(disagrees(broken)).toBe(false);
    const wrong = compareResults('screenshot', { image_base64: 'bm90IGEgcG5n' }, { image_base64: b64(page()) });
    expect(wrong.similarity).toBe(0);
    expect(wrong.first.unreadable).toBe('not a PNG image');
    expect(disagrees(wrong)).toBe(true);
    // Interlaced, the same page agrees.
    const interlaced = encodeGrayPng(64, 48, (x, y) => (y < 12 ? 40 : x > 32 ? 220 : 120), { interlaced: true });
    expect(compareResults('screenshot', { image_base64: b64(interlaced) }, { image_base64: b64(page()) }).similarity).toBe(1);
    // The scripted solvers' 1 × 1 transparent PNG decodes (white) and hashes.
    expect(averageHash('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==')).toBe(0n);
  });
});

/**
 * A page of text drawn as a browser lays it out: a coloured header, a heading, paragraphs of words (runs
 * of glyph strokes) wrapped at a column. `glyph` scales the words' widths as another font would (so lines
 * wrap elsewhere), `scale` is the device scale, `width` the viewport's.
 */
function textPage({ glyph = 1, scale = 1, width = 640, seed = 'page' } = {}): Buffer {
  const rng = seededRandom(seed);
  const ink = new Uint8Array(width * 400);
  const box = (x0: number, y0: number, w: number, h: number, value: number) => {
    for (let y = Math.max(0, y0); y < Math.min(400, y0 + h); y++) for (let x = Math.max(0, x0); x < Math.min(width, x0 + w); x++) ink[y * width + x] = value;
  };
  box(0, 0, width, 60, 90);
  const left = Math.round((width - 380) / 2);
  let y = 80;
  for (const [lines, size] of [[1, 16], [3, 9], [1, 12], [4, 9], [2, 9]] as const) {
    let x = left;
    let line = 0;
    while (line < lines) {
      const word = Math.round((2 + Math.floor(rng() * 8)) * size * 0.55 * glyph);
      if (x + word > left + 380) {
        x = left;
        line += 1;
        y += Math.round(size * 1.6);
        continue;
      }
      // Glyphs: strokes two pixels wide with gaps, as text is at this size.
      for (let gx = x; gx < x + word; gx += 3) box(gx, y, 2, size, 200);
      x += word + Math.round(size * 0.3 * glyph);
    }
    y += size * 2;
  }
  // Integer division without a Math call per pixel (a global lookup each, slow in Jest's vm context).
  return encodeGrayPng(width * scale, 400 * scale, (x, py) => 255 - ink[((py / scale) | 0) * width + ((x / scale) | 0)]!);
}

describe('screenshots, at two scales', () => {
  const b64 = (png: Buffer) => png.toString('base64');
  const compare = (a: Buffer, b: Buffer) => compareResults('screenshot', { image_base64: b64(a) }, { image_base64: b64(b) });
  // Drawn like test/support/cheats.ts's pageLikeScreenshot: a heading and four bars of dark "text".
  const drawn = encodeGrayPng(640, 400, (x, y) => {
    const line = Math.floor((y - 10) / 15);
    return x >= 4 && y >= 10 && line < 5 && (y - 10) % 15 < (line === 0 ? 13 : 7) && x < (line === 0 ? 350 : 600 - line * 45) ? 30 : 255;
  });

  test('another font, device scale 2 and a viewport 8 px wider agree with the verifier\'s render', () => {
    const verifier = textPage();
    for (const honest of [textPage({ glyph: 0.88 }), textPage({ glyph: 1.1 }), textPage({ scale: 2 }), textPage({ width: 648 })]) {
      const compared = compare(verifier, honest);
      expect(compared.measure).toBe('average_hash_and_ink_grid');
      expect(compared.similarity).toBeGreaterThanOrEqual(compared.threshold + 0.1);
    }
  });

  test('a page drawn to pass the average hash, a blank image and a strip of the page are proven wrong', () => {
    const verifier = textPage();
    const pageLike = compare(verifier, drawn);
    expect(pageLike.first).toMatchObject({ average_hash_similarity: expect.any(Number), ink_grid_similarity: expect.any(Number) });
    expect(pageLike.similarity).toBeLessThan(pageLike.threshold - 0.1);
    expect(disagrees(compare(verifier, encodeGrayPng(640, 400, () => 255)))).toBe(true);
    const { pixels } = decodePng(verifier);
    const strip = encodeGrayPng(640, 100, (x, y) => pixels[y * 640 + x]!);
    expect(disagrees(compare(verifier, strip))).toBe(true);
  });

  test('ink grid: two blank images are the same, and ink shared cell by cell counts', () => {
    const blank = decodePng(encodeGrayPng(40, 20, () => 255));
    expect(inkGridSimilarity(blank, blank)).toBe(1);
    const half = decodePng(encodeGrayPng(40, 20, (x) => (x < 20 ? 0 : 255)));
    const all = decodePng(encodeGrayPng(40, 20, () => 0));
    expect(inkGridSimilarity(half, all)).toBeCloseTo(0.5);
    expect(inkGridSimilarity(blank, all)).toBe(0);
  });

  test('the grid\'s sums are those of every pixel in its cell, at any size (a row or column narrower than the grid too)', () => {
    // Each pixel added to its cell one by one: the definition the grid's run-by-run sums must equal.
    const reference = (image: { width: number; height: number; pixels: Uint8Array }, columns: number, rows: number, rowOf: (y: number) => number) => {
      const sums = new Array<number>(columns * rows).fill(0);
      const counts = new Array<number>(columns * rows).fill(0);
      for (let y = 0; y < image.height; y++)
        for (let x = 0; x < image.width; x++) {
          const cell = Math.min(rows - 1, rowOf(y)) * columns + Math.min(columns - 1, Math.floor((x * columns) / image.width));
          sums[cell] += image.pixels[y * image.width + x]!;
          counts[cell] += 1;
        }
      return { sums, counts };
    };
    const random = seededRandom('grid-sums');
    for (const [width, height] of [[1, 1], [5, 3], [7, 41], [19, 8], [20, 20], [131, 77], [640, 400]] as const) {
      const shade = Array.from({ length: width * height }, () => Math.floor(random() * 256));
      const png = encodeGrayPng(width, height, (x, y) => shade[y * width + x]!);
      const image = decodePng(png);
      // The average hash, from the reference's 8 × 8 sums (an empty cell takes its nearest pixel).
      const grid = reference(image, 8, 8, (y) => Math.floor((y * 8) / height));
      const cells = grid.sums.map((sum, cell) => {
        if (grid.counts[cell]! > 0) return sum / grid.counts[cell]!;
        const x = Math.min(width - 1, Math.floor((((cell % 8) + 0.5) * width) / 8));
        const y = Math.min(height - 1, Math.floor(((Math.floor(cell / 8) + 0.5) * height) / 8));
        return image.pixels[y * width + x]!;
      });
      const mean = cells.reduce((sum, value) => sum + value, 0) / cells.length;
      const hash = cells.reduce((bits, value, cell) => (value > mean ? bits | (1n << BigInt(cell)) : bits), 0n);
      expect([width, height, averageHash(png.toString('base64'))]).toEqual([width, height, hash]);
      // The ink grid against a blank image of the same size: the image's own ink over all cells.
      const rows = Math.ceil((height * 20) / width);
      const ink = reference(image, 20, rows, (y) => Math.floor((y * 20) / width));
      const inkOf = ink.sums.map((sum, cell) => (ink.counts[cell]! > 0 ? 1 - sum / ink.counts[cell]! / 255 : 0));
      const blank = decodePng(encodeGrayPng(width, height, () => 255));
      const total = inkOf.reduce((sum, value) => sum + value, 0);
      expect([width, height, inkGridSimilarity(blank, image)]).toEqual([width, height, total === 0 ? 1 : 0 / total]);
      const darker = decodePng(encodeGrayPng(width, height, (x, y) => Math.floor(shade[y * width + x]! / 2)));
      const inkDarker = reference(darker, 20, rows, (y) => Math.floor((y * 20) / width)).sums.map((sum, cell) => (ink.counts[cell]! > 0 ? 1 - sum / ink.counts[cell]! / 255 : 0));
      const shared = inkOf.reduce((sum, value, cell) => sum + Math.min(value, inkDarker[cell]!), 0);
      const most = inkOf.reduce((sum, value, cell) => sum + Math.max(value, inkDarker[cell]!), 0);
      expect([width, height, inkGridSimilarity(image, darker)]).toEqual([width, height, shared / most]);
    }
  });
});
