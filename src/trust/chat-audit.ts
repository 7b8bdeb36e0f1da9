import crypto from 'node:crypto';
import { z } from 'zod';
import { chatTaskPayload } from '../chat/task-payload';
import { PUBLIC_MODEL_ID } from '../schemas/domain';
import { ChatCompletionBody } from '../schemas/requests';
import {
  constrainedList,
  extraction,
  extractionSchemaProblems,
  lastNumber,
  LIST_FORMATS,
  listItems,
  plantedFact,
  Rng,
  wordProblem,
  type ExtractionSchema,
} from './audit-questions';
import { sprtStep, sprtThresholds, type SprtParameters } from './sprt';

/**
 * Chat audits (docs/trust.md, "Chat audits"): canaries of task type `chat_completion` for strong-tier
 * solvers. The platform sends a chat request shaped like a recent client's (its sampling parameters,
 * system prompt, earlier turns, tools or response format; never its contents) that asks a generated
 * question whose answer the service knows without a model but a program cannot find by parsing
 * (src/trust/audit-questions.ts). The judge checks the answer and that the reported usage is
 * plausible for the output. Pure functions: the canary module stores what is expected and calls the
 * judge in the transaction that settles the audit.
 */

/**
 * The share of audits a strong-tier model is expected to pass: the questions are short reading tasks
 * with one right answer, which current strong models get right nearly always at any temperature; a
 * generous margin is left for the occasional slip (a misread distractor, a list in the wrong case).
 * Every model on the strong-tier allowlist is held to it: a weaker model, or none, falls far below.
 */
export const EXPECTED_AUDIT_PASS_RATE = 0.9;

/**
 * The sequential test a solver's audits feed (Wald's SPRT on its judged audits in order): H0 a model
 * failing at 1 - EXPECTED_AUDIT_PASS_RATE, H1 one failing half of them (a weaker model, a substitute);
 * quarantine at the upper threshold (six failures in a row from the start, about thirty audits for a
 * model that fails 40 %), a test that accepts starts again. α is small because an honest solver runs a
 * new test every eight audits or so, for as long as it serves.
 */
export const AUDIT_SPRT: SprtParameters = Object.freeze({
  p0: 1 - EXPECTED_AUDIT_PASS_RATE,
  p1: 0.5,
  alpha: 0.0001,
  beta: 0.01,
});

/** The sequential test (AUDIT_SPRT) run over audit verdicts in order: where it stands after the last. */
export function auditTest(verdicts: readonly boolean[]) {
  let llr = 0;
  let decision: ReturnType<typeof sprtStep>['decision'] = 'continue';
  for (const passed of verdicts) ({ llr, decision } = sprtStep(llr, !passed, AUDIT_SPRT));
  return {
    decision,
    llr: Number(llr.toFixed(3)),
    threshold: Number(sprtThresholds(AUDIT_SPRT).upper.toFixed(3)),
    failed: verdicts.filter((passed) => !passed).length,
    judged: verdicts.length,
  };
}

/**
 * A solver's test stands near quarantine at or above this share of its threshold (three failures in a
 * row from a fresh start, or four with a pass): a model at EXPECTED_AUDIT_PASS_RATE stands there after
 * 0.15 % of its audits, one passing 70 % after 24 %, one passing half after 44 % (simulated), so a count
 * of such solvers (the metrics) points at substitutes before the test has decided.
 */
export const NEAR_QUARANTINE_SHARE = 0.5;

/** Whether a test (auditTest) stands near its quarantine threshold without having reached it. */
export const nearQuarantine = (test: ReturnType<typeof auditTest>) =>
  test.decision !== 'quarantine' && test.llr >= test.threshold * NEAR_QUARANTINE_SHARE;

/** Judged audits a verdict looks back on (since the solver's last cleared quarantine): the test resets long before. */
export const AUDIT_HISTORY = 200;

/**
 * Usage is plausible when completion tokens (less reported reasoning tokens) lie between output
 * characters / 10 and output characters × 2 + 16, prompt tokens between 1 and prompt characters × 2 +
 * 200 (the chat template and the tool definitions' formatting), and total tokens, when given, are no
 * more than their sum. Tokenizers give 2 to 6 characters a token for the ASCII these prompts ask for.
 */
