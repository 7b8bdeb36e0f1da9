import { z } from 'zod';
import { SolverError } from '../errors';
import { plainText, type SearchBackend } from './backend';
import { getJson } from './http-json';

const BraveResponse = z.object({
  web: z
    .object({
      results: z.array(
        z.object({ title: z.string().nullish(), url: z.string(), description: z.string().nullish() }).passthrough(),
      ),
    })
    .passthrough()
    .optional(),
});

/** Brave Search API (web results), authenticated with an X-Subscription-Token. */
export function createBraveBackend(apiKey: string, apiUrl: string): SearchBackend {
  return {
    name: 'brave',
    async search(query, count, signal) {
      const url = `${apiUrl}?${new URLSearchParams({ q: query, count: String(count) })}`;
      const body = await getJson(url, { 'x-subscription-token': apiKey }, signal, 'Brave Search');
      const parsed = BraveResponse.safeParse(body);
      if (!parsed.success) throw new SolverError('upstream_error', 'Brave Search answered in an unexpected shape');
      return (parsed.data.web?.results ?? []).slice(0, count).map((hit) => ({
        title: plainText(hit.title) || hit.url,
        url: hit.url,
        snippet: plainText(hit.description),
      }));
    },
  };
}
