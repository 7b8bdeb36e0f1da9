import crypto from 'node:crypto';
import zlib from 'node:zlib';
import { GRID_COLUMNS, GRID_ROWS, tokenCells, tokenFromPng } from '../../src/trust/pixels';

/**
 * A screenshot canary's token survives the trip through pixels (src/trust/pixels.ts): the grid its page
 * shows is read back from a PNG of any size and colour type, whatever the encoder's row filters (the
 * decoder itself: test/unit/png.test.ts).
 */

// Jest runs a test file in a vm context, where every lookup of a global such as `Math` is slow: the pixel
// loops below make millions, so they use local names.
const { abs, floor, min } = Math;

function chunk(type: string, body: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(body.length);
  return Buffer.concat([length, Buffer.from(type, 'latin1'), body, Buffer.alloc(4)]);
}

/** A PNG of the token's grid at `width` × `height`, as `channels` samples a pixel, each row with `filter`. */
function gridPng(token: string, width: number, height: number, options: { channels: 1 | 3 | 4; filter: 0 | 1 | 2 | 3 | 4 }): Buffer {
  const cells = tokenCells(token);
  const type = { 1: 0, 3: 2, 4: 6 }[options.channels];
  const bpp = options.channels;
  const stride = width * bpp;
  const colourSamples = min(bpp, 3);
  const rows: Buffer[] = [];
  for (let y = 0; y < height; y++) {
    const row = Buffer.alloc(stride, 255);
    const line = floor((y * GRID_ROWS) / height) * GRID_COLUMNS;
    for (let x = 0; x < width; x++) {
      const value = cells[line + floor((x * GRID_COLUMNS) / width)] ? 20 : 235;
      for (let c = x * bpp; c < x * bpp + colourSamples; c++) row[c] = value;
    }
    rows.push(row);
  }
  // Filtered as an encoder would: the decoder must undo each filter exactly.
  const predict = (a: number, b: number, c: number) => {
    if (options.filter === 1) return a;
    if (options.filter === 2) return b;
    if (options.filter === 3) return (a + b) >> 1;
    const p = a + b - c;
    const pa = abs(p - a);
    const pb = abs(p - b);
    const pc = abs(p - c);
    return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
  };
  const filtered = rows.map((row, y) => {
    const out = Buffer.alloc(stride + 1);
    out[0] = options.filter;
    if (options.filter === 0) {
      row.copy(out, 1);
      return out;
    }
    const up = y > 0 ? rows[y - 1]! : Buffer.alloc(stride);
    for (let i = 0; i < stride; i++) out[i + 1] = (row[i]! - predict(i >= bpp ? row[i - bpp]! : 0, up[i]!, i >= bpp ? up[i - bpp]! : 0)) & 0xff;
    return out;
  });
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8;
  header[9] = type;
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', header),
    chunk('IDAT', zlib.deflateSync(Buffer.concat(filtered))),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

describe('a screenshot canary token read back from pixels', () => {
  const token = crypto.randomBytes(16).toString('hex');

  test.each([
    [1280, 800, 4, 0],
    [1280, 800, 3, 1],
    [333, 217, 1, 2],
    [2560, 1600, 4, 3],
    [801, 599, 3, 4],
  ] as const)('%i×%i, %i samples a pixel, filter %i', (width, height, channels, filter) => {
    expect(tokenFromPng(gridPng(token, width, height, { channels, filter }))).toBe(token);
  });

  test('a made-up image shows another token, and what is no PNG is refused', () => {
    expect(tokenFromPng(gridPng('0'.repeat(32), 64, 32, { channels: 3, filter: 0 }))).not.toBe(token);
    expect(() => tokenFromPng(Buffer.from('not a png'))).toThrow('not a PNG image');
  });
});