export const USAGE_BOUNDS = {
  minCharsPerToken: 10,
  maxTokensPerChar: 2,
  completionSlack: 16,
  promptSlack: 200,
  /** Reasoning tokens cannot be checked; an audit's question needs few, and more than this is not believed. */
  maxReasoningTokens: 8192,
} as const;

export const CHAT_AUDIT_KINDS = ['word_problem', 'planted_fact', 'constrained_list', 'extraction'] as const;
export type ChatAuditKind = (typeof CHAT_AUDIT_KINDS)[number];

/** A planted fact's generated context, in characters (about 1,500 to 15,000 tokens). */
export const PLANTED_CONTEXT_CHARS = { min: 6_000, max: 60_000 } as const;

/**
 * The least max_tokens an audit asks with: a client's smaller limit is raised to it, since a model
 * that reasons a few lines before its answer must not be cut off (the answers themselves are short).
 */
export const AUDIT_MIN_MAX_TOKENS = 256;

/** A JSON Schema of the subset the offered functions use. */
export type ParametersSchema = {
  type: 'object';
  properties: Record<string, { type: 'string' | 'integer'; description: string }>;
  required: string[];
  additionalProperties: false;
};

const numberAnswer = { answer: z.number().int(), seed: z.string(), prompt_chars: z.number() };

/** What an audit expects, stored with its canary (`canaries.audit`). */
export const ChatAuditExpectation = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('word_problem'), ...numberAnswer }),
  z.object({ kind: z.literal('planted_fact'), ...numberAnswer }),
  z.object({
    kind: z.literal('constrained_list'),
    items: z.array(z.string()),
    format: z.enum(LIST_FORMATS),
    seed: z.string(),
    prompt_chars: z.number(),
  }),
  z.object({
    kind: z.literal('extraction'),
    schema: z.custom<ExtractionSchema>((value) => typeof value === 'object' && value !== null),
    values: z.record(z.union([z.string(), z.number(), z.boolean()])),
    /** The JSON comes as the reply (`content`) or as the arguments of the forced call of this function. */
    tool: z.string().nullable(),
    seed: z.string(),
    prompt_chars: z.number(),
  }),
  // Audits of the earlier, parsable bank, judged as they were while any is still open.
  z.object({ kind: z.literal('arithmetic'), answer: z.string(), prompt_chars: z.number() }),
  z.object({ kind: z.literal('transform'), answer: z.string(), prompt_chars: z.number() }),
  z.object({
    kind: z.literal('tool_call'),
    name: z.string(),
    arguments: z.record(z.union([z.string(), z.number()])),
    parameters: z.custom<ParametersSchema>((value) => typeof value === 'object' && value !== null),
    prompt_chars: z.number(),
  }),
]);
export type ChatAuditExpectation = z.infer<typeof ChatAuditExpectation>;

export interface ChatAudit {
  /** The payload a client's chat request becomes (chatTaskPayload): the public model, no marker. */
  payload: Record<string, unknown>;
  expected: ChatAuditExpectation;
  /** The value the answer must carry, for the canary row and the evidence. */
  token: string;
}

/** How a chat that offers tools asks for them (`tool_choice`): absent, a string, or one function named. */
export const TOOL_CHOICES = ['absent', 'auto', 'required', 'none', 'function'] as const;

/**
 * The shape of a client's chat, without its contents: the roles of the messages before its last
 * question, how many tools it offers and how it asks for them, the response format's type, and its
 * other fields (sampling parameters as they are, any other as copyShape makes it).
 */
export interface ChatShape {
  roles: ('system' | 'developer' | 'user' | 'assistant')[];
  tools: number;
  toolChoice: (typeof TOOL_CHOICES)[number];
  responseFormat: 'json_object' | 'json_schema' | null;
  params: Record<string, unknown>;
}

/** Earlier messages and offered tools an audit copies at most: more are rare, and an audit's prompt stays readable. */
export const MAX_EARLIER_MESSAGES = 16;
export const MAX_TOOLS = 8;

/** The fields whose shape ChatShape keeps by structure, not as copied values. */
const STRUCTURED = new Set([
  'model',
  'messages',
  'tools',
  'tool_choice',
  'response_format',
  'stream',
  'stream_options',
]);

/**
 * Fields whose values many clients share (sampling parameters at the SDKs' usual values): an audit
 * copies them as they are. Any other field's value could single a client out (a seed, an end user's
 * id), so an audit sends one of the same form instead (copyShape).
 */
