import zlib from 'node:zlib';

/**
 * Requests no OpenAPI-driven fuzzer sends, each once answered 5xx or stored altered: numbers a double
 * cannot hold, more digits than a points column takes, nesting that overflows a recursive walk, bodies
 * in an encoding they are not, NUL bytes in paths and cursors, bytes that are not UTF-8. Each must be a
 * 4xx in the documented shape. Used by test/hostile-inputs.test.ts and the fuzz test's explicit cases.
 */

export type Who = 'client' | 'admin' | 'none';

export interface HostileCase {
  name: string;
  method: 'GET' | 'POST';
  path: string | ((ids: { accountId: string }) => string);
  who: Who;
  body?: string | Buffer | ((ids: { accountId: string }) => string | Buffer);
  headers?: Record<string, string>;
  status: number;
  /** The 422 detail's type, or the error's type, expected first. */
  type: string;
}

const digits = (count: number) => '1'.repeat(count);
export const LONG_FRACTION = `0.${digits(20_000)}`;
export const LONG_WHOLE = digits(1_001);
const nested = (depth: number) => `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
const cursorOf = (key: unknown[]) => Buffer.from(JSON.stringify(key)).toString('base64url');
const task = (extra: string) => `{"task_type":"proxy_fetch","payload":{"url":"https://example.com/"}${extra}}`;
const capabilities = (price: string) =>
  `[{"task_type":"proxy_fetch","tier":"basic","billing_type":"per_request","fulfillment_path":"http","provider_name":"p","model_name":"m","marginal_cost":"0","min_price_points":${price},"max_concurrent":1}]`;
const chat = (extra: string) => `{"model":"service/strong","messages":[{"role":"user","content":"hi"}]${extra}}`;

export const HOSTILE_CASES: HostileCase[] = [
  { name: 'a deposit of 1e400', method: 'POST', path: '/v1/admin/deposit', who: 'admin', body: ({ accountId }) => `{"account_id":"${accountId}","amount_points":1e400}`, status: 422, type: 'finite_number' },
  { name: 'a deposit with 20,000 digits after the point', method: 'POST', path: '/v1/admin/deposit', who: 'admin', body: ({ accountId }) => `{"account_id":"${accountId}","amount_points":"${LONG_FRACTION}"}`, status: 422, type: 'decimal_max_places' },
  { name: 'a deposit with 1,001 digits before the point', method: 'POST', path: '/v1/admin/deposit', who: 'admin', body: ({ accountId }) => `{"account_id":"${accountId}","amount_points":"${LONG_WHOLE}"}`, status: 422, type: 'decimal_whole_digits' },
  { name: 'max_price_points of 1e400', method: 'POST', path: '/v1/tasks', who: 'client', body: task(',"max_price_points":1e400'), status: 422, type: 'finite_number' },
  { name: 'max_price_points with 20,000 digits after the point', method: 'POST', path: '/v1/tasks', who: 'client', body: task(`,"max_price_points":"${LONG_FRACTION}"`), status: 422, type: 'decimal_max_places' },
  { name: 'a spend limit of 1e400', method: 'POST', path: '/v1/account/keys', who: 'client', body: '{"name":"k","spend_limit":{"points":1e400,"period":"day"}}', status: 422, type: 'finite_number' },
  { name: 'a spend limit with 20,000 digits after the point', method: 'POST', path: '/v1/account/keys', who: 'client', body: `{"name":"k","spend_limit":{"points":"${LONG_FRACTION}","period":"day"}}`, status: 422, type: 'decimal_max_places' },
  { name: 'a solver price of 1e400', method: 'POST', path: '/v1/solver/capabilities', who: 'client', body: capabilities('1e400'), status: 422, type: 'finite_number' },
  { name: 'min_price_points with 20,000 digits after the point', method: 'POST', path: '/v1/solver/capabilities', who: 'client', body: capabilities(`"${LONG_FRACTION}"`), status: 422, type: 'decimal_max_places' },
  { name: 'a chat completion with an extra field of 1e400', method: 'POST', path: '/v1/chat/completions', who: 'client', body: chat(',"top_k":1e400'), status: 422, type: 'finite_number' },
  { name: 'JSON objects nested 100,000 deep', method: 'POST', path: '/v1/tasks', who: 'client', body: task(`,"webhook":${nested(100_000)}`), status: 422, type: 'json_invalid' },
  { name: 'JSON arrays nested 500,000 deep', method: 'POST', path: '/v1/tasks', who: 'client', body: `${'['.repeat(500_000)}${']'.repeat(500_000)}`, status: 422, type: 'json_invalid' },
  { name: 'Content-Encoding gzip on a plain body', method: 'POST', path: '/v1/tasks', who: 'client', body: task(''), headers: { 'content-encoding': 'gzip' }, status: 400, type: 'bad_request' },
  { name: 'Content-Encoding deflate on a plain body', method: 'POST', path: '/v1/tasks', who: 'client', body: task(''), headers: { 'content-encoding': 'deflate' }, status: 400, type: 'bad_request' },
  { name: 'a gzip body cut short', method: 'POST', path: '/v1/tasks', who: 'client', body: zlib.gzipSync(task('')).subarray(0, 20), headers: { 'content-encoding': 'gzip' }, status: 400, type: 'bad_request' },
  { name: 'a Content-Encoding the server does not decode', method: 'POST', path: '/v1/tasks', who: 'client', body: task(''), headers: { 'content-encoding': 'compress' }, status: 415, type: 'unsupported_media_type' },
  { name: 'a body that is not UTF-8', method: 'POST', path: '/v1/search', who: 'client', body: Buffer.concat([Buffer.from('{"query":"caf'), Buffer.from([0xe9]), Buffer.from('"}')]), status: 422, type: 'string_unicode' },
  { name: 'a cursor with a month 13', method: 'GET', path: `/v1/tasks?cursor=${cursorOf(['2026-13-45T00:00:00.000000Z', 'task_x'])}`, who: 'client', status: 422, type: 'value_error' },
  { name: 'a cursor with year 0', method: 'GET', path: `/v1/tasks?cursor=${cursorOf(['0000-01-01T00:00:00.000000Z', 'task_x'])}`, who: 'client', status: 422, type: 'value_error' },
  { name: 'a cursor with a time that is no time', method: 'GET', path: `/v1/tasks?cursor=${cursorOf(['yesterday', 'task_x'])}`, who: 'client', status: 422, type: 'value_error' },
  { name: 'a cursor holding a NUL', method: 'GET', path: `/v1/tasks?cursor=${cursorOf(['2026-01-01T00:00:00.000000Z', 'task_\u0000'])}`, who: 'client', status: 422, type: 'value_error' },
];

export interface HostileAnswer {
  status: number;
  text: string;
  json: any;
  contentType: string;
}

/** Sends one case as raw bytes (no client-side re-encoding), with the credentials it names. */
export async function sendHostile(base: string, hostile: HostileCase, ids: { accountId: string; apiKey: string; adminKey: string }): Promise<HostileAnswer> {
  const credentials: Record<Who, Record<string, string>> = {
    client: { Authorization: `Bearer ${ids.apiKey}` },
    admin: { 'X-Admin-API-Key': ids.adminKey },
    none: {},
  };
  const body = typeof hostile.body === 'function' ? hostile.body(ids) : hostile.body;
  const path = typeof hostile.path === 'function' ? hostile.path(ids) : hostile.path;
  const response = await fetch(`${base}${path}`, {
    method: hostile.method,
    headers: { ...(body !== undefined && { 'content-type': 'application/json' }), ...credentials[hostile.who], ...hostile.headers },
    body,
  });
  const text = await response.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.status, text, json, contentType: response.headers.get('content-type') ?? '' };
}

/** The type an answer names: the first 422 detail's, or the error body's. */
export function answeredType(answer: HostileAnswer): string | undefined {
  if (answer.contentType.startsWith('text/html')) return 'html';
  return answer.json?.detail?.[0]?.type ?? answer.json?.error?.type;
}
