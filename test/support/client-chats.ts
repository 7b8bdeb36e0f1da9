import crypto from 'node:crypto';

/**
 * Chat requests as clients of the OpenAI SDKs send them, for tests that compare audits with clients'
 * chats: the model, messages (a system or developer prompt at times, earlier exchanges, tool results),
 * sampling parameters at the SDKs' usual values or absent, stream with stream_options at times, an end
 * user's id, stop sequences, tools with tool_choice, a response format. Contents are arbitrary text:
 * only the shape is compared.
 */

const rand = () => crypto.randomInt(1_000_000) / 1_000_000;
const pick = <T>(items: readonly T[]): T => items[crypto.randomInt(items.length)]!;
const text = (words: number) => Array.from({ length: words }, () => pick(['please', 'summarise', 'the', 'report', 'what', 'is', 'our', 'plan', 'for', 'next', 'week', 'and', 'why'])).join(' ');

const tool = (i: number) => ({
  type: 'function',
  function: { name: `client_fn_${i}`, description: text(6), parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } },
});

export function clientChatBody(): Record<string, unknown> {
  const body: Record<string, unknown> = { model: pick(['strong', 'service/strong']) };
  const messages: { role: string; content: string }[] = [];
  if (rand() < 0.45) messages.push({ role: rand() < 0.1 ? 'developer' : 'system', content: text(12) });
  const earlier = rand() < 0.3 ? crypto.randomInt(1, 6) : 0;
  for (let i = 0; i < earlier; i++) messages.push({ role: 'user', content: text(10) }, { role: 'assistant', content: text(20) });
  messages.push({ role: 'user', content: text(crypto.randomInt(3, 400)) });
  body.messages = messages;
  const t = rand();
  if (t < 0.12) body.temperature = 0;
  else if (t < 0.55) body.temperature = pick([0.2, 0.3, 0.5, 0.7, 0.7, 0.8, 1, 1.2]);
  if (rand() < 0.1) body.top_p = pick([0.9, 0.95, 1]);
  if (rand() < 0.25) body.max_tokens = pick([300, 500, 800, 1024, 2000, 4096]);
  else if (rand() < 0.08) body.max_completion_tokens = pick([1024, 4096, 8192]);
  if (rand() < 0.05) body.frequency_penalty = pick([0.2, 0.5]);
  if (rand() < 0.05) body.seed = crypto.randomInt(1, 100_000);
  if (rand() < 0.06) body.user = `user-${crypto.randomBytes(6).toString('hex')}`;
  if (rand() < 0.04) body.stop = ['\n\n###'];
  const tools = rand() < 0.15 ? crypto.randomInt(1, 6) : 0;
  if (tools) {
    body.tools = Array.from({ length: tools }, (_, i) => tool(i));
    const choice = rand();
    if (choice < 0.3) body.tool_choice = 'auto';
    else if (choice < 0.4) body.tool_choice = 'required';
    else if (choice < 0.5) body.tool_choice = { type: 'function', function: { name: 'client_fn_0' } };
    if (rand() < 0.2) body.parallel_tool_calls = false;
  } else if (rand() < 0.08) {
    body.response_format = rand() < 0.5 ? { type: 'json_object' } : { type: 'json_schema', json_schema: { name: 'answer', strict: true, schema: { type: 'object', properties: { a: { type: 'string' } }, required: ['a'], additionalProperties: false } } };
  }
  if (rand() < 0.5) {
    body.stream = true;
    if (rand() < 0.6) body.stream_options = { include_usage: true };
  }
  return body;
}