const SHARED_VALUES = new Set([
  'temperature',
  'top_p',
  'max_tokens',
  'max_completion_tokens',
  'presence_penalty',
  'frequency_penalty',
  'parallel_tool_calls',
  'n',
  'logprobs',
  'top_logprobs',
]);

/**
 * A value of the same form as `value`, with nothing of it that could single its client out: flags,
 * strings of up to 8 characters (a stop sequence), lower-case words (an enum such as "auto") and
 * decimals (a price) as they are, another integer of as many digits (a seed), any other string as
 * random hex of its length (an end user's id), arrays and objects element by element.
 */
export function copyShape(value: unknown): unknown {
  if (typeof value === 'string')
    return value.length <= 8 || /^([a-z_]{1,20}|\d+\.\d+)$/.test(value)
      ? value
      : crypto
          .randomBytes(Math.ceil(value.length / 2))
          .toString('hex')
          .slice(0, value.length);
  if (typeof value === 'number' && Number.isInteger(value) && Math.abs(value) >= 10) {
    const digits = String(Math.abs(value)).length;
    return Math.sign(value) * crypto.randomInt(10 ** (digits - 1), Math.min(10 ** digits, 2 ** 48));
  }
  if (Array.isArray(value)) return value.map(copyShape);
  if (typeof value === 'object' && value !== null)
    return Object.fromEntries(Object.entries(value).map(([key, inner]) => [key, copyShape(inner)]));
  return value;
}

/** The shape of a client chat's payload (as its task stores it). */
export function shapeOf(payload: Record<string, unknown>): ChatShape {
  const messages = Array.isArray(payload.messages) ? (payload.messages as { role?: unknown }[]) : [];
  const earlier = messages.at(-1)?.role === 'user' ? messages.slice(0, -1) : messages;
  const roles = earlier
    .map((message) => message.role)
    .filter(
      (role): role is ChatShape['roles'][number] =>
        role === 'system' || role === 'developer' || role === 'user' || role === 'assistant',
    );
  const tools = Array.isArray(payload.tools) ? Math.min(MAX_TOOLS, payload.tools.length) : 0;
  const choice = payload.tool_choice;
  const format = (payload.response_format as { type?: unknown } | null | undefined)?.type;
  return {
    roles: roles.slice(-MAX_EARLIER_MESSAGES),
    tools,
    toolChoice:
      choice === undefined || choice === null
        ? 'absent'
        : typeof choice === 'string'
          ? (TOOL_CHOICES.find((known) => known === choice) ?? 'auto')
          : 'function',
    responseFormat: format === 'json_object' || format === 'json_schema' ? format : null,
    params: Object.fromEntries(
      Object.entries(payload)
        .filter(([key]) => !STRUCTURED.has(key))
        .map(([key, value]) => [key, SHARED_VALUES.has(key) ? value : copyShape(value)]),
    ),
  };
}

/**
 * A shape as the OpenAI SDKs' callers send, for a service with no recent client chat to copy:
 * temperature absent or 0.2 to 1 (0 at times), max_tokens at times, a system prompt half of the time,
 * earlier exchanges at times, tools or a response format now and then.
 */
export function defaultShape(rng: Rng): ChatShape {
  const params: Record<string, unknown> = {};
  const temperature = rng.next();
  if (temperature < 0.15) params.temperature = 0;
  else if (temperature < 0.6) params.temperature = rng.int(2, 10) / 10;
  if (rng.chance(0.1)) params.top_p = rng.pick([0.9, 0.95, 1]);
  if (rng.chance(0.3))
    params[rng.chance(0.7) ? 'max_tokens' : 'max_completion_tokens'] = rng.pick([256, 512, 1000, 1024, 2048, 4096]);
  if (rng.chance(0.05)) params.presence_penalty = rng.pick([0.1, 0.5]);
  const tools = rng.chance(0.12) ? rng.int(1, 4) : 0;
  if (tools && rng.chance(0.3)) params.parallel_tool_calls = false;
  const roles: ChatShape['roles'] = rng.chance(0.5) ? ['system'] : [];
  for (let i = rng.chance(0.25) ? rng.int(1, 4) : 0; i > 0; i--) roles.push('user', 'assistant');
  return {
    roles,
    tools,
    toolChoice: tools ? rng.pick(['absent', 'auto', 'required', 'function'] as const) : 'absent',
    responseFormat: !tools && rng.chance(0.08) ? rng.pick(['json_object', 'json_schema'] as const) : null,
    params,
  };
}

