import crypto from 'node:crypto';
import { MessageAssembler } from '../../src/chat/openai-format';
import { chatTaskPayload } from '../../src/chat/task-payload';
import { PUBLIC_MODEL_ID } from '../../src/schemas/domain';
import { ChatCompletionBody } from '../../src/schemas/requests';
import { extractionSchemaProblems, lastNumber, listItems, numberWords, plantedFact, Rng } from '../../src/trust/audit-questions';
import {
  AUDIT_SPRT,
  auditTest,
  buildChatAudit,
  CHAT_AUDIT_KINDS,
  EXPECTED_AUDIT_PASS_RATE,
  judgeChatAudit,
  shapeOf,
  type ChatAudit,
  type ChatAuditExpectation,
} from '../../src/trust/chat-audit';
import { bankedScript } from '../support/banked-script';
import { honestAnswer, idealAnswer } from '../support/chat-answers';
import { clientChatBody } from '../support/client-chats';
import { classifierAccuracy, features } from '../support/shape-classifier';

/** The result the judge reads: the solver's result with the streamed deltas assembled (activities/dispatch.ts). */
function resultOf(deltas: Record<string, unknown>[], usage: Record<string, unknown>) {
  const assembler = new MessageAssembler();
  deltas.forEach((delta) => assembler.add(delta));
  return { finish_reason: 'stop', usage, message: assembler.message() };
}

const tokens = (chars: number) => Math.max(1, Math.ceil(chars / 4));
const reply = (content: string, promptChars = 400) => resultOf([{ content }], { prompt_tokens: tokens(promptChars), completion_tokens: tokens(content.length) });

/** The banked script's reply to an audit, with plausible usage (the script reports what a model would). */
function scriptResult(audit: ChatAudit) {
  const answer = bankedScript(audit.payload);
  const deltas = answer.toolCall ? [{ tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: answer.toolCall }] }] : [{ content: answer.content }];
  const chars = answer.content.length + (answer.toolCall ? answer.toolCall.name.length + answer.toolCall.arguments.length : 0);
  return resultOf(deltas, { prompt_tokens: tokens(audit.expected.prompt_chars), completion_tokens: tokens(chars) });
}

const AUDITS = 500;
const audits = Array.from({ length: AUDITS }, (_, i) => buildChatAudit({ seed: `unit-${i}` }));

