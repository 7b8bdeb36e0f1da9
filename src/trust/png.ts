import zlib from 'node:zlib';

/**
 * PNG decoding for the trust checks (RFC 2083), the one decoder both use: redundant screenshot runs
 * compare the luminance of two images (similarity.ts), and screenshot canaries read their token's grid
 * back from the pixels (pixels.ts). Every image the PNG standard allows: any bit depth and colour type,
 * interlaced (Adam7) or not, transparency composited over white as a browser shows a page. Node's zlib
 * inflates the pixel data; nothing else is needed, so no image library is added for this.
 */

// The per-pixel loops use local names for Math's functions: a global lookup per pixel is slow where
// code runs in a vm context (Jest's), which millions of pixels make seconds.
const { abs, round } = Math;

const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
// A screenshot larger than this (a very long full page) is not decoded: its buffers alone would be
// hundreds of MB.
const MAX_PIXELS = 40_000_000;

export interface GrayImage {
  width: number;
  height: number;
  /** Luminance 0 (black) to 255, row by row. */
  pixels: Uint8Array;
}

// Channels per pixel by colour type: gray, -, RGB, palette, gray+alpha, -, RGBA.
const CHANNELS: Record<number, number> = { 0: 1, 2: 3, 3: 1, 4: 2, 6: 4 };

/** The image's luminance, or null when it is not a PNG this reads (damaged, not a PNG, too large). */
export function decodePngGray(data: Buffer): GrayImage | null {
  const read = readPng(data);
  return 'image' in read ? read.image : null;
}

/** Thrown for a well-formed image above MAX_PIXELS: a limit of this decoder, not a fault of the image. */
export class PngTooLarge extends Error {}

/**
 * The image's luminance, or why it is not read: `corrupt` (not a PNG, or one no decoder reads: what a
 * check holds against the solver that returned it), or `too_large` (above this decoder's limit: the check
 * cannot be made).
 */
export function readPng(data: Buffer): { image: GrayImage } | { unreadable: 'corrupt' | 'too_large'; message: string } {
  try {
    return { image: decodePng(data) };
  } catch (error) {
    return { unreadable: error instanceof PngTooLarge ? 'too_large' : 'corrupt', message: (error as Error).message };
  }
}

// Adam7's seven passes: the first column and row of each, and its steps across and down.
const ADAM7 = [
  [0, 0, 8, 8],
  [4, 0, 8, 8],
  [0, 4, 4, 8],
  [2, 0, 4, 4],
  [0, 2, 2, 4],
  [1, 0, 2, 2],
  [0, 1, 1, 2],
] as const;

/** The image's luminance; throws, saying why, when it is not a PNG this reads. */
export function decodePng(data: Buffer): GrayImage {
  if (data.length < 8 || !data.subarray(0, 8).equals(SIGNATURE)) throw new Error('not a PNG image');
  let offset = 8;
  let header: { width: number; height: number; depth: number; colour: number; interlace: number } | undefined;
  let palette: Buffer | null = null;
  let paletteAlpha: Buffer | null = null;
  const idat: Buffer[] = [];
  while (offset + 8 <= data.length) {
    const length = data.readUInt32BE(offset);
    const type = data.toString('latin1', offset + 4, offset + 8);
    const body = data.subarray(offset + 8, offset + 8 + length);
    offset += 12 + length;
    if (type === 'IHDR')
      header = {
        width: body.readUInt32BE(0),
        height: body.readUInt32BE(4),
        depth: body[8]!,
        colour: body[9]!,
        interlace: body[12]!,
      };
    else if (type === 'PLTE') palette = body;
    else if (type === 'tRNS') paletteAlpha = body;
    else if (type === 'IDAT') idat.push(body);
    else if (type === 'IEND') break;
  }
  if (!header) throw new Error('a PNG without its header');
  const { width, height, depth, colour, interlace } = header;
  const channels = CHANNELS[colour];
  if (!channels || (interlace !== 0 && interlace !== 1) || ![1, 2, 4, 8, 16].includes(depth))
    throw new Error(`invalid PNG (colour type ${colour}, ${depth} bits, interlace ${interlace})`);
  if (!width || !height) throw new Error(`invalid PNG size ${width}x${height}`);
  if (width * height > MAX_PIXELS)
    throw new PngTooLarge(`PNG size ${width}x${height} is above the ${MAX_PIXELS}-pixel limit`);
  if (colour === 3 && !palette) throw new Error('a palette PNG without its palette');
  const format: PixelFormat = { depth, colour, channels, palette, paletteAlpha };
  const stride = (w: number) => Math.ceil((w * channels * depth) / 8);
  // Each pass (one for a non-interlaced image) as its own small image: its first column and row, steps, size.
  const passes = (interlace === 0 ? [[0, 0, 1, 1] as const] : ADAM7)
    .map(([x0, y0, dx, dy]) => ({ x0, y0, dx, dy, w: Math.ceil((width - x0) / dx), h: Math.ceil((height - y0) / dy) }))
    .filter((pass) => pass.w > 0 && pass.h > 0);
  const size = passes.reduce((sum, pass) => sum + pass.h * (stride(pass.w) + 1), 0);
  // Bounded: damaged or hostile data inflates to no more than the image can hold.
  const raw = zlib.inflateSync(Buffer.concat(idat), { maxOutputLength: size });
  if (raw.length < size) throw new Error('truncated PNG data');
  if (interlace === 0) return { width, height, pixels: decodeRows(raw, 0, width, height, format) };
  const pixels = new Uint8Array(width * height);
  let passStart = 0;
  for (const pass of passes) {
    const sub = decodeRows(raw, passStart, pass.w, pass.h, format);
    passStart += pass.h * (stride(pass.w) + 1);
    for (let y = 0; y < pass.h; y++) {
      const at = (pass.y0 + y * pass.dy) * width + pass.x0;
      for (let x = 0; x < pass.w; x++) pixels[at + x * pass.dx] = sub[y * pass.w + x]!;
    }
  }
  return { width, height, pixels };
}

