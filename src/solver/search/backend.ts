import type { SearchResultData } from '../../schemas/frames';

export type SearchHit = SearchResultData['results'][number];

/** One search provider. Implementations return at most `count` hits, best first. */
export interface SearchBackend {
  readonly name: string;
  search(query: string, count: number, signal: AbortSignal): Promise<SearchHit[]>;
  /** Prepares ahead of the first search (loading an index); optional. */
  warm?(): Promise<unknown>;
}

/** Search APIs return HTML fragments (<strong> around matches) and entities in titles and snippets. */
export function plainText(fragment: string | undefined | null): string {
  if (!fragment) return '';
  return fragment
    .replace(/<[^>]*>/g, '')
    .replace(/&(#x[0-9a-f]+|#\d+|amp|lt|gt|quot|apos|nbsp|#39);/gi, (entity, code: string) => {
      const lower = code.toLowerCase();
      if (lower.startsWith('#x')) return String.fromCodePoint(parseInt(lower.slice(2), 16));
      if (lower.startsWith('#')) return String.fromCodePoint(parseInt(lower.slice(1), 10));
      return { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'", nbsp: ' ' }[lower] ?? entity;
    })
    .replace(/\s+/g, ' ')
    .trim();
}