describe('audit questions', () => {
  test.each(CHAT_AUDIT_KINDS)('a %s audit is a chat request as a client\'s becomes: the public model, a valid body, no stream, no marker', (kind) => {
    const audit = buildChatAudit({ kind });
    expect(audit.payload.model).toBe(PUBLIC_MODEL_ID);
    expect(audit.payload).not.toHaveProperty('stream');
    expect(audit.payload).not.toHaveProperty('seed');
    expect(ChatCompletionBody.safeParse(audit.payload).success).toBe(true);
    expect(audit.expected.kind).toBe(kind);
  });

  test('an audit is reproduced from its seed, and fresh seeds ask fresh questions', () => {
    expect(buildChatAudit({ seed: 'same' })).toEqual(buildChatAudit({ seed: 'same' }));
    expect(new Set(audits.map((audit) => audit.token)).size).toBeGreaterThan(AUDITS * 0.8);
    expect(new Set(audits.map((audit) => audit.expected.kind))).toEqual(new Set(CHAT_AUDIT_KINDS));
  });

  test('values are written in words at times, beside distractors with numbers of their own', () => {
    const problems = audits.filter((audit) => audit.expected.kind === 'word_problem');
    const text = (audit: ChatAudit) => (audit.payload.messages as { content: string }[]).at(-1)!.content;
    expect(problems.filter((audit) => /\b(twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|hundred|eleven|twelve)\b/.test(text(audit))).length).toBeGreaterThan(problems.length / 3);
    // More numbers in the prose than the answer depends on: the distractors' and the steps'.
    expect(problems.every((audit) => (text(audit).match(/\d+/g) ?? []).length + (text(audit).match(/\b(one|two|three|four|five|six|seven|eight|nine|ten)\b/g) ?? []).length >= 3)).toBe(true);
    expect(numberWords(342)).toBe('three hundred and forty-two');
    expect(numberWords(1007)).toBe('one thousand and seven');
  });

  test('a planted fact sits in a context of a few thousand to over ten thousand tokens, and its first value is not the answer', () => {
    const sizes = audits.filter((audit) => audit.expected.kind === 'planted_fact').map((audit) => audit.expected.prompt_chars / 4);
    expect(Math.min(...sizes)).toBeGreaterThan(1400);
    expect(Math.max(...sizes)).toBeGreaterThan(10_000);
    const fact = plantedFact(new Rng('fact'), 20_000);
    expect(fact.context.length).toBeGreaterThan(20_000);
    expect(fact.context).toContain(fact.question.match(/[A-Z][a-z]+ [A-Z][a-z]+/)![0]);
  });

  test('an ideal answerer (the generator\'s own answer, in the form asked) passes every audit', () => {
    for (const audit of audits) {
      const answer = idealAnswer(audit.expected);
      expect(judgeChatAudit(audit.expected, resultOf(answer.deltas, answer.usage))).toMatchObject({ passed: true, problems: [] });
    }
  });

  test('the banked script (no model: digits, quoted words, products, first values of each type) passes under 5 % of audits', () => {
    const passed = audits.filter((audit) => judgeChatAudit(audit.expected, scriptResult(audit)).passed).length;
    expect(passed / AUDITS).toBeLessThan(0.05);
    // The script the tests' toy model runs, which answered every audit of the parsable bank, passes none.
    const toy = audits.filter((audit) => {
      const answer = honestAnswer(audit.payload);
      return judgeChatAudit(audit.expected, resultOf(answer.deltas, answer.usage)).passed;
    }).length;
    expect(toy / AUDITS).toBeLessThan(0.05);
  });
});

