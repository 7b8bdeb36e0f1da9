import { RESULT_SCHEMAS } from '../../src/schemas/frames';
import { solverJsonSchemas } from '../../src/schemas/json-schema';
// The console's own checker (a browser module, plain JavaScript), run here against the same document it fetches.
// @ts-ignore: no types for the console's plain modules
import { validate } from '../../src/console/schema.js';

/**
 * The manual-completion form checks a result before it is sent; what it lets through, the API must
 * accept, and what the API refuses, the form must stop. Both judge the same schemas: zod on the
 * server, the JSON Schema generated from it in the page.
 */

const root = solverJsonSchemas() as { results: Record<string, unknown> };
const check = (taskType: keyof typeof RESULT_SCHEMAS, value: unknown) => ({
  page: (validate(root.results[taskType], value, root) as unknown[]).length === 0,
  server: RESULT_SCHEMAS[taskType].safeParse(value).success,
});

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==';

const cases: [keyof typeof RESULT_SCHEMAS, unknown][] = [
  ['proxy_fetch', { url: 'https://a.example', final_url: 'https://a.example', status_code: 200, content_type: 'markdown', content: '# A', title: null }],
  ['proxy_fetch', { url: 'https://a.example', final_url: 'https://a.example', status_code: 200, content_type: 'pdf', content: '' }],
  ['proxy_fetch', { url: 'https://a.example', final_url: 'https://a.example', status_code: 200.5, content_type: 'html', content: '' }],
  ['proxy_fetch', { content: 'only the text' }],
  ['web_search', { results: [{ title: 'T', url: 'https://a.example', snippet: 'S' }] }],
  ['web_search', { results: [{ title: 'T', url: 'https://a.example' }] }],
  ['web_search', { results: 'none' }],
  ['screenshot', { mime_type: 'image/png', image_base64: PNG, width: 1, height: 1 }],
  ['screenshot', { mime_type: 'image/jpeg', image_base64: PNG, width: 1, height: 1 }],
  ['screenshot', { mime_type: 'image/png', image_base64: '', width: 1, height: 1 }],
  ['screenshot', { mime_type: 'image/png', image_base64: PNG, width: 0, height: 1 }],
  ['page_snapshot', { url: 'https://a.example', snapshot: '- heading "A"', snapshot_format: 'markdown' }],
  ['page_snapshot', { url: 'https://a.example', snapshot: { role: 'document' }, snapshot_format: 'markdown' }],
  ['page_snapshot', { url: 'https://a.example', snapshot: 42, snapshot_format: 'markdown' }],
  ['chat_completion', { finish_reason: 'stop', usage: { prompt_tokens: 1, completion_tokens: 2 } }],
  ['chat_completion', { finish_reason: 'stop', usage: { prompt_tokens: -1, completion_tokens: 2 } }],
  ['chat_completion', { finish_reason: 'stop' }],
];

test.each(cases)('%s %j: the form and the API agree', (taskType, value) => {
  const { page, server } = check(taskType, value);
  expect(page).toBe(server);
});

test('the cases hold both verdicts for every task type', () => {
  for (const taskType of Object.keys(RESULT_SCHEMAS) as (keyof typeof RESULT_SCHEMAS)[]) {
    const verdicts = cases.filter(([type]) => type === taskType).map(([, value]) => check(taskType, value).server);
    expect([taskType, verdicts.includes(true), verdicts.includes(false)]).toEqual([taskType, true, true]);
  }
});
