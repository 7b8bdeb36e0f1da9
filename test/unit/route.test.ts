import type { AddressInfo } from 'node:net';
import express, { type RequestHandler } from 'express';
import { declaredMethods, expressPathOf, mount, route, type Auth } from '../../src/http/route';
import { z } from '../../src/schemas/zod';

/** A route's one declaration mounts it with its authentication, checks and validation, in that order. */

const step = (name: string): RequestHandler => (_req, res, next) => {
  (res.locals.steps ??= []).push(name);
  next();
};
const authentication: Record<Auth, RequestHandler[]> = { none: [], bearer: [step('auth')], admin: [step('admin')], metrics: [step('metrics')] };

const routes = [
  route({
    method: 'post',
    path: '/things/{thing_id}',
    summary: 'A thing',
    tag: 'test',
    auth: 'bearer',
    params: z.object({ thing_id: z.string().regex(/^t_\d+$/) }),
    body: z.object({ name: z.string() }),
    use: [step('check')],
    handler: (req, res) => {
      res.json({ steps: [...res.locals.steps, 'handler'], thing: req.params.thing_id, name: req.body.name });
    },
  }),
  route({ method: 'get', path: '/things/socket', summary: 'Answered elsewhere', tag: 'test', auth: 'bearer' }),
];

async function serve() {
  const app = express();
  app.use(express.json());
  app.use(mount(routes, authentication));
  app.use(((error, _req, res, _next) => res.status(422).json({ steps: res.locals.steps, name: error.constructor.name })) as express.ErrorRequestHandler);
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, close: () => new Promise((resolve) => server.close(resolve)) };
}

test('mount runs authentication, the route\'s checks, params, body, then the handler', async () => {
  const server = await serve();
  try {
    const post = (path: string, body: unknown) => fetch(`${server.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }).then((r) => r.json());
    expect(await post('/things/t_1', { name: 'a' })).toEqual({ steps: ['auth', 'check', 'handler'], thing: 't_1', name: 'a' });
    // The params are refused before the body is looked at.
    expect(await post('/things/x', { name: 1 })).toEqual({ steps: ['auth', 'check'], name: 'RequestValidationError' });
    // A route without a handler is documented only: nothing of the app answers it.
    expect((await fetch(`${server.url}/things/socket`)).status).toBe(404);
  } finally {
    await server.close();
  }
});

test('paths are OpenAPI templates, mounted as Express patterns', () => {
  expect(expressPathOf('/v1/tasks/{task_id}/webhooks/{event}/resend')).toBe('/v1/tasks/:task_id/webhooks/:event/resend');
  expect(expressPathOf('/v2/crawl/active')).toBe('/v2/crawl/active');
});

test('a path\'s declared methods prefer the concrete path to a template', () => {
  const declared = [
    route({ method: 'get', path: '/v2/crawl/active', summary: '', tag: 'test', auth: 'bearer' }),
    route({ method: 'delete', path: '/v2/crawl/{id}', summary: '', tag: 'test', auth: 'bearer' }),
    route({ method: 'get', path: '/v2/crawl/{id}', summary: '', tag: 'test', auth: 'bearer' }),
  ];
  expect(declaredMethods(declared, '/v2/crawl/active')).toEqual(['GET']);
  expect(declaredMethods(declared, '/v2/crawl/job_1')).toEqual(['DELETE', 'GET']);
  expect(declaredMethods(declared, '/v2/elsewhere')).toEqual([]);
});
