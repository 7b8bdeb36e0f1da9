import { createChatCompletionHandler } from '../../src/solver/handlers/chat-completion';
import { ChatResult } from '../../src/schemas/frames';
import { SolverError } from '../../src/solver/errors';
import { startFakeUpstream, streamChunks, type FakeUpstream } from './helpers/fake-upstream';

const base = { id: 'chatcmpl-1', object: 'chat.completion.chunk', created: 1, model: 'upstream-model-2025' };

const TOOL_CALL_STREAM = [
  { ...base, choices: [{ index: 0, delta: { role: 'assistant', content: null, tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '' } }] }, finish_reason: null }] },
  { ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }, finish_reason: null }] },
  { ...base, choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }, finish_reason: null }] },
  { ...base, choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] },
  { ...base, choices: [], usage: { prompt_tokens: 42, completion_tokens: 9, total_tokens: 51 } },
];

const TEXT_STREAM = [
  { ...base, choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] },
  { ...base, choices: [{ index: 0, delta: { content: 'Hello' }, finish_reason: null }] },
  { ...base, choices: [{ index: 0, delta: { content: ', world' }, finish_reason: null }] },
  { ...base, choices: [{ index: 0, delta: {}, finish_reason: 'stop' }], usage: null },
  { ...base, choices: [], usage: { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 } },
];

let upstream: FakeUpstream;
let nextScript: (body: Record<string, unknown>, res: import('node:http').ServerResponse) => void;

beforeAll(async () => {
  upstream = await startFakeUpstream((body, res) => nextScript(body, res));
});
afterAll(() => upstream.close());
beforeEach(() => {
  upstream.requests.length = 0;
});

const handler = () => createChatCompletionHandler({ upstreamUrl: upstream.baseUrl, apiKey: 'upstream-secret', models: ['upstream-model', 'other-model'] });

test('streams tool-call deltas as they come and returns usage and finish reason', async () => {
  nextScript = (_body, res) => streamChunks(res, TOOL_CALL_STREAM, { splitWrites: true });
  const deltas: unknown[] = [];
  const result = await handler()(
    {
      model: 'service/strong',
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }],
      tool_choice: 'auto',
      parallel_tool_calls: false,
      temperature: 0.2,
      max_tokens: 100,
      seed: 7,
    },
    { signal: new AbortController().signal, emitChunk: (delta) => deltas.push(delta) },
  );
  expect(ChatResult.parse(result)).toEqual({ finish_reason: 'tool_calls', usage: { prompt_tokens: 42, completion_tokens: 9, total_tokens: 51 }, model: 'upstream-model-2025' });
  expect(deltas).toEqual(TOOL_CALL_STREAM.slice(0, 3).map((chunk) => chunk.choices[0]!.delta));
  const request = upstream.requests[0]!;
  expect(request.headers.authorization).toBe('Bearer upstream-secret');
  expect(request.body).toEqual({
    model: 'upstream-model',
    messages: [{ role: 'user', content: 'Weather in Paris?' }],
    tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }],
    tool_choice: 'auto',
    parallel_tool_calls: false,
    temperature: 0.2,
    max_tokens: 100,
    seed: 7,
    stream: true,
    stream_options: { include_usage: true },
  });
});

test('streams text deltas and uses a requested model this solver serves', async () => {
  nextScript = (_body, res) => streamChunks(res, TEXT_STREAM);
  const deltas: Array<Record<string, unknown>> = [];
  const result = await handler()(
    { model: 'other-model', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: false } },
    { signal: new AbortController().signal, emitChunk: (delta) => deltas.push(delta) },
  );
  expect(deltas.map((delta) => delta.content).join('')).toBe('Hello, world');
  expect(result).toMatchObject({ finish_reason: 'stop', usage: { total_tokens: 8 } });
  expect(upstream.requests[0]!.body).toMatchObject({ model: 'other-model', stream: true, stream_options: { include_usage: true } });
});

test('estimates usage when the upstream does not report it', async () => {
  nextScript = (_body, res) => streamChunks(res, TEXT_STREAM.slice(0, 4));
  const result = await handler()({ messages: [{ role: 'user', content: 'hi' }] }, { signal: new AbortController().signal, emitChunk: () => undefined });
  expect(ChatResult.parse(result).usage).toMatchObject({ estimated: true });
  expect((result.usage as { completion_tokens: number }).completion_tokens).toBeGreaterThan(0);
});

test('an estimate counts the answer\'s characters, not the JSON of its deltas, and passes reasoning tokens on', async () => {
  // 27 characters of tool name and arguments in three deltas: 7 tokens, not the 69 their JSON would make.
  nextScript = (_body, res) => streamChunks(res, TOOL_CALL_STREAM.slice(0, 4));
  const estimated = await handler()({ messages: [{ role: 'user', content: 'hi' }] }, { signal: new AbortController().signal, emitChunk: () => undefined });
  expect(estimated.usage).toMatchObject({ completion_tokens: 7, estimated: true });
  const reasoning = { ...base, choices: [], usage: { prompt_tokens: 5, completion_tokens: 300, total_tokens: 305, completion_tokens_details: { reasoning_tokens: 297 } } };
  nextScript = (_body, res) => streamChunks(res, [...TEXT_STREAM.slice(0, 4), reasoning]);
  const reported = await handler()({ messages: [{ role: 'user', content: 'hi' }] }, { signal: new AbortController().signal, emitChunk: () => undefined });
  expect(reported.usage).toEqual({ prompt_tokens: 5, completion_tokens: 300, total_tokens: 305, completion_tokens_details: { reasoning_tokens: 297 } });
});

test('an upstream 400 is not retryable, a 503 is', async () => {
  nextScript = (_body, res) => res.writeHead(400, { 'content-type': 'application/json' }).end('{"error":{"message":"context too long"}}');
  await expect(handler()({ messages: [{ role: 'user', content: 'x' }] }, { signal: new AbortController().signal })).rejects.toMatchObject({
    type: 'upstream_rejected',
    retryable: false,
  });
  nextScript = (_body, res) => res.writeHead(503).end('busy');
  await expect(handler()({ messages: [{ role: 'user', content: 'x' }] }, { signal: new AbortController().signal })).rejects.toMatchObject({
    type: 'upstream_error',
    retryable: true,
  });
});

test('a stream that fails after deltas were sent is not retried elsewhere', async () => {
  nextScript = (_body, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(`data: ${JSON.stringify(TEXT_STREAM[1])}\n\n`);
    setTimeout(() => res.destroy(), 50);
  };
  const error = await handler()({ messages: [{ role: 'user', content: 'x' }] }, { signal: new AbortController().signal, emitChunk: () => undefined }).catch((e) => e);
  expect(error).toBeInstanceOf(SolverError);
  expect(error.retryable).toBe(false);
});

test('a missing messages list is an invalid payload', async () => {
  await expect(handler()({ model: 'x' }, { signal: new AbortController().signal })).rejects.toMatchObject({ type: 'invalid_payload' });
});

test('aborting stops the upstream stream', async () => {
  nextScript = (_body, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(`data: ${JSON.stringify(TEXT_STREAM[1])}\n\n`);
  };
  const controller = new AbortController();
  const pending = handler()({ messages: [{ role: 'user', content: 'x' }] }, { signal: controller.signal, emitChunk: () => controller.abort(new SolverError('cancelled', 'test')) });
  await expect(pending).rejects.toMatchObject({ type: 'cancelled' });
});
