import zlib from 'node:zlib';

/**
 * PNG decoding for the trust checks (RFC 2083), the one decoder both use: redundant screenshot runs
 * compare the luminance of two images (similarity.ts), and screenshot canaries read their token's grid
 * back from the pixels (pixels.ts). Non-interlaced images of any bit depth and colour type, transparency
 * composited over white as a browser shows a page. Node's zlib inflates the pixel data; nothing else is
 * needed, so no image library is added for this.
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

/** The image's luminance, or null when it is not a PNG this reads (interlaced, damaged, too large). */
export function decodePngGray(data: Buffer): GrayImage | null {
  try {
    return decodePng(data);
  } catch {
    return null;
  }
}

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
    if (type === 'IHDR') header = { width: body.readUInt32BE(0), height: body.readUInt32BE(4), depth: body[8]!, colour: body[9]!, interlace: body[12]! };
    else if (type === 'PLTE') palette = body;
    else if (type === 'tRNS') paletteAlpha = body;
    else if (type === 'IDAT') idat.push(body);
    else if (type === 'IEND') break;
  }
  if (!header) throw new Error('a PNG without its header');
  const { width, height, depth, colour, interlace } = header;
  const channels = CHANNELS[colour];
  if (!channels || interlace !== 0 || ![1, 2, 4, 8, 16].includes(depth)) throw new Error(`unsupported PNG (colour type ${colour}, ${depth} bits, interlace ${interlace})`);
  if (!width || !height || width * height > MAX_PIXELS) throw new Error(`unsupported PNG size ${width}x${height}`);
  if (colour === 3 && !palette) throw new Error('a palette PNG without its palette');
  const bitsPerPixel = channels * depth;
  const stride = Math.ceil((width * bitsPerPixel) / 8);
  const bpp = Math.max(1, bitsPerPixel >> 3);
  // Bounded: damaged or hostile data inflates to no more than the image can hold.
  const raw = zlib.inflateSync(Buffer.concat(idat), { maxOutputLength: height * (stride + 1) });
  if (raw.length < height * (stride + 1)) throw new Error('truncated PNG data');
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
    const start = y * (stride + 1);
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
  return { width, height, pixels };
}

/** One unfiltered row of 8-bit gray, gray+alpha, RGB or RGBA samples as luminance over white, into `out` from `at`. */
function grayRow8(row: Buffer, channels: number, out: Uint8Array, at: number, width: number): void {
  const gray = channels < 3;
  for (let x = 0, i = 0; x < width; x++, i += channels) {
    const luminance = gray ? row[i]! : 0.299 * row[i]! + 0.587 * row[i + 1]! + 0.114 * row[i + 2]!;
    const a = channels === 2 ? row[i + 1]! : channels === 4 ? row[i + 3]! : 255;
    // Over white, as a browser shows a transparent page.
    out[at + x] = round((luminance * a + 255 * (255 - a)) / 255);
  }
}

/** Undoes one scanline's filter in place (`previous` is the unfiltered row above). */
function unfilter(filter: number, row: Buffer, previous: Buffer, bpp: number): void {
  for (let i = 0; i < row.length; i++) {
    const left = i >= bpp ? row[i - bpp]! : 0;
    const up = previous[i]!;
    const upLeft = i >= bpp ? previous[i - bpp]! : 0;
    let add = 0;
    if (filter === 1) add = left;
    else if (filter === 2) add = up;
    else if (filter === 3) add = (left + up) >> 1;
    else if (filter === 4) {
      const p = left + up - upLeft;
      const pa = abs(p - left);
      const pb = abs(p - up);
      const pc = abs(p - upLeft);
      add = pa <= pb && pa <= pc ? left : pb <= pc ? up : upLeft;
    } else if (filter !== 0) throw new Error(`PNG filter ${filter}`);
    row[i] = (row[i]! + add) & 0xff;
  }
}

/** A PNG of `width` × `height` gray pixels (8-bit, unfiltered): for tests and benchmarks. */
export function encodeGrayPng(width: number, height: number, gray: (x: number, y: number) => number): Buffer {
  const raw = Buffer.alloc(height * (width + 1));
  for (let y = 0; y < height; y++) for (let x = 0; x < width; x++) raw[y * (width + 1) + 1 + x] = gray(x, y);
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
  return Buffer.concat([SIGNATURE, chunk('IHDR', header), chunk('IDAT', zlib.deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
}

function crc32(data: Buffer): number {
  let crc = 0xffffffff;
  for (const byte of data) {
    crc ^= byte;
    for (let k = 0; k < 8; k++) crc = crc & 1 ? (crc >>> 1) ^ 0xedb88320 : crc >>> 1;
  }
  return (crc ^ 0xffffffff) >>> 0;
}