describe('the judge', () => {
  const numberAudit: ChatAuditExpectation = { kind: 'word_problem', answer: 158, seed: 's', prompt_chars: 400 };

  test('a number answer is the reply\'s last number: reasoning may come first, separators are allowed', () => {
    for (const text of ['158', 'The answer is 158.', '258 + 78 - 119 - 59 = 158', '**158** bags', 'Total: 1,158'.replace('1,', '')]) expect(judgeChatAudit(numberAudit, reply(text)).passed).toBe(true);
    for (const text of ['158 or 160', 'one hundred and fifty-eight', '1158', 'I am a helpful model']) expect(judgeChatAudit(numberAudit, reply(text)).passed).toBe(false);
    expect(lastNumber('we had 1,234 then 2 345')).toBe(2345);
    expect(judgeChatAudit(numberAudit, reply('160')).problems).toEqual(['answer: the reply ends with 160, expected 158']);
  });

  test('a list must hold exactly the items asked for, in the order, format and case asked for', () => {
    const list: ChatAuditExpectation = { kind: 'constrained_list', items: ['MALLET', 'PLIERS', 'SAW'], format: 'numbered', seed: 's', prompt_chars: 400 };
    expect(judgeChatAudit(list, reply('1. MALLET\n2. PLIERS\n3. SAW')).passed).toBe(true);
    expect(judgeChatAudit(list, reply('1. mallet\n2. pliers\n3. saw')).passed).toBe(false);
    expect(judgeChatAudit(list, reply('1. PLIERS\n2. MALLET\n3. SAW')).passed).toBe(false);
    expect(judgeChatAudit(list, reply('1. MALLET\n2. PLIERS\n3. SAW\n4. GOAT')).passed).toBe(false);
    expect(judgeChatAudit(list, reply('MALLET, PLIERS, SAW')).problems).toEqual(['answer: not a list in the numbered format']);
    expect(listItems('["a", "b"]', 'json')).toEqual(['a', 'b']);
    expect(listItems('a, b', 'comma')).toEqual(['a', 'b']);
    expect(listItems('a\nb', 'comma')).toBeNull();
  });

  test('an extraction must match the strict schema and hold the asker\'s values, the count as corrected, the date in ISO form', () => {
    const audit = buildChatAudit({ kind: 'extraction', seed: 'extract' });
    const expected = audit.expected as Extract<ChatAuditExpectation, { kind: 'extraction' }>;
    const answer = (value: unknown) =>
      expected.tool
        ? resultOf([{ tool_calls: [{ index: 0, id: 'c', type: 'function', function: { name: expected.tool, arguments: JSON.stringify(value) } }] }], { prompt_tokens: 300, completion_tokens: 40 })
        : reply(JSON.stringify(value), expected.prompt_chars);
    expect(judgeChatAudit(expected, answer(expected.values)).passed).toBe(true);
    const [name, count, , date] = expected.schema.required as [string, string, string, string, string];
    expect(judgeChatAudit(expected, answer({ ...expected.values, [name]: String(expected.values[name]).toUpperCase() })).passed).toBe(true);
    expect(judgeChatAudit(expected, answer({ ...expected.values, [count]: Number(expected.values[count]) + 1 })).passed).toBe(false);
    expect(judgeChatAudit(expected, answer({ ...expected.values, [count]: String(expected.values[count]) })).problems).toEqual([`answer: "${count}" is not an integer`]);
    expect(judgeChatAudit(expected, answer({ ...expected.values, extra: 1 })).problems).toEqual(['answer: "extra" is not in the schema']);
    expect(extractionSchemaProblems(expected.schema, { ...expected.values, [date]: '3 March 2026' })).toEqual([`"${date}" is not a YYYY-MM-DD date`]);
    if (!expected.tool) expect(judgeChatAudit(expected, reply(`\`\`\`json\n${JSON.stringify(expected.values)}\n\`\`\``, expected.prompt_chars)).passed).toBe(true);
  });

  test('usage must be plausible for the output: a right answer with made-up token counts fails', () => {
    expect(judgeChatAudit(numberAudit, resultOf([{ content: '158' }], { prompt_tokens: 100, completion_tokens: 29 })).problems).toEqual([
      'usage: completion_tokens 29 (less reasoning) for 3 characters of output (0 to 22)',
    ]);
    expect(judgeChatAudit(numberAudit, resultOf([{ content: '158' }], { prompt_tokens: 0, completion_tokens: 1 })).problems[0]).toBe('usage: prompt_tokens 0 for 400 characters of prompt (1 to 1000)');
    expect(judgeChatAudit(numberAudit, resultOf([{ content: '158' }], { completion_tokens: 1 })).problems).toEqual(['usage: no prompt_tokens or completion_tokens']);
    const reasoning = (n: number) => ({ prompt_tokens: 100, completion_tokens: 1 + n, completion_tokens_details: { reasoning_tokens: n } });
    expect(judgeChatAudit(numberAudit, resultOf([{ content: '158' }], reasoning(3000))).passed).toBe(true);
    expect(judgeChatAudit(numberAudit, resultOf([{ content: '158' }], reasoning(9000))).problems[0]).toMatch(/^usage: reasoning_tokens 9000/);
    expect(judgeChatAudit(numberAudit, resultOf([{ content: '158' }], { prompt_tokens: 100, completion_tokens: 1, total_tokens: 900 })).problems).toEqual([
      'usage: total_tokens 900 above prompt_tokens + completion_tokens (101)',
    ]);
  });
});

