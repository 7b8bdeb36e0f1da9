import type { SearchConfig } from '../config';
import type { SearchBackend } from './backend';
import { createBraveBackend } from './brave';
import { createLocalSearchBackend } from './local-index';
import { createSearxngBackend } from './searxng';

/** The configured search backend, or null when none is configured (web_search is then not offered). */
export function createSearchBackend(search: SearchConfig): SearchBackend | null {
  switch (search.backend) {
    case 'local':
      return createLocalSearchBackend(search.indexDir);
    case 'searxng':
      return createSearxngBackend(search.searxngUrl);
    case 'brave':
      return createBraveBackend(search.apiKey, search.apiUrl);
    case 'none':
      return null;
  }
}
