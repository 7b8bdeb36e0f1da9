import { SearchBody } from '../../schemas/requests';
import type { SearchResultData } from '../../schemas/frames';
import { withTimeLimit } from '../abort';
import { toSolverError } from '../errors';
import type { SearchBackend } from '../search/backend';
import { parsePayload, type TaskHandler } from './types';

export type WebSearchOptions = { backend: SearchBackend; timeoutMs: number };

export function createWebSearchHandler(options: WebSearchOptions): TaskHandler {
  return async (payload, { signal }) => {
    const request = parsePayload(SearchBody, payload);
    const limit = withTimeLimit(
      signal,
      options.timeoutMs,
      `the ${options.backend.name} search took longer than ${options.timeoutMs} ms`,
    );
    try {
      const results = await options.backend.search(request.query, request.count, limit.signal);
      return { results: results.slice(0, request.count) } satisfies SearchResultData;
    } catch (error) {
      throw toSolverError(error, limit.signal);
    } finally {
      limit.dispose();
    }
  };
}
