import http from 'node:http';
import { honestAnswer } from '../test/support/chat-answers';

/**
 * `npm run toy-model [port]`: a toy OpenAI-compatible model server on 127.0.0.1 (port 8001 unless given),
 * for trying chat completions on one machine without a model (README, "Try it"). It is the stand-in the
 * tests use: it multiplies two numbers it is asked about, repeats a quoted word in capitals and calls an
 * offered function with the values the prompt gives; anything else gets a greeting. It streams (SSE) or
 * answers in one JSON body, as the request asks. Nothing here is a model: never list it as one.
 */

const DEFAULT_PORT = 8001;
const MODEL = 'gpt-4o';

function completion(body: Record<string, unknown>, res: http.ServerResponse) {
  const answer = honestAnswer(body);
  const created = Math.floor(Date.now() / 1000);
  const base = { id: `chatcmpl-toy-${created}`, created, model: typeof body.model === 'string' ? body.model : MODEL };
  const toolCall = answer.deltas.some((delta) => 'tool_calls' in delta);
  const finish_reason = toolCall ? 'tool_calls' : 'stop';
  if (body.stream === true) {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    const send = (chunk: unknown) => res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', ...(chunk as object) })}\n\n`);
    send({ choices: [{ index: 0, delta: { role: 'assistant' }, finish_reason: null }] });
    for (const delta of answer.deltas) send({ choices: [{ index: 0, delta, finish_reason: null }] });
    send({ choices: [{ index: 0, delta: {}, finish_reason }] });
    send({ choices: [], usage: answer.usage });
    res.end('data: [DONE]\n\n');
    return;
  }
  const content = answer.deltas.map((delta) => (typeof delta.content === 'string' ? delta.content : '')).join('');
  const arguments_ = answer.deltas.flatMap((delta) => (delta.tool_calls as { function: { name?: string; arguments: string } }[] | undefined) ?? []);
  const message = toolCall
    ? { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: arguments_[0]!.function.name, arguments: arguments_.map((call) => call.function.arguments).join('') } }] }
    : { role: 'assistant', content };
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ ...base, object: 'chat.completion', choices: [{ index: 0, message, finish_reason }], usage: answer.usage }));
}

const server = http.createServer((req, res) => {
  let raw = '';
  req.on('data', (part) => (raw += part));
  req.on('end', () => {
    if (req.method === 'GET' && req.url === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: MODEL, object: 'model', created: 0, owned_by: 'toy' }] }));
      return;
    }
    if (req.method !== 'POST' || req.url !== '/v1/chat/completions') {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { type: 'not_found', message: 'The toy model answers POST /v1/chat/completions and GET /v1/models.' } }));
      return;
    }
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(raw) as Record<string, unknown>;
      if (!Array.isArray(body.messages)) throw new Error('messages is not an array');
    } catch (error) {
      res.writeHead(400, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { type: 'invalid_request_error', message: `The body is not a chat completion request: ${(error as Error).message}` } }));
      return;
    }
    completion(body, res);
  });
});

const port = Number(process.argv[2] ?? DEFAULT_PORT);
server.listen(port, '127.0.0.1', () => {
  process.stdout.write(`Toy model (not a model: canned answers) at http://127.0.0.1:${port}/v1\n`);
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => server.close(() => process.exit(0)));