const SYSTEM_PROMPTS = [
  'You are a helpful assistant.',
  'You are a concise assistant. Keep answers short.',
  'You are an assistant for a small business. Be accurate and brief.',
  'You help with everyday office tasks. Answer exactly what is asked.',
  'You are a careful assistant. Read the whole text before answering.',
  'Answer in plain text without markdown unless asked for a format.',
];
const EARLIER_TURNS = [
  ['Can you help me with a few things today?', 'Of course. What do you need?'],
  ['I have some questions about our records.', 'Sure, go ahead.'],
  ['Are you there?', 'Yes, how can I help?'],
  ['Morning! Busy day here.', 'Good morning! What can I do for you?'],
  ['I need a hand with some paperwork.', 'Happy to help. What is it?'],
] as const;
const OPENERS = ['', '', 'Hi!', 'Hello,', 'Quick question.', 'Can you help with this?', 'Another one for you.'];
const NUMBER_ONLY = [
  'Reply with the number only, in digits.',
  'Answer with just the number, in digits.',
  'Work it out and end your reply with the final number in digits.',
  'Give the final figure in digits and nothing else.',
];
/** Other functions a chat with several tools offers beside the one an extraction is recorded with. */
const DECOY_TOOLS = [
  {
    name: 'lookup_customer',
    description: 'Finds a customer by name.',
    parameters: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] },
  },
  {
    name: 'cancel_request',
    description: 'Cancels a request by its reference.',
    parameters: { type: 'object', properties: { reference: { type: 'string' } }, required: ['reference'] },
  },
  {
    name: 'send_email',
    description: 'Sends an email.',
    parameters: {
      type: 'object',
      properties: { to: { type: 'string' }, subject: { type: 'string' }, body: { type: 'string' } },
      required: ['to', 'body'],
    },
  },
  {
    name: 'get_weather',
    description: 'The weather forecast for a city.',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
  {
    name: 'search_documents',
    description: 'Searches the shared documents.',
    parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
  },
  {
    name: 'create_ticket',
    description: 'Opens a support ticket.',
    parameters: {
      type: 'object',
      properties: { title: { type: 'string' }, priority: { type: 'integer' } },
      required: ['title'],
    },
  },
  {
    name: 'convert_currency',
    description: 'Converts an amount between currencies.',
    parameters: {
      type: 'object',
      properties: { amount: { type: 'number' }, from: { type: 'string' }, to: { type: 'string' } },
      required: ['amount', 'from', 'to'],
    },
  },
].map((fn) => ({ type: 'function', function: fn }));
const CONTEXT_INTROS = [
  'Here are the notes from our office log:',
  'Below is the shared log for the building, copied as is.',
  'I pasted our team journal below.',
  'Log export follows.',
];

/** The messages of an audit: the shape's earlier messages (a system prompt, earlier exchanges), then the question. */
function conversation(rng: Rng, shape: ChatShape, question: string): { role: string; content: string }[] {
  const messages = shape.roles.map((role) => {
    const [user, assistant] = rng.pick(EARLIER_TURNS);
    return { role, content: role === 'user' ? user : role === 'assistant' ? assistant : rng.pick(SYSTEM_PROMPTS) };
  });
  messages.push({ role: 'user', content: [rng.pick(OPENERS), question].filter(Boolean).join(' ') });
  return messages;
}

const promptChars = (payload: Record<string, unknown>) =>
  (payload.messages as { content: string }[]).reduce((sum, message) => sum + message.content.length, 0) +
  (payload.tools ? JSON.stringify(payload.tools).length : 0) +
  (payload.response_format ? JSON.stringify(payload.response_format).length : 0);

/** The shape's other fields as the audit sends them: a max_tokens below AUDIT_MIN_MAX_TOKENS raised to it. */
function fields(shape: ChatShape): Record<string, unknown> {
  const copied: Record<string, unknown> = { ...shape.params };
  for (const key of ['max_tokens', 'max_completion_tokens'] as const) {
    if (typeof copied[key] === 'number') copied[key] = Math.max(AUDIT_MIN_MAX_TOKENS, copied[key] as number);
  }
  return copied;
}

