import { sql } from 'slonik';
import { z } from 'zod';
import type { Db } from '../../src/db/pool';
import { ChatAuditExpectation } from '../../src/trust/chat-audit';

/**
 * Answers to chat requests for scripted strong-tier solvers. honestAnswer works a client's simple
 * request out from its text (the product of `a * b`, `a × b`, `a times b`, …, a quoted word in
 * capitals, or a call of the one offered function with the values the prompt gives): a program, which
 * passes no audit. idealAnswer is what a capable model answers to an audit (the generator's own
 * answer), and modelAnswer stands in for a strong model: the audit's answer for an audit, honestAnswer
 * for anything else.
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

const answerOf = (text: string, promptChars: number): ChatAnswer => ({
  deltas: [{ content: text.slice(0, 3) }, { content: text.slice(3) }],
  usage: { prompt_tokens: tokensFor(promptChars), completion_tokens: tokensFor(text.length), total_tokens: tokensFor(promptChars) + tokensFor(text.length) },
});

/** What a capable model answers to an audit: the answer the service expects, in the form asked for. */
export function idealAnswer(expected: ChatAuditExpectation): ChatAnswer {
  switch (expected.kind) {
    case 'word_problem':
    case 'planted_fact':
      return answerOf(`The answer is ${expected.answer}.`, expected.prompt_chars);
    case 'constrained_list': {
      const items = expected.items;
      const text = { lines: items.join('\n'), comma: items.join(', '), json: JSON.stringify(items), numbered: items.map((item, i) => `${i + 1}. ${item}`).join('\n') }[expected.format];
      return answerOf(text, expected.prompt_chars);
    }
    case 'extraction': {
      const text = JSON.stringify(expected.values);
      if (!expected.tool) return answerOf(text, expected.prompt_chars);
      const half = Math.floor(text.length / 2);
      const completion = tokensFor(expected.tool.length + text.length);
      return {
        deltas: [
          { tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: expected.tool, arguments: text.slice(0, half) } }] },
          { tool_calls: [{ index: 0, function: { arguments: text.slice(half) } }] },
        ],
        usage: { prompt_tokens: tokensFor(expected.prompt_chars), completion_tokens: completion, total_tokens: tokensFor(expected.prompt_chars) + completion },
      };
    }
    default:
      throw new Error(`no ideal answer for a ${expected.kind} audit`);
  }
}

/**
 * A strong model's answer to the task a solver was sent: for an audit (its canary row names the task),
 * the audit's answer; for a client's chat, honestAnswer.
 */
export async function modelAnswer(db: Db, taskId: string, payload: Record<string, any>): Promise<ChatAnswer> {
  const audit = await db.maybeOneFirst(sql.type(z.object({ audit: z.unknown() }))`SELECT audit FROM canaries WHERE task_id = ${taskId} AND task_type = 'chat_completion'`);
  return audit ? idealAnswer(ChatAuditExpectation.parse(audit)) : honestAnswer(payload);
}
