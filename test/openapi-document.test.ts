import { ERROR_STATUS } from '../src/errors';
import { api, startTestStack, type TestStack } from './support/stack';

/** The served OpenAPI document declares every answer of every operation, generated from ERROR_STATUS. */

const typesOf = (status: number) => Object.entries(ERROR_STATUS).filter(([, own]) => own === status).map(([type]) => type);

describe('the OpenAPI document tells every answer', () => {
  let stack: TestStack;
  let doc: any;

  beforeAll(async () => {
    stack = await startTestStack({ worker: false });
    doc = (await api(stack.url, 'GET', '/openapi.json')).json;
  });
  afterAll(async () => {
    await stack.close();
  });

  const statuses = (path: string, method: string) => Object.keys(doc.paths[path][method].responses).sort();
  const response = (path: string, method: string, status: string) => doc.paths[path][method].responses[status];

  test('each error status has one schema whose type enum is that status\'s types in ERROR_STATUS', () => {
    const errorSchemas = Object.keys(doc.components.schemas).filter((name) => /^Error\d{3}$/.test(name));
    expect(errorSchemas.length).toBeGreaterThanOrEqual(10);
    for (const name of errorSchemas) {
      expect(doc.components.schemas[name].properties.error.properties.type.enum).toEqual(typesOf(Number(name.slice(5))));
    }
    for (const [path, operations] of Object.entries<any>(doc.paths)) {
      for (const [method, operation] of Object.entries<any>(operations)) {
        for (const [status, declared] of Object.entries<any>(operation.responses)) {
          if (Number(status) < 400 || status === '422') continue;
          // A readiness probe's 503 is its report, not an error (checked below).
          if (['/ready', '/readyz'].includes(path) && status === '503') continue;
          const ref: string = declared.content['application/json'].schema.$ref;
          const openai = ['/v1/chat/completions', '/v1/inference/chat/completions'].includes(path) || path.startsWith('/v1/models');
          const expected = path.startsWith('/v1/compat/scraper/') || path.startsWith('/v2/') ? `ScrapeError${status}` : openai ? `OpenAIError${status}` : `Error${status}`;
          expect([method, path, ref]).toEqual([method, path, `#/components/schemas/${expected}`]);
        }
      }
    }
  });

  test('routes declare what they really answer', () => {
    expect(statuses('/v1/fetch', 'post')).toEqual(['200', '400', '401', '402', '403', '409', '410', '413', '415', '422', '429', '502', '503', '504']);
    expect(statuses('/v1/tasks/{task_id}/artifacts/{name}', 'get')).toEqual(['200', '401', '404', '410', '422', '429']);
    expect(statuses('/v1/search', 'post')).not.toContain('403');
    expect(statuses('/v1/tasks', 'post')).toEqual(['200', '400', '401', '402', '403', '413', '415', '422', '429', '503']);
    expect(statuses('/v1/tasks/{task_id}', 'get')).toEqual(['200', '401', '404', '422', '429']);
    expect(statuses('/v1/chat/completions', 'post')).toEqual(['200', '400', '401', '402', '404', '409', '413', '415', '422', '429', '502', '503', '504']);
    expect(statuses('/v1/admin/tasks/{task_id}/complete', 'post')).toEqual(['200', '400', '401', '403', '404', '409', '413', '415', '422', '429']);
    expect(statuses('/v1/admin/domain-policy/reload', 'post')).toContain('500');
    // The console's reads (docs/console.md).
    expect(statuses('/v1/admin/tasks', 'get')).toEqual(['200', '401', '403', '422', '429']);
    expect(statuses('/v1/admin/tasks/{task_id}', 'get')).toEqual(['200', '401', '403', '404', '422', '429']);
    expect(statuses('/v1/admin/solvers', 'get')).toEqual(['200', '401', '403', '429']);
    // A solver's trust view, field by field: its chat audits per model and the sequential test on them.
    expect(response('/v1/admin/solvers/{solver_id}/trust', 'get', '200').content['application/json'].schema.$ref).toBe('#/components/schemas/SolverTrust');
    expect(Object.keys(doc.components.schemas.SolverTrust.properties)).toEqual(expect.arrayContaining(['reputation', 'chat_audits', 'chat_audit_test']));
    expect(doc.components.schemas.SolverTrust.properties.chat_audit_test.properties.decision.enum).toEqual(['continue', 'accept', 'quarantine']);
    expect(statuses('/v1/admin/events', 'get')).toEqual(['200', '401', '403', '429']);
    expect(Object.keys(response('/v1/admin/events', 'get', '200').content).sort()).toEqual(['application/json', 'text/event-stream']);
    expect(statuses('/v1/solver/attempts', 'get')).toEqual(['200', '401', '429']);
    expect(statuses('/v1/solver/connect', 'get')).toEqual(['101', '401', '404', '429']);
    expect(statuses('/v1/register', 'post')).toEqual(['200', '400', '413', '415', '422', '429']);
    expect(statuses('/health', 'get')).toEqual(['200']);
    // Readiness answers 503 with the same report as its 200, naming the part that cannot serve.
    for (const path of ['/ready', '/readyz']) {
      expect(statuses(path, 'get')).toEqual(['200', '503']);
      for (const status of ['200', '503']) expect(response(path, 'get', status).content['application/json'].schema.$ref).toBe('#/components/schemas/Readiness');
    }
    expect(doc.components.schemas.Readiness.properties.status.enum).toEqual(['ready', 'not_ready', 'draining']);
    expect(statuses('/v1/account/webhook', 'put')).toEqual(['200', '400', '401', '403', '413', '415', '422', '429']);
    expect(statuses('/v1/account/webhook', 'get')).toEqual(['200', '401', '404', '429']);
    expect(statuses('/v1/account/keys/{key_id}', 'patch')).toEqual(['200', '400', '401', '403', '404', '413', '415', '422', '429']);
    expect(response('/v1/tasks', 'post', '402').description).toContain('key_spend_limit_reached');
    // A body that does not decode as its Content-Encoding says is refused before any route runs.
    expect(response('/v1/tasks', 'post', '400').description).toBe('bad_request');
    // Firecrawl's statuses: a failed task is 500 and a timeout 408 there; no solver online stays 503.
    expect(statuses('/v1/compat/scraper/scrape', 'post')).toEqual(['200', '400', '401', '402', '403', '408', '409', '410', '413', '415', '422', '429', '500', '503']);
    expect(doc.components.schemas.ScrapeError408.properties.code.enum).toEqual(['task_timeout']);
    expect(doc.components.schemas.ScrapeError503.properties.code.enum).toContain('no_solver_available');
    expect(doc.components.schemas.ScrapeError500.properties.code.enum).not.toContain('no_solver_available');
    // OpenAI's error object on the OpenAI-compatible routes: `code` is the type, which the SDKs read.
    expect(doc.components.schemas.OpenAIError402.properties.error.properties.code.enum).toEqual(typesOf(402));
    expect(doc.components.schemas.OpenAIError402.properties.error.required).toEqual(['message', 'type', 'param', 'code']);
    // A chat's 422 is a validation error, or OpenAI's error object for no_solver_within_price.
    expect(response('/v1/chat/completions', 'post', '422').content['application/json'].schema.anyOf).toEqual([
      { $ref: '#/components/schemas/OpenAIValidationError' },
      { $ref: '#/components/schemas/OpenAIError422' },
    ]);
    expect(doc.components.schemas.OpenAIError422.properties.error.properties.code.enum).toContain('no_solver_within_price');
    expect(response('/v1/models/{model}', 'get', '404').content['application/json'].schema.$ref).toBe('#/components/schemas/OpenAIError404');
  });

  test('rate-limit headers, Retry-After, formats and the text pattern are declared', () => {
    const limited = response('/v1/balance', 'get', '429');
    expect(Object.keys(limited.headers).sort()).toEqual(['Retry-After', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'X-Request-Id']);
    expect(response('/v1/balance', 'get', '200').headers['X-RateLimit-Remaining']).toMatchObject({ required: true, schema: { type: 'integer' } });
    expect(response('/v1/balance', 'get', '401').headers['X-RateLimit-Limit']).toBeUndefined();
    // Per-address refusals (registration, the solver upgrade) carry the address's counter.
    for (const [path, method] of [['/v1/register', 'post'], ['/v1/solver/connect', 'get'], ['/v1/admin/status', 'get']] as const) {
      expect(Object.keys(response(path, method, '429').headers).filter((name) => name !== 'X-Request-Id').sort()).toEqual(['Retry-After', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset']);
    }
    expect(response('/v1/fetch', 'post', '200').headers['X-Task-Id']).toMatchObject({ required: true });
    for (const [path, method] of [['/v1/fetch', 'post'], ['/v2/scrape', 'post'], ['/v2/search', 'post']]) {
      expect(response(path, method, '503').headers['Retry-After']).toMatchObject({ schema: { type: 'integer' } });
    }
    expect(response('/v1/tasks', 'post', '503').headers['Retry-After']).toBeUndefined();
    expect(doc.components.schemas.FetchRequest.properties.url).toMatchObject({ type: 'string', format: 'uri' });
    expect(doc.components.schemas.SolverCapability.properties.model_name).toMatchObject({ type: 'string', minLength: 1, pattern: '^[^\\x00]*$' });
    expect(doc.components.schemas.CreateTaskRequest.properties.payload.additionalProperties).toEqual({ $ref: '#/components/schemas/StorableJson' });
    expect(doc.components.schemas.CreateTaskRequest.properties.max_price_points.anyOf[1].pattern).toBeDefined();
  });

  test('a known path with another method is 405 with Allow; an unknown path is 404', async () => {
    const wrong = await api(stack.url, 'DELETE', '/v1/balance');
    expect(wrong.status).toBe(405);
    expect(wrong.headers.get('allow')).toBe('GET, HEAD');
    expect(wrong.json.error.type).toBe('method_not_allowed');
    const wrongWithParam = await api(stack.url, 'PUT', '/v1/tasks/task_abc');
    expect(wrongWithParam.status).toBe(405);
    expect((await api(stack.url, 'GET', '/v1/nothing-here')).status).toBe(404);
    // The solver socket's path without its upgrade is served by no route.
    expect((await api(stack.url, 'GET', '/v1/solver/connect')).json.error.type).toBe('not_found');
  });
});