/**
 * A fresh audit: the question drawn from `seed` (fresh when not given), of `kind` (drawn when not
 * given), in the shape given (a recent client chat's) or drawn (defaultShape). A shape that offers
 * tools or asks for a response format gets an extraction, answered by the forced call or as the JSON
 * reply; any other, any kind. The payload is what a client's request becomes (chatTaskPayload).
 */
export function buildChatAudit(options: { kind?: ChatAuditKind; seed?: string; shape?: ChatShape } = {}): ChatAudit {
  const seed = options.seed ?? crypto.randomBytes(16).toString('hex');
  const rng = new Rng(seed);
  const shape = options.shape ?? defaultShape(rng);
  const kind: ChatAuditKind =
    options.kind ?? (shape.tools > 0 || shape.responseFormat ? 'extraction' : rng.pick(CHAT_AUDIT_KINDS));
  const body: Record<string, unknown> = { ...fields(shape), model: PUBLIC_MODEL_ID };
  let expected: ChatAuditExpectation;
  let token: string;
  if (kind === 'word_problem') {
    const problem = wordProblem(rng);
    body.messages = conversation(rng, shape, `${problem.prose}\n\n${problem.question} ${rng.pick(NUMBER_ONLY)}`);
    expected = { kind, answer: problem.answer, seed, prompt_chars: 0 };
    token = String(problem.answer);
  } else if (kind === 'planted_fact') {
    const fact = plantedFact(rng, rng.int(PLANTED_CONTEXT_CHARS.min, PLANTED_CONTEXT_CHARS.max));
    const ask = `${fact.question} ${rng.pick(NUMBER_ONLY)}`;
    const intro = rng.pick(CONTEXT_INTROS);
    body.messages = conversation(
      rng,
      shape,
      rng.chance(0.7) ? `${intro}\n\n${fact.context}\n\n${ask}` : `${ask}\n\n${intro}\n\n${fact.context}`,
    );
    expected = { kind, answer: fact.answer, seed, prompt_chars: 0 };
    token = String(fact.answer);
  } else if (kind === 'constrained_list') {
    const list = constrainedList(rng);
    body.messages = conversation(rng, shape, `${list.prose}\n\n${list.instruction}`);
    expected = { kind, items: list.items, format: list.format, seed, prompt_chars: 0 };
    token = list.items.join(',');
  } else {
    const extract = extraction(rng);
    const name = `record_${Object.keys(extract.schema.properties)[0]}_request`;
    const inText =
      `Extract the request from this message as a JSON object matching this JSON Schema, and ` +
      `reply with the JSON only:\n${JSON.stringify(extract.schema)}`;
    // With tools offered, the request is recorded by calling one of them, unless the client's chat forbids calls.
    const called = shape.tools > 0 && shape.toolChoice !== 'none';
    let ask = inText;
    if (shape.tools > 0) {
      const record = {
        type: 'function',
        function: { name, description: 'Records one request as the message states it.', parameters: extract.schema },
      };
      body.tools = rng.shuffle([record, ...rng.sample(DECOY_TOOLS, shape.tools - 1)]);
      if (shape.toolChoice === 'function') body.tool_choice = { type: 'function', function: { name } };
      else if (shape.toolChoice !== 'absent') body.tool_choice = shape.toolChoice;
      if (called) ask = `Record this request with ${name}.`;
    } else if (shape.responseFormat === 'json_schema') {
      body.response_format = {
        type: 'json_schema',
        json_schema: { name: 'request', strict: true, schema: extract.schema },
      };
      ask = 'Extract the request from this message as JSON.';
    } else if (shape.responseFormat === 'json_object') body.response_format = { type: 'json_object' };
    body.messages = conversation(rng, shape, `${ask}\n\n"""\n${extract.prose}\n"""`);
    expected = {
      kind,
      schema: extract.schema,
      values: extract.values,
      tool: called ? name : null,
      seed,
      prompt_chars: 0,
    };
    token = String(Object.values(extract.values)[0]);
  }
  const parsed = ChatCompletionBody.safeParse(body);
  // A copied field a request may not carry (none should: the shape is a client's valid request's): the drawn
  // shape instead.
  if (!parsed.success) return buildChatAudit({ kind: options.kind, seed, shape: defaultShape(rng) });
  const payload = chatTaskPayload(parsed.data);
  expected.prompt_chars = promptChars(payload);
  return { payload, expected, token };
}

