import { decodePng, type GrayImage } from './png';

/**
 * A screenshot canary's token in pixels (docs/trust.md): its page shows the token's bits as a grid of
 * black and white cells filling the viewport, and the checker decodes the PNG the solver returns and
 * reads the grid back. The PNG decoding is png.ts's (the one redundant screenshot runs use).
 */

// 16 × 8 cells: one per bit of a 32-hex-digit token, black for 1; large enough to survive any scaling.
export const GRID_COLUMNS = 16;
export const GRID_ROWS = 8;

/** The token's bits, most significant first, as the grid's cells row by row (true: black). */
export const tokenCells = (token: string): boolean[] =>
  [...token].flatMap((digit) => [...parseInt(digit, 16).toString(2).padStart(4, '0')].map((bit) => bit === '1'));

/** The token a screenshot of a canary's grid shows. Throws when the image cannot be decoded. */
export function tokenFromPng(png: Buffer): string {
  const cells = readGrid(decodePng(png), GRID_COLUMNS, GRID_ROWS);
  return Array.from(
    { length: cells.length / 4 },
    (_, i) =>
      (cells[i * 4]! ? 8 : 0) + (cells[i * 4 + 1]! ? 4 : 0) + (cells[i * 4 + 2]! ? 2 : 0) + (cells[i * 4 + 3]! ? 1 : 0),
  )
    .map((value) => value.toString(16))
    .join('');
}

/**
 * The cells of a `columns` × `rows` grid covering the whole image, row by row: true where the cell
 * is dark. Each cell is judged by the mean luminance of its middle (its edges may be blended with
 * the next cell when the grid does not divide the image evenly), sampled on a sparse lattice.
 */
export function readGrid(image: GrayImage, columns: number, rows: number): boolean[] {
  const cells: boolean[] = [];
  const SAMPLES = 8;
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < columns; c++) {
      let sum = 0;
      for (let j = 0; j < SAMPLES; j++) {
        for (let i = 0; i < SAMPLES; i++) {
          const x = Math.min(
            image.width - 1,
            Math.floor(((c + 0.3 + (0.4 * i) / (SAMPLES - 1)) * image.width) / columns),
          );
          const y = Math.min(
            image.height - 1,
            Math.floor(((r + 0.3 + (0.4 * j) / (SAMPLES - 1)) * image.height) / rows),
          );
          sum += image.pixels[y * image.width + x]!;
        }
      }
      cells.push(sum / (SAMPLES * SAMPLES) < 128);
    }
  }
  return cells;
}
