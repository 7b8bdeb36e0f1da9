/**
 * What a model would answer to a chat request, worked out from its text as an honest model would: the
 * product of `a * b` (or `a × b`, `a times b`, `a multiplied by b`, `a and b`, `a by b`), a quoted word in capitals, or a call of the one offered function
 * with the values the prompt gives for its fields. Scripted strong-tier solvers answer with it.
 */

export interface ChatAnswer {
  /** The deltas to stream, in order. */
  deltas: Record<string, unknown>[];
  usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
}

interface Tool {
  function: { name: string; parameters: { properties: Record<string, { type: string }> } };
}

const tokensFor = (chars: number) => Math.max(1, Math.ceil(chars / 4));

export function honestAnswer(payload: Record<string, any>): ChatAnswer {
  const messages = payload.messages as { content: string }[];
  const prompt = messages.map((message) => message.content).join('\n');
  const promptChars = prompt.length + (payload.tools ? JSON.stringify(payload.tools).length : 0);
  const usage = (completionChars: number) => {
    const prompt_tokens = tokensFor(promptChars);
    const completion_tokens = tokensFor(completionChars);
    return { prompt_tokens, completion_tokens, total_tokens: prompt_tokens + completion_tokens };
  };
  const tools = (payload.tools ?? []) as Tool[];
  if (tools.length > 0) {
    const fn = tools[0]!.function;
    const args: Record<string, unknown> = {};
    for (const [field, property] of Object.entries(fn.parameters.properties)) {
      const found = property.type === 'string' ? prompt.match(new RegExp(`${field}\\s+"([^"]*)"`)) : prompt.match(new RegExp(`${field}\\s+(-?\\d+)`));
      if (found) args[field] = property.type === 'string' ? found[1] : Number(found[1]);
    }
    const text = JSON.stringify(args);
    // Arguments arrive in pieces, as upstreams stream them.
    const half = Math.floor(text.length / 2);
    return {
      deltas: [
        { tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: fn.name, arguments: text.slice(0, half) } }] },
        { tool_calls: [{ index: 0, function: { arguments: text.slice(half) } }] },
      ],
      usage: usage(fn.name.length + text.length),
    };
  }
  const product = prompt.match(/(\d+)\s*(?:[*×]|times|multiplied by|and|by)\s*(\d+)/);
  const quoted = prompt.match(/"([^"]+)"/);
  const reply = product ? (BigInt(product[1]!) * BigInt(product[2]!)).toLocaleString('en-US') : quoted ? quoted[1]!.toUpperCase() : 'Hello! How can I help?';
  return { deltas: [{ content: reply.slice(0, 3) }, { content: `${reply.slice(3)}.` }], usage: usage(reply.length + 1) };
}
