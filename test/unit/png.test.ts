import zlib from 'node:zlib';
import { seededRandom } from '../../src/trust/canary-pages';
import { decodePng, decodePngGray, encodeGrayPng, readPng } from '../../src/trust/png';

/**
 * The one PNG decoder of the trust checks (src/trust/png.ts): redundant screenshot runs compare what it
 * reads, and screenshot canaries read their token from it (test/unit/canary-pixels.test.ts).
 */

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
const chunk = (type: string, body: Buffer) => {
  const out = Buffer.alloc(12 + body.length);
  out.writeUInt32BE(body.length, 0);
  out.write(type, 4, 'latin1');
  body.copy(out, 8);
  return out;
};
/** A PNG of these raw (filter byte first) rows; the CRCs are not checked by the decoder. */
function png(width: number, height: number, depth: number, colour: number, rows: number[][], extra: Buffer[] = [], interlace = 0): Buffer {
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = depth;
  header[9] = colour;
  header[12] = interlace;
  return Buffer.concat([SIGNATURE, chunk('IHDR', header), ...extra, chunk('IDAT', zlib.deflateSync(Buffer.from(rows.flat()))), chunk('IEND', Buffer.alloc(0))]);
}

describe('the PNG decoder', () => {
  test('the PNG decoder reads what was encoded, with every filter', () => {
    const gray = encodeGrayPng(5, 3, (x, y) => x * 40 + y);
    expect(decodePngGray(gray)).toEqual({ width: 5, height: 3, pixels: Uint8Array.from([0, 40, 80, 120, 160, 1, 41, 81, 121, 161, 2, 42, 82, 122, 162]) });
    // RGBA with the Sub, Up, Average and Paeth filters, written by hand: decoded to the same gray.
    const rows = [
      [1, 10, 10, 10, 255, 10, 10, 10, 0],
      [2, 0, 0, 0, 0, 0, 0, 0, 0],
      [3, 10, 10, 10, 255, 5, 5, 5, 128],
      [4, 0, 0, 0, 0, 0, 0, 0, 0],
    ];
    const decoded = decodePngGray(png(2, 4, 8, 6, rows))!;
    expect(decoded.width).toBe(2);
    expect([...decoded.pixels.slice(0, 4)]).toEqual([10, 20, 10, 20]);
    expect(decoded.pixels.every((value) => value > 0)).toBe(true);
  });

  test('8-bit gray, gray+alpha, RGB and RGBA rows under each filter decode as the PNG standard defines them', () => {
    const random = seededRandom('png-filters');
    const byte = () => Math.floor(random() * 256);
    // The standard's reconstruction, byte by byte (RFC 2083, 6.3–6.6), and luminance over white.
    const reconstruct = (filter: number, row: number[], above: number[], bpp: number) => {
      const out: number[] = [];
      for (let i = 0; i < row.length; i++) {
        const a = i >= bpp ? out[i - bpp]! : 0;
        const b = above[i]!;
        const c = i >= bpp ? above[i - bpp]! : 0;
        const p = a + b - c;
        const [pa, pb, pc] = [Math.abs(p - a), Math.abs(p - b), Math.abs(p - c)];
        const predicted = [0, a, b, Math.floor((a + b) / 2), pa <= pb && pa <= pc ? a : pb <= pc ? b : c][filter]!;
        out.push((row[i]! + predicted) & 0xff);
      }
      return out;
    };
    for (const [colour, channels] of [[0, 1], [4, 2], [2, 3], [6, 4]] as const) {
      const [width, height] = [7, 10];
      const rows = Array.from({ length: height }, (_, y) => [y % 5, ...Array.from({ length: width * channels }, byte)]);
      const expected: number[] = [];
      let above = new Array<number>(width * channels).fill(0);
      for (const [filter, ...row] of rows) {
        const line = reconstruct(filter!, row, above, channels);
        for (let x = 0; x < width; x++) {
          const at = x * channels;
          const luminance = channels < 3 ? line[at]! : 0.299 * line[at]! + 0.587 * line[at + 1]! + 0.114 * line[at + 2]!;
          const alpha = channels === 2 || channels === 4 ? line[at + channels - 1]! : 255;
          expected.push(Math.round((luminance * alpha + 255 * (255 - alpha)) / 255));
        }
        above = line;
      }
      expect([colour, [...decodePng(png(width, height, 8, colour, rows)).pixels]]).toEqual([colour, expected]);
    }
  });

  test('low bit depths and palettes are scaled to 0..255, a palette\'s transparency over white', () => {
    // 1-bit gray: 1 0 1 0 1 → white, black, ...
    expect([...decodePng(png(5, 1, 1, 0, [[0, 0b10101000]])).pixels]).toEqual([255, 0, 255, 0, 255]);
    // 2-bit palette: black, red, and a fully transparent entry (white).
    const palette = chunk('PLTE', Buffer.from([0, 0, 0, 255, 0, 0, 0, 0, 0]));
    const alpha = chunk('tRNS', Buffer.from([255, 255, 0]));
    expect([...decodePng(png(3, 1, 2, 3, [[0, 0b00011000]], [palette, alpha])).pixels]).toEqual([0, 76, 255]);
  });

  test('an interlaced (Adam7) image decodes to the same pixels as the image not interlaced, at every size and filter', () => {
    const ADAM7 = [[0, 0, 8, 8], [4, 0, 8, 8], [0, 4, 4, 8], [2, 0, 4, 4], [0, 2, 2, 4], [1, 0, 2, 2], [0, 1, 1, 2]] as const;
    for (const [width, height] of [[1, 1], [3, 2], [9, 9], [37, 23], [8, 1], [1, 17]] as const) {
      // RGB, 8 bits: each pass's rows filtered with Sub (1) or Up (2) in turn, as an encoder may.
      const rgb = (x: number, y: number) => [(x * 37 + y * 11) & 0xff, (x * 5 + y * 61) & 0xff, (x * y * 7) & 0xff];
      const rows: number[][] = [];
      for (const [x0, y0, dx, dy] of ADAM7) {
        const [w, h] = [Math.ceil((width - x0) / dx), Math.ceil((height - y0) / dy)];
        if (w <= 0 || h <= 0) continue;
        let above: number[] = new Array(w * 3).fill(0);
        for (let y = 0; y < h; y++) {
          const line = Array.from({ length: w }, (_, x) => rgb(x0 + x * dx, y0 + y * dy)).flat();
          const filter = y % 2 === 0 ? 1 : 2;
          const filtered = line.map((value, i) => (value - (filter === 1 ? (i >= 3 ? line[i - 3]! : 0) : above[i]!)) & 0xff);
          rows.push([filter, ...filtered]);
          above = line;
        }
      }
      const plain: number[][] = Array.from({ length: height }, (_, y) => [0, ...Array.from({ length: width }, (_, x) => rgb(x, y)).flat()]);
      const interlaced = decodePng(png(width, height, 8, 2, rows, [], 1));
      expect(interlaced).toEqual(decodePng(png(width, height, 8, 2, plain)));
    }
    // 1-bit gray, interlaced: a 3 × 3 checkerboard.
    const bit = (x: number, y: number) => (x + y) % 2;
    const passRows = ADAM7.flatMap(([x0, y0, dx, dy]) => {
      const [w, h] = [Math.ceil((3 - x0) / dx), Math.ceil((3 - y0) / dy)];
      if (w <= 0 || h <= 0) return [];
      return Array.from({ length: h }, (_, y) => [0, Array.from({ length: w }, (_, x) => bit(x0 + x * dx, y0 + y * dy) << (7 - x)).reduce((a, b) => a | b, 0)]);
    });
    expect([...decodePng(png(3, 3, 1, 0, passRows, [], 1)).pixels]).toEqual([0, 255, 0, 255, 0, 255, 0, 255, 0]);
  });

  test('a damaged image is corrupt; one above the size limit is too large, not corrupt', () => {
    expect(readPng(Buffer.from('not a png'))).toMatchObject({ unreadable: 'corrupt' });
    expect(readPng(png(4, 4, 8, 0, [[0, 1, 2, 3, 4]]))).toMatchObject({ unreadable: 'corrupt' });
    expect(readPng(png(1, 1, 8, 0, [[0, 0]], [], 2))).toMatchObject({ unreadable: 'corrupt' });
    const valid = encodeGrayPng(4, 4, () => 128);
    expect(readPng(valid.subarray(0, valid.length - 20))).toMatchObject({ unreadable: 'corrupt' });
    expect(readPng(png(10_000, 10_000, 8, 0, [[0]]))).toMatchObject({ unreadable: 'too_large' });
    expect(readPng(valid)).toMatchObject({ image: { width: 4, height: 4 } });
  });

  test('what it cannot read is refused, saying why', () => {
    expect(() => decodePng(Buffer.from('not a png'))).toThrow('not a PNG image');
    expect(() => decodePng(png(1, 1, 8, 0, [[0, 0]], [], 2))).toThrow('invalid PNG');
    expect(() => decodePng(png(4, 4, 8, 0, [[0, 1, 2, 3, 4]]))).toThrow('truncated PNG data');
    expect(() => decodePng(png(1, 1, 8, 3, [[0, 0]]))).toThrow('palette');
    expect(decodePngGray(Buffer.from('not a png'))).toBeNull();
  });

  test('what it encodes for tests, interlaced or not, it decodes', () => {
    const shade = (x: number, y: number) => (x * 13 + y * 29) % 256;
    expect(decodePng(encodeGrayPng(21, 11, shade, { interlaced: true }))).toEqual(decodePng(encodeGrayPng(21, 11, shade)));
    expect(encodeGrayPng(21, 11, shade, { interlaced: true })[8 + 8 + 12]).toBe(1);

    const image = encodeGrayPng(7, 2, (x, y) => x * 30 + y * 5);
    expect(decodePng(image)).toEqual({ width: 7, height: 2, pixels: Uint8Array.from([0, 30, 60, 90, 120, 150, 180, 5, 35, 65, 95, 125, 155, 185]) });
  });
});
