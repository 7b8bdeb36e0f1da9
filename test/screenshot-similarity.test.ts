import fs from 'node:fs';
import { compareResults, SIMILARITY_MEASURES } from '../src/trust/similarity';
import { CHROMIUM, HONEST_VARIATIONS, renderAll } from './support/screenshot-renders';

/**
 * The calibration of the screenshot measure (docs/trust.md, "Verified client tasks"): pages of a local
 * site rendered by Chromium as the verifier renders them, compared with the same pages rendered as honest
 * solvers differ (fonts, font rendering, device scale, viewport width, a caret or animation frame, a lossy
 * encoder) and with what cheats answer. Honest renders stay a margin above the threshold; the cheats it
 * proves wrong stay a margin below; those it does not are logged (docs/trust.md, what it does not catch).
 */

jest.setTimeout(900_000);

// The least distance from the threshold either side: enough for pages and fonts not sampled here.
const MARGIN = 0.1;
const { threshold } = SIMILARITY_MEASURES.screenshot;
const similarity = (verifier: Buffer, other: Buffer) =>
  compareResults('screenshot', { image_base64: verifier.toString('base64') }, { image_base64: other.toString('base64') }).similarity!;

(fs.existsSync(CHROMIUM) ? test : test.skip)('honest renders agree with the verifier by a margin; drawn, blank and unrelated images disagree by one', async () => {
  const { pages, honest, cheats } = await renderAll();
  const honestLeast = HONEST_VARIATIONS.slice(1).map((variation, v) => ({ variation: variation.name, ...least(pages.map((page, p) => ({ page: page.name, value: similarity(honest[p]![0]!, honest[p]![v + 1]!) }))) }));
  const cheatMost = Object.entries(cheats).map(([cheat, images]) => ({ cheat, ...most(pages.map((page, p) => ({ page: page.name, value: similarity(honest[p]![0]!, images[p]!) }))) }));
  console.log(`threshold ${threshold}\n${honestLeast.map((row) => `honest, ${row.variation}: min ${row.value} (${row.page})`).join('\n')}\n${cheatMost.map((row) => `cheat, ${row.cheat}: max ${row.value} (${row.page})`).join('\n')}`);
  for (const row of honestLeast) expect(row.value).toBeGreaterThanOrEqual(threshold + MARGIN);
  for (const row of cheatMost.filter(({ cheat }) => ['simple page drawing', 'blank', 'unrelated page'].includes(cheat))) expect(row.value).toBeLessThanOrEqual(threshold - MARGIN);
});

const least = (rows: { page: string; value: number }[]) => rows.reduce((low, row) => (row.value < low.value ? row : low));
const most = (rows: { page: string; value: number }[]) => rows.reduce((high, row) => (row.value > high.value ? row : high));