/** What the judge concluded: the problems found (none: passed) and an excerpt of what came back. */
export interface ChatAuditVerdict {
  passed: boolean;
  problems: string[];
  returned: string;
}

interface ToolCall {
  function?: { name?: unknown; arguments?: unknown };
}

/** Lenient: whitespace, thousands separators and a trailing period do not matter; a longer number does. */
export function containsNumber(text: string, answer: string): boolean {
  const squeezed = text.replace(/[\s,_'\u00a0\u202f]/g, '');
  return new RegExp(`(?<![0-9])${answer}(?![0-9])`).test(squeezed);
}

/**
 * Whether `value` satisfies the offered schema (its subset: an object of strings and integers, all required,
 * nothing else).
 */
export function schemaProblems(schema: ParametersSchema, value: unknown): string[] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return ['arguments are not a JSON object'];
  const record = value as Record<string, unknown>;
  const problems: string[] = [];
  for (const field of schema.required) if (!(field in record)) problems.push(`"${field}" is missing`);
  for (const [field, fieldValue] of Object.entries(record)) {
    const property = schema.properties[field];
    if (!property) {
      if (schema.additionalProperties === false) problems.push(`"${field}" is not in the schema`);
      continue;
    }
    if (property.type === 'string' && typeof fieldValue !== 'string') problems.push(`"${field}" is not a string`);
    if (property.type === 'integer' && !Number.isInteger(fieldValue)) problems.push(`"${field}" is not an integer`);
  }
  return problems;
}

function toolCallProblems(expected: Extract<ChatAuditExpectation, { kind: 'tool_call' }>, calls: ToolCall[]): string[] {
  const call = calls.find((candidate) => candidate.function?.name === expected.name);
  if (!call) return [`no call of ${expected.name} (${calls.length} tool calls)`];
  let args: unknown;
  try {
    args = JSON.parse(typeof call.function?.arguments === 'string' ? call.function.arguments : '');
  } catch {
    return [`the arguments of ${expected.name} do not parse as JSON`];
  }
  const problems = schemaProblems(expected.parameters, args).map((problem) => `tool call: ${problem}`);
  if (problems.length > 0) return problems;
  const record = args as Record<string, unknown>;
  for (const [field, value] of Object.entries(expected.arguments)) {
    const got = record[field];
    const same = typeof value === 'number' ? got === value : typeof got === 'string' && got.trim() === value;
    if (!same) problems.push(`tool call: "${field}" is ${JSON.stringify(got)}, expected ${JSON.stringify(value)}`);
  }
  return problems;
}

function usageProblems(expected: ChatAuditExpectation, usage: Record<string, unknown>, outputChars: number): string[] {
  const prompt = usage.prompt_tokens;
  const completion = usage.completion_tokens;
  if (typeof prompt !== 'number' || typeof completion !== 'number')
    return ['usage: no prompt_tokens or completion_tokens'];
  const details = usage.completion_tokens_details as { reasoning_tokens?: unknown } | undefined;
  const reasoning = typeof details?.reasoning_tokens === 'number' ? details.reasoning_tokens : 0;
  const problems: string[] = [];
  const b = USAGE_BOUNDS;
  const promptMax = expected.prompt_chars * b.maxTokensPerChar + b.promptSlack;
  if (prompt < 1 || prompt > promptMax)
    problems.push(
      `usage: prompt_tokens ${prompt} for ${expected.prompt_chars} characters of prompt (1 to ${promptMax})`,
    );
  if (reasoning < 0 || reasoning > b.maxReasoningTokens || reasoning > completion)
    problems.push(
      `usage: reasoning_tokens ${reasoning} (at most ${b.maxReasoningTokens}, within ` + `completion_tokens)`,
    );
  const visible = completion - reasoning;
  const min = Math.floor(outputChars / b.minCharsPerToken);
  const max = outputChars * b.maxTokensPerChar + b.completionSlack;
  if (visible < min || visible > max)
    problems.push(
      `usage: completion_tokens ${visible} (less reasoning) for ${outputChars} characters of ` +
        `output (${min} to ${max})`,
    );
  const total = usage.total_tokens;
  if (typeof total === 'number' && total > prompt + completion)
    problems.push(`usage: total_tokens ${total} above prompt_tokens + completion_tokens (${prompt + completion})`);
  return problems;
}

/** The JSON a reply holds: the whole reply, or inside a code fence; undefined when none parses. */
function replyJson(text: string): unknown {
  const fenced = text.match(/```(?:json)?\s*([\s\S]*?)```/);
  for (const candidate of [text.trim(), fenced?.[1]?.trim()]) {
    if (!candidate) continue;
    try {
      return JSON.parse(candidate);
    } catch {
      // The next candidate.
    }
  }
  return undefined;
}

function extractionProblems(
  expected: Extract<ChatAuditExpectation, { kind: 'extraction' }>,
  content: string,
  calls: ToolCall[],
): string[] {
  let value: unknown;
  if (expected.tool) {
    const call = calls.find((candidate) => candidate.function?.name === expected.tool);
    if (!call) return [`no call of ${expected.tool} (${calls.length} tool calls)`];
    value = replyJson(typeof call.function?.arguments === 'string' ? call.function.arguments : '');
  } else value = replyJson(content);
  if (value === undefined) return ['answer: no JSON object in the reply'];
  const problems = extractionSchemaProblems(expected.schema, value).map((problem) => `answer: ${problem}`);
  if (problems.length > 0) return problems;
  const record = value as Record<string, unknown>;
  for (const [field, want] of Object.entries(expected.values)) {
    const got = record[field];
    const same =
      typeof want === 'string'
        ? typeof got === 'string' && got.trim().toLowerCase() === want.toLowerCase()
        : got === want;
    if (!same) problems.push(`answer: "${field}" is ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
  }
  return problems;
}

function listProblems(
  expected: Extract<ChatAuditExpectation, { kind: 'constrained_list' }>,
  content: string,
): string[] {
  const items = listItems(content, expected.format);
  if (!items) return [`answer: not a list in the ${expected.format} format`];
  const got = items.map((item) => item.replace(/\.$/, ''));
  return got.length === expected.items.length && got.every((item, i) => item === expected.items[i])
    ? []
    : [`answer: listed ${JSON.stringify(got).slice(0, 200)}, expected ${JSON.stringify(expected.items)}`];
}

/** The problems with the answer itself, by the audit's kind. */
function answerProblems(expected: ChatAuditExpectation, content: string, calls: ToolCall[]): string[] {
  switch (expected.kind) {
    case 'word_problem':
    case 'planted_fact': {
      const found = lastNumber(content);
      return found === expected.answer
        ? []
        : [`answer: the reply ends with ${found ?? 'no number'}, expected ${expected.answer}`];
    }
    case 'constrained_list':
      return listProblems(expected, content);
    case 'extraction':
      return extractionProblems(expected, content, calls);
    case 'arithmetic':
      return containsNumber(content, expected.answer) ? [] : [`answer: no ${expected.answer} in the reply`];
    case 'transform':
      return content.includes(expected.answer) ? [] : [`answer: no ${expected.answer} in the reply`];
    case 'tool_call':
      return toolCallProblems(expected, calls);
  }
}

/**
 * Judges an audit's result: the solver's result (`finish_reason`, `usage`) with the streamed message
 * assembled into `message` (activities/dispatch.ts).
 */
export function judgeChatAudit(expected: ChatAuditExpectation, result: Record<string, unknown>): ChatAuditVerdict {
  const message = (result.message ?? {}) as { content?: unknown; tool_calls?: unknown };
  const content = typeof message.content === 'string' ? message.content : '';
  const calls = Array.isArray(message.tool_calls) ? (message.tool_calls as ToolCall[]) : [];
  const callText = calls
    .map((call) => `${String(call.function?.name ?? '')}(${String(call.function?.arguments ?? '')})`)
    .join(' ');
  const outputChars =
    content.length +
    calls.reduce(
      (sum, call) => sum + String(call.function?.name ?? '').length + String(call.function?.arguments ?? '').length,
      0,
    );
  const problems = answerProblems(expected, content, calls);
  const usage = result.usage && typeof result.usage === 'object' ? (result.usage as Record<string, unknown>) : {};
  problems.push(...usageProblems(expected, usage, outputChars));
  // What came back, cut short: enough for an admin to see what the solver answered.
  const returned = [content, callText].filter(Boolean).join(' ').slice(0, 500);
  return { passed: problems.length === 0, problems, returned };
}
