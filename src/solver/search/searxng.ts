import { z } from 'zod';
import { SolverError } from '../errors';
import { plainText, type SearchBackend } from './backend';
import { getJson } from './http-json';

const SearxngResponse = z.object({
  results: z.array(
    z.object({ title: z.string().nullish(), url: z.string(), content: z.string().nullish() }).passthrough(),
  ),
});

/** A SearXNG instance's JSON API; the instance must list `json` in `search.formats` (settings.yml). */
export function createSearxngBackend(baseUrl: string): SearchBackend {
  return {
    name: 'searxng',
    async search(query, count, signal) {
      const url = `${baseUrl}/search?${new URLSearchParams({ q: query, format: 'json' })}`;
      const parsed = SearxngResponse.safeParse(await getJson(url, {}, signal, 'SearXNG'));
      if (!parsed.success) throw new SolverError('upstream_error', 'SearXNG answered without a results list');
      return parsed.data.results.slice(0, count).map((hit) => ({
        title: plainText(hit.title) || hit.url,
        url: hit.url,
        snippet: plainText(hit.content),
      }));
    },
  };
}