interface PixelFormat {
  depth: number;
  colour: number;
  channels: number;
  palette: Buffer | null;
  paletteAlpha: Buffer | null;
}

/** The luminance of `height` filtered scanlines of `width` pixels read from `raw` at `offset`. */
function decodeRows(
  raw: Buffer,
  offset: number,
  width: number,
  height: number,
  { depth, colour, channels, palette, paletteAlpha }: PixelFormat,
): Uint8Array {
  const bitsPerPixel = channels * depth;
  const stride = Math.ceil((width * bitsPerPixel) / 8);
  const bpp = Math.max(1, bitsPerPixel >> 3);
  const pixels = new Uint8Array(width * height);
  let previous = Buffer.alloc(stride);
  let current = Buffer.alloc(stride);
  const sample = (row: Buffer, index: number): number => {
    // The index-th sample of the row, scaled to 0..255 (a palette index as it is).
    if (depth === 8) return row[index]!;
    if (depth === 16) return row[index * 2]!;
    const perByte = 8 / depth;
    const byte = row[Math.floor(index / perByte)]!;
    const shift = 8 - depth * ((index % perByte) + 1);
    const value = (byte >> shift) & ((1 << depth) - 1);
    return colour === 3 ? value : round((value * 255) / ((1 << depth) - 1));
  };
  for (let y = 0; y < height; y++) {
    const start = offset + y * (stride + 1);
    const filter = raw[start]!;
    raw.copy(current, 0, start + 1, start + 1 + stride);
    unfilter(filter, current, previous, bpp);
    if (depth === 8 && colour !== 3) {
      // What browsers' screenshots are: read in place, without a call per sample.
      grayRow8(current, channels, pixels, y * width, width);
      [previous, current] = [current, previous];
      continue;
    }
    for (let x = 0; x < width; x++) {
      let r: number;
      let g: number;
      let b: number;
      let a = 255;
      if (colour === 3) {
        const index = sample(current, x);
        if (index * 3 + 2 >= palette!.length) throw new Error('a palette index outside the palette');
        r = palette![index * 3]!;
        g = palette![index * 3 + 1]!;
        b = palette![index * 3 + 2]!;
        if (paletteAlpha && index < paletteAlpha.length) a = paletteAlpha[index]!;
      } else if (colour === 0 || colour === 4) {
        r = g = b = sample(current, x * channels);
        if (colour === 4) a = sample(current, x * channels + 1);
      } else {
        r = sample(current, x * channels);
        g = sample(current, x * channels + 1);
        b = sample(current, x * channels + 2);
        if (colour === 6) a = sample(current, x * channels + 3);
      }
      const luminance = 0.299 * r + 0.587 * g + 0.114 * b;
      // Over white, as a browser shows a transparent page.
      pixels[y * width + x] = round((luminance * a + 255 * (255 - a)) / 255);
    }
    [previous, current] = [current, previous];
  }
  return pixels;
}

/**
 * One unfiltered row of 8-bit gray, gray+alpha, RGB or RGBA samples as luminance over white, into `out`
 * from `at`. One loop per layout: a test of the layout per pixel costs more than the pixel's arithmetic.
 */
