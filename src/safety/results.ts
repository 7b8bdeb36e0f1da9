import { mergeScans, scanText, type ScanResult } from './scanner';

/**
 * Scans the text a web-task result carries (fetched content, titles, search snippets, snapshot text)
 * wherever it sits in the result, so a new result field is covered without a list to keep in sync.
 * Binary payloads are skipped: base64 image data is not text and would only produce noise.
 */

const NOT_TEXT = new Set(['image_base64', 'mime_type', 'safety']);
// Snapshots are trees; anything deeper than this is not a page a person or a model reads.
const MAX_DEPTH = 32;

export function scanTaskResult(result: Record<string, unknown>): ScanResult {
  const scans: ScanResult[] = [];
  const walk = (value: unknown, location: string, depth: number) => {
    if (depth > MAX_DEPTH) return;
    if (typeof value === 'string') scans.push(scanText(value, location));
    else if (Array.isArray(value)) value.forEach((item, index) => walk(item, `${location}[${index}]`, depth + 1));
    else if (value && typeof value === 'object') {
      for (const [key, item] of Object.entries(value)) {
        if (!NOT_TEXT.has(key)) walk(item, location ? `${location}.${key}` : key, depth + 1);
      }
    }
  };
  walk(result, '', 0);
  return mergeScans(scans);
}

/** The result as stored for an account that has prompt_safety_scan on: the same result plus its verdict. */
export function withSafetyVerdict(result: Record<string, unknown>): Record<string, unknown> {
  return { ...result, safety: scanTaskResult(result) };
}
