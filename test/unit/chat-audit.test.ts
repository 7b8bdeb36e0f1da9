import { MessageAssembler } from '../../src/chat/openai-format';
import { PUBLIC_MODEL_ID } from '../../src/schemas/domain';
import { ChatCompletionBody } from '../../src/schemas/requests';
import { buildChatAudit, CHAT_AUDIT_KINDS, containsNumber, judgeChatAudit, schemaProblems, type ChatAuditExpectation } from '../../src/trust/chat-audit';
import { honestAnswer } from '../support/chat-answers';

/** The result the judge reads: the solver's result with the streamed deltas assembled (activities/dispatch.ts). */
function resultOf(deltas: Record<string, unknown>[], usage: Record<string, unknown>) {
  const assembler = new MessageAssembler();
  deltas.forEach((delta) => assembler.add(delta));
  return { finish_reason: 'stop', usage, message: assembler.message() };
}

const reply = (content: string, usage: Record<string, unknown> = { prompt_tokens: 20, completion_tokens: Math.ceil(content.length / 4) }) => resultOf([{ content }], usage);

const arithmetic: ChatAuditExpectation = { kind: 'arithmetic', answer: '139693', prompt_chars: 45 };

describe('audit prompts', () => {
  test.each(CHAT_AUDIT_KINDS)('a %s audit is a chat request like a client\'s: the public model, temperature 0, no seed, a valid body', (kind) => {
    const audit = buildChatAudit(kind);
    expect(audit.payload).toMatchObject({ model: PUBLIC_MODEL_ID, temperature: 0 });
    expect(audit.payload).not.toHaveProperty('seed');
    expect(ChatCompletionBody.safeParse(audit.payload).success).toBe(true);
    expect(audit.expected.kind).toBe(kind);
  });

  test('every audit asks something fresh', () => {
    const tokens = new Set(Array.from({ length: 50 }, () => buildChatAudit().token));
    expect(tokens.size).toBeGreaterThan(45);
  });

  test('audits are drawn from a large bank: their wording, length and turns differ, like clients\' chats', () => {
    const audits = Array.from({ length: 300 }, (_, i) => buildChatAudit(CHAT_AUDIT_KINDS[i % CHAT_AUDIT_KINDS.length]));
    const messages = audits.map((audit) => audit.payload.messages as { role: string; content: string }[]);
    // The wording with the fresh values taken out: hardly any two audits say the same.
    const wordings = messages.map((turns) => turns.map((turn) => `${turn.role}: ${turn.content}`).join('|').replace(/\d+/g, '#').replace(/"[^"]*"/g, '#'));
    expect(new Set(wordings).size).toBeGreaterThan(250);
    const lengths = messages.map((turns) => turns.reduce((sum, turn) => sum + turn.content.length, 0));
    expect(Math.max(...lengths)).toBeGreaterThan(3 * Math.min(...lengths));
    // One to four messages: a system prompt and an earlier exchange at times.
    expect(new Set(messages.map((turns) => turns.length))).toEqual(new Set([1, 2, 3, 4]));
    expect(new Set(messages.map((turns) => turns[0]!.role))).toEqual(new Set(['system', 'user']));
    // Many functions, not four.
    const functions = audits.flatMap((audit) => ((audit.payload.tools ?? []) as { function: { name: string } }[]).map((tool) => tool.function.name));
    expect(new Set(functions).size).toBeGreaterThan(25);
    for (const turns of messages) expect(turns.at(-1)!.role).toBe('user');
  });

  test('an honest model passes every kind of audit, many times over', () => {
    for (let i = 0; i < 1500; i++) {
      const audit = buildChatAudit(CHAT_AUDIT_KINDS[i % CHAT_AUDIT_KINDS.length]);
      const answer = honestAnswer(audit.payload);
      const verdict = judgeChatAudit(audit.expected, resultOf(answer.deltas, answer.usage));
      expect(verdict).toMatchObject({ passed: true, problems: [] });
    }
  });
});

describe('the answer', () => {
  test('a product is found through whitespace, thousands separators and a trailing period', () => {
    for (const text of ['139693', '139,693.', ' 139 693 ', 'The answer is 139693.', '4817 * 29 = 139,693']) expect(containsNumber(text, '139693')).toBe(true);
  });

  test('a different or longer number is not the product', () => {
    for (const text of ['139692', '1396930', '2139693', 'I am a helpful model', '']) expect(containsNumber(text, '139693')).toBe(false);
  });

  test('a wrong reply fails and says what was expected', () => {
    const verdict = judgeChatAudit(arithmetic, reply('I am a helpful model'));
    expect(verdict.passed).toBe(false);
    expect(verdict.problems).toEqual(['answer: no 139693 in the reply']);
    expect(verdict.returned).toBe('I am a helpful model');
  });

  test('a transform must come back in capitals', () => {
    const expected: ChatAuditExpectation = { kind: 'transform', answer: 'KDMQZRTA', prompt_chars: 60 };
    expect(judgeChatAudit(expected, reply('KDMQZRTA')).passed).toBe(true);
    expect(judgeChatAudit(expected, reply('"KDMQZRTA"')).passed).toBe(true);
    expect(judgeChatAudit(expected, reply('kdmqzrta')).passed).toBe(false);
  });
});

describe('tool calls', () => {
  const audit = buildChatAudit('tool_call');
  const expected = audit.expected as Extract<ChatAuditExpectation, { kind: 'tool_call' }>;
  const [textField, numberField] = expected.parameters.required as [string, string];
  const call = (args: string, name = expected.name) =>
    resultOf([{ tool_calls: [{ index: 0, id: 'c', type: 'function', function: { name, arguments: args } }] }], {
      prompt_tokens: 80,
      completion_tokens: Math.ceil((name.length + args.length) / 4),
    });

  test('the right call with the given values passes', () => {
    expect(judgeChatAudit(expected, call(JSON.stringify(expected.arguments))).problems).toEqual([]);
  });

  test('arguments that do not parse fail', () => {
    expect(judgeChatAudit(expected, call('{"sensor": ')).problems).toEqual([`the arguments of ${expected.name} do not parse as JSON`]);
  });

  test('arguments off the schema fail: a missing field, a wrong type, a field not offered', () => {
    const problems = judgeChatAudit(expected, call(JSON.stringify({ [numberField]: String(expected.arguments[numberField]), extra: 1 }))).problems;
    expect(problems).toEqual([`tool call: "${textField}" is missing`, `tool call: "${numberField}" is not an integer`, 'tool call: "extra" is not in the schema']);
  });

  test('values other than those asked for fail', () => {
    const problems = judgeChatAudit(expected, call(JSON.stringify({ ...expected.arguments, [numberField]: 1 }))).problems;
    expect(problems).toEqual([`tool call: "${numberField}" is 1, expected ${expected.arguments[numberField]}`]);
  });

  test('a call of another function, or a text answer, fails', () => {
    expect(judgeChatAudit(expected, call(JSON.stringify(expected.arguments), 'other')).passed).toBe(false);
    expect(judgeChatAudit(expected, reply(JSON.stringify(expected.arguments))).problems[0]).toBe(`no call of ${expected.name} (0 tool calls)`);
  });

  test('the schema check reads only JSON objects', () => {
    expect(schemaProblems(expected.parameters, [1])).toEqual(['arguments are not a JSON object']);
  });
});

describe('usage', () => {
  test('completion tokens far above the output are implausible', () => {
    // 6 characters: at most 6 × 2 + 16 = 28 tokens.
    const verdict = judgeChatAudit(arithmetic, reply('139693', { prompt_tokens: 20, completion_tokens: 29 }));
    expect(verdict.problems).toEqual(['usage: completion_tokens 29 (less reasoning) for 6 characters of output (0 to 28)']);
    expect(judgeChatAudit(arithmetic, reply('139693', { prompt_tokens: 20, completion_tokens: 28 })).passed).toBe(true);
  });

  test('completion tokens far below a long output are implausible', () => {
    const long = `139693 ${'word '.repeat(40)}`;
    expect(judgeChatAudit(arithmetic, reply(long, { prompt_tokens: 20, completion_tokens: 1 })).problems[0]).toMatch(/^usage: completion_tokens 1 .* \(20 to 430\)$/);
  });

  test('reported reasoning tokens are left out of the bound, up to a limit', () => {
    const reasoning = (tokens: number) => ({ prompt_tokens: 20, completion_tokens: 2 + tokens, completion_tokens_details: { reasoning_tokens: tokens } });
    expect(judgeChatAudit(arithmetic, reply('139693', reasoning(900))).passed).toBe(true);
    expect(judgeChatAudit(arithmetic, reply('139693', reasoning(5000))).problems[0]).toMatch(/^usage: reasoning_tokens 5000/);
  });

  test('prompt tokens must be reported, and not inflated', () => {
    expect(judgeChatAudit(arithmetic, reply('139693', { prompt_tokens: 0, completion_tokens: 2 })).problems[0]).toBe(
      'usage: prompt_tokens 0 for 45 characters of prompt (1 to 290)',
    );
    expect(judgeChatAudit(arithmetic, reply('139693', { prompt_tokens: 291, completion_tokens: 2 })).passed).toBe(false);
    expect(judgeChatAudit(arithmetic, reply('139693', { completion_tokens: 2 })).problems).toEqual(['usage: no prompt_tokens or completion_tokens']);
  });

  test('total tokens above prompt plus completion are implausible (they are what is billed)', () => {
    expect(judgeChatAudit(arithmetic, reply('139693', { prompt_tokens: 20, completion_tokens: 2, total_tokens: 22 })).passed).toBe(true);
    expect(judgeChatAudit(arithmetic, reply('139693', { prompt_tokens: 20, completion_tokens: 2, total_tokens: 900 })).problems).toEqual([
      'usage: total_tokens 900 above prompt_tokens + completion_tokens (22)',
    ]);
  });
});
