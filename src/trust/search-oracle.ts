import crypto from 'node:crypto';
import type { Config } from '../config';
import type { SearchBackend } from '../solver/search/backend';
import { createLocalSearchBackend, type IndexedPage } from '../solver/search/local-index';
import { createSearxngBackend } from '../solver/search/searxng';
import { SearchBody } from '../schemas/requests';

/**
 * The search oracle of web_search canaries (docs/trust.md, "Search canaries"): a backend the service
 * queries itself (the bundled solver's own index, or a SearXNG instance), whose answer to a fresh query
 * a solver's answer to the same query is compared with. Queries are drawn from the bundled index's
 * pages: two of the words that set a page apart, so that different queries find different pages.
 */

export interface SearchCanary {
  /** The payload a client's request for this query becomes. */
  payload: { query: string; count: number };
  /** The oracle's results, best first. */
  results: { title: string; url: string }[];
}

export interface SearchOracle {
  readonly name: string;
  /** A fresh query and the oracle's answer to it; null when none answered anything within a few draws. */
  drawCanary(): Promise<SearchCanary | null>;
}

// A query the oracle answers with nothing tests nothing; a few draws find one that it answers.
const DRAWS = 5;
// The oracle is asked inside the local activity that creates the canary (10 s to close).
const ORACLE_TIMEOUT_MS = 5_000;
const QUERY_WORDS = 2;
const WORD = /^\p{L}{5,14}$/u;

export function createSearchOracle(oracle: NonNullable<Config['canarySearchOracle']>): SearchOracle {
  const index = createLocalSearchBackend(oracle.indexDir);
  const backend: SearchBackend = oracle.kind === 'bundled' ? index : createSearxngBackend(oracle.url);
  let vocabulary: Promise<string[][]> | undefined;
  return {
    name: oracle.kind === 'bundled' ? 'bundled' : oracle.url,
    async drawCanary() {
      vocabulary ??= index.pages().then(distinctiveWords);
      const pages = (await vocabulary).filter((words) => words.length >= QUERY_WORDS);
      if (pages.length === 0) return null;
      for (let draw = 0; draw < DRAWS; draw++) {
        const words = pages[crypto.randomInt(pages.length)]!;
        const chosen = new Set<string>();
        while (chosen.size < QUERY_WORDS) chosen.add(words[crypto.randomInt(words.length)]!);
        const payload = SearchBody.parse({ query: [...chosen].join(' ') });
        const hits = await backend.search(payload.query, payload.count, AbortSignal.timeout(ORACLE_TIMEOUT_MS));
        if (hits.length > 0) return { payload, results: hits.map(({ title, url }) => ({ title, url })) };
      }
      return null;
    },
  };
}

/** Per page, its words (letters only, 5 to 14 of them) found in at most half the pages: those that set it apart. */
function distinctiveWords(pages: IndexedPage[]): string[][] {
  const perPage = pages.map(
    (page) =>
      new Set(
        `${page.title} ${page.text}`
          .toLowerCase()
          .split(/[^\p{L}]+/u)
          .filter((word) => WORD.test(word)),
      ),
  );
  const pagesWith = new Map<string, number>();
  for (const words of perPage) for (const word of words) pagesWith.set(word, (pagesWith.get(word) ?? 0) + 1);
  return perPage.map((words) => [...words].filter((word) => pagesWith.get(word)! <= Math.max(1, pages.length / 2)));
}