describe('the sequential test on audits', () => {
  /** The audits a solver passing at `rate` is judged on until quarantine (Infinity: not within `limit`). */
  function auditsUntilQuarantine(rate: number, limit: number, random: () => number): number {
    const verdicts: boolean[] = [];
    for (let i = 0; i < limit; i++) {
      verdicts.push(random() < rate);
      if (auditTest(verdicts.slice(-200)).decision === 'quarantine') return i + 1;
    }
    return Infinity;
  }
  const random = () => crypto.randomInt(1_000_000) / 1_000_000;

  test('a program failing every audit is quarantined by its sixth; a model failing 40 % within about fifty', () => {
    expect(auditsUntilQuarantine(0, 100, random)).toBe(6);
    const weaker = Array.from({ length: 40 }, () => auditsUntilQuarantine(0.6, 1000, random)).sort((a, b) => a - b);
    expect(weaker[20]).toBeLessThan(80);
    expect(weaker.every(Number.isFinite)).toBe(true);
  });

  test(`a model at the expected pass rate (${EXPECTED_AUDIT_PASS_RATE}) or above is rarely quarantined over hundreds of audits`, () => {
    const runs = 200;
    const quarantined = Array.from({ length: runs }, () => auditsUntilQuarantine(0.95, 300, random)).filter(Number.isFinite).length;
    expect(quarantined / runs).toBeLessThan(0.02);
    expect(AUDIT_SPRT.p0).toBeCloseTo(1 - EXPECTED_AUDIT_PASS_RATE);
  });
});

describe('audits on the wire', () => {
  test('an audit copies a client chat\'s shape: its roles, sampling fields, tools and response format, never its contents', () => {
    const body = {
      model: 'strong',
      messages: [{ role: 'developer', content: 'secret system prompt' }, { role: 'user', content: 'private question' }, { role: 'assistant', content: 'private answer' }, { role: 'user', content: 'private follow-up' }],
      temperature: 0.7,
      max_tokens: 800,
      user: 'customer-4711-of-acme',
      tools: [{ type: 'function', function: { name: 'acme_lookup', parameters: { type: 'object', properties: {} } } }, { type: 'function', function: { name: 'acme_refund', parameters: { type: 'object', properties: {} } } }],
      tool_choice: 'required',
      stream: true,
    };
    const client = chatTaskPayload(ChatCompletionBody.parse(body));
    const audit = buildChatAudit({ shape: shapeOf(client) });
    expect(audit.expected.kind).toBe('extraction');
    expect(audit.payload).toMatchObject({ model: PUBLIC_MODEL_ID, temperature: 0.7, max_tokens: 800, tool_choice: 'required' });
    expect((audit.payload.messages as { role: string }[]).map((message) => message.role)).toEqual(['developer', 'user', 'assistant', 'user']);
    expect(audit.payload.tools).toHaveLength(2);
    expect(String(audit.payload.user)).toHaveLength(body.user.length);
    expect(Object.keys(audit.payload).sort()).toEqual(Object.keys(client).sort());
    const text = JSON.stringify(audit.payload);
    for (const secret of ['secret', 'private', 'acme', '4711']) expect(text).not.toContain(secret);
  });

  test('a classifier given every field a solver sees but the text does no better than chance between audits and client chats', () => {
    const N = 400;
    // The client chats a solver sees; an audit sent after the (200 + i)th copies the shape of one of the
    // latest 200 (src/trust/canaries.ts).
    const clients = Array.from({ length: N + 200 }, () => chatTaskPayload(ChatCompletionBody.parse(clientChatBody())));
    const auditFeatures = Array.from({ length: N }, (_, i) => features(buildChatAudit({ shape: shapeOf(clients[200 + i - crypto.randomInt(200)]!) }).payload));
    const clientFeatures = clients.map(features);
    const accuracy = classifierAccuracy(auditFeatures, clientFeatures);
    // Chance is 0.5; three standard deviations of a score on 200 audits and 300 client chats are about 0.07.
    expect(accuracy).toBeLessThan(0.57);
    // The same classifier tells audits of the parsable bank's shape (temperature 0 always, no max_tokens) apart.
    const oldShape = auditFeatures.map((x) => ({ ...Object.fromEntries(Object.entries(x).filter(([key]) => !['max_tokens', 'max_completion_tokens', 'top_p', 'user', 'seed', 'stop'].includes(key))), temperature: '0' }));
    expect(classifierAccuracy(oldShape, clientFeatures)).toBeGreaterThan(0.75);
  });
});