function grayRow8(row: Buffer, channels: number, out: Uint8Array, at: number, width: number): void {
  // Over white, as a browser shows a transparent page: (luminance · a + 255 · (255 − a)) / 255.
  if (channels === 3) {
    // The same formula at a = 255, not luminance alone: × 255 / 255 can move a value at .5 across the
    // rounding, and every layout must give what the others give for an opaque pixel.
    for (let x = 0, i = 0; x < width; x++, i += 3) {
      out[at + x] = round(((0.299 * row[i]! + 0.587 * row[i + 1]! + 0.114 * row[i + 2]!) * 255) / 255);
    }
  } else if (channels === 4) {
    for (let x = 0, i = 0; x < width; x++, i += 4) {
      const a = row[i + 3]!;
      const luminance = 0.299 * row[i]! + 0.587 * row[i + 1]! + 0.114 * row[i + 2]!;
      out[at + x] = round((luminance * a + 255 * (255 - a)) / 255);
    }
  } else if (channels === 2) {
    for (let x = 0, i = 0; x < width; x++, i += 2) {
      const a = row[i + 1]!;
      out[at + x] = round((row[i]! * a + 255 * (255 - a)) / 255);
    }
  } else {
    for (let x = 0; x < width; x++) out[at + x] = row[x]!;
  }
}

/**
 * Undoes one scanline's filter in place (`previous` is the unfiltered row above). One loop per filter,
 * the first pixel's bytes (no left neighbour) apart: no test per byte.
 */
function unfilter(filter: number, row: Buffer, previous: Buffer, bpp: number): void {
  const n = row.length;
  const first = Math.min(bpp, n);
  switch (filter) {
    case 0:
      return;
    case 1:
      for (let i = bpp; i < n; i++) row[i] = (row[i]! + row[i - bpp]!) & 0xff;
      return;
    case 2:
      for (let i = 0; i < n; i++) row[i] = (row[i]! + previous[i]!) & 0xff;
      return;
    case 3:
      for (let i = 0; i < first; i++) row[i] = (row[i]! + (previous[i]! >> 1)) & 0xff;
      for (let i = bpp; i < n; i++) row[i] = (row[i]! + ((row[i - bpp]! + previous[i]!) >> 1)) & 0xff;
      return;
    case 4:
      // Paeth with no left neighbour predicts the byte above.
      for (let i = 0; i < first; i++) row[i] = (row[i]! + previous[i]!) & 0xff;
      for (let i = bpp; i < n; i++) {
        const left = row[i - bpp]!;
        const up = previous[i]!;
        const upLeft = previous[i - bpp]!;
        const p = left + up - upLeft;
        const pa = abs(p - left);
        const pb = abs(p - up);
        const pc = abs(p - upLeft);
        row[i] = (row[i]! + (pa <= pb && pa <= pc ? left : pb <= pc ? up : upLeft)) & 0xff;
      }
      return;
    default:
      throw new Error(`PNG filter ${filter}`);
  }
}

/** A PNG of `width` × `height` gray pixels (8-bit, unfiltered, interlaced if asked): for tests and benchmarks. */
export function encodeGrayPng(
  width: number,
  height: number,
  gray: (x: number, y: number) => number,
  options: { interlaced?: boolean } = {},
): Buffer {
  const rows: number[] = [];
  for (const [x0, y0, dx, dy] of options.interlaced ? ADAM7 : ([[0, 0, 1, 1]] as const)) {
    if (x0 >= width || y0 >= height) continue;
    for (let y = y0; y < height; y += dy) {
      rows.push(0);
      for (let x = x0; x < width; x += dx) rows.push(gray(x, y));
    }
  }
  const raw = Buffer.from(rows);
  const chunk = (type: string, body: Buffer) => {
    const out = Buffer.alloc(12 + body.length);
    out.writeUInt32BE(body.length, 0);
    out.write(type, 4, 'latin1');
    body.copy(out, 8);
    out.writeUInt32BE(crc32(out.subarray(4, 8 + body.length)), 8 + body.length);
    return out;
  };
  const header = Buffer.alloc(13);
  header.writeUInt32BE(width, 0);
  header.writeUInt32BE(height, 4);
  header[8] = 8;
  header[12] = options.interlaced ? 1 : 0;
  return Buffer.concat([
    SIGNATURE,
    chunk('IHDR', header),
    chunk('IDAT', zlib.deflateSync(raw)),
    chunk('IEND', Buffer.alloc(0)),
  ]);
}

function crc32(data: Buffer): number {
  let crc = 0xffffffff;
  for (const byte of data) {
    crc ^= byte;
    for (let k = 0; k < 8; k++) crc = crc & 1 ? (crc >>> 1) ^ 0xedb88320 : crc >>> 1;
  }
  return (crc ^ 0xffffffff) >>> 0;
}
