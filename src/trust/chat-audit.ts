import crypto from 'node:crypto';
import { z } from 'zod';
import { PUBLIC_MODEL_ID } from '../schemas/domain';

/**
 * Chat audits (docs/trust.md, "Chat audits"): canaries of task type `chat_completion` for strong-tier
 * solvers. The platform sends a chat request built from a small bank of prompts whose answers are
 * checked without a model (a product of fresh operands, a fresh word in capitals, a call of an offered
 * function with given values), and the judge checks the answer, the tool call against the offered
 * schema, and that the reported usage is plausible for the output. Pure functions: the canary module
 * stores what is expected and calls the judge in the transaction that settles the audit.
 */

/** A failed audit quarantines its solver when it makes this many failed audits among its last CHAT_AUDIT_WINDOW. */
export const CHAT_AUDIT_QUARANTINE_FAILURES = 2;
/** Judged audits (passed or failed) looked at: an honest model may slip once, a substitute keeps failing. */
export const CHAT_AUDIT_WINDOW = 5;

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
  maxReasoningTokens: 4096,
} as const;

export const CHAT_AUDIT_KINDS = ['arithmetic', 'transform', 'tool_call'] as const;
export type ChatAuditKind = (typeof CHAT_AUDIT_KINDS)[number];

/** A JSON Schema of the subset the offered functions use. */
export type ParametersSchema = {
  type: 'object';
  properties: Record<string, { type: 'string' | 'integer'; description: string }>;
  required: string[];
  additionalProperties: false;
};

/** What an audit expects, stored with its canary (`canaries.audit`). */
export const ChatAuditExpectation = z.discriminatedUnion('kind', [
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
  /** The payload a client's chat request becomes (src/http/routes/chat.ts): the public model, no marker. */
  payload: Record<string, unknown>;
  expected: ChatAuditExpectation;
  /** The fresh value the answer must carry, for the canary row and the evidence. */
  token: string;
}

const pick = <T>(items: readonly T[]): T => items[crypto.randomInt(items.length)]!;
const LETTERS = 'abcdefghijkmnpqrstuvwxyz';
const word = (length: number, alphabet = LETTERS) => Array.from({ length }, () => alphabet[crypto.randomInt(alphabet.length)]).join('');

const ARITHMETIC_PROMPTS = [
  (a: number, b: number) => `Compute ${a} * ${b}. Reply with the number only.`,
  (a: number, b: number) => `What is ${a} × ${b}? Answer with just the number.`,
  (a: number, b: number) => `Calculate ${a} * ${b} and give only the result.`,
];
const TRANSFORM_PROMPTS = [
  (w: string) => `Write "${w}" in capital letters. Reply with that word only.`,
  (w: string) => `Convert "${w}" to upper case and reply with nothing else.`,
];
const FUNCTIONS = [
  { name: 'record_reading', description: 'Stores a sensor reading.', text: 'sensor', number: 'value' },
  { name: 'book_room', description: 'Books a meeting room for a number of people.', text: 'room', number: 'attendees' },
  { name: 'log_order', description: 'Logs an order line.', text: 'sku', number: 'quantity' },
  { name: 'set_reminder', description: 'Sets a reminder some minutes from now.', text: 'label', number: 'minutes' },
] as const;
const TOOL_PROMPTS = [
  (name: string, text: string, textValue: string, number: string, numberValue: number) => `Call ${name} with ${text} "${textValue}" and ${number} ${numberValue}.`,
  (name: string, text: string, textValue: string, number: string, numberValue: number) => `Use the ${name} function: ${text} "${textValue}", ${number} ${numberValue}.`,
];

const promptChars = (payload: { messages: { content: string }[]; tools?: unknown[] }) =>
  payload.messages.reduce((sum, message) => sum + message.content.length, 0) + (payload.tools ? JSON.stringify(payload.tools).length : 0);

/**
 * A fresh audit of one kind (random when not given). Temperature 0; no seed: the answers are checked
 * by value, not by wording, and a seed would make audits stand out among clients' requests.
 */
export function buildChatAudit(kind: ChatAuditKind = pick(CHAT_AUDIT_KINDS)): ChatAudit {
  if (kind === 'arithmetic') {
    const a = crypto.randomInt(1000, 10000);
    const b = crypto.randomInt(11, 100);
    const payload = { model: PUBLIC_MODEL_ID, messages: [{ role: 'user', content: pick(ARITHMETIC_PROMPTS)(a, b) }], temperature: 0 };
    const answer = String(a * b);
    return { payload, expected: { kind, answer, prompt_chars: promptChars(payload) }, token: answer };
  }
  if (kind === 'transform') {
    const w = word(8);
    const payload = { model: PUBLIC_MODEL_ID, messages: [{ role: 'user', content: pick(TRANSFORM_PROMPTS)(w) }], temperature: 0 };
    const answer = w.toUpperCase();
    return { payload, expected: { kind, answer, prompt_chars: promptChars(payload) }, token: answer };
  }
  const fn = pick(FUNCTIONS);
  const textValue = word(6, `${LETTERS}23456789`);
  const numberValue = crypto.randomInt(2, 10000);
  const parameters: ParametersSchema = {
    type: 'object',
    properties: { [fn.text]: { type: 'string', description: `The ${fn.text}.` }, [fn.number]: { type: 'integer', description: `The ${fn.number}.` } },
    required: [fn.text, fn.number],
    additionalProperties: false,
  };
  const tools = [{ type: 'function', function: { name: fn.name, description: fn.description, parameters } }];
  const payload = {
    model: PUBLIC_MODEL_ID,
    messages: [{ role: 'user', content: pick(TOOL_PROMPTS)(fn.name, fn.text, textValue, fn.number, numberValue) }],
    temperature: 0,
    tools,
    tool_choice: { type: 'function', function: { name: fn.name } },
  };
  return {
    payload,
    expected: { kind, name: fn.name, arguments: { [fn.text]: textValue, [fn.number]: numberValue }, parameters, prompt_chars: promptChars(payload) },
    token: textValue,
  };
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

/** Whether `value` satisfies the offered schema (its subset: an object of strings and integers, all required, nothing else). */
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
  if (typeof prompt !== 'number' || typeof completion !== 'number') return ['usage: no prompt_tokens or completion_tokens'];
  const details = usage.completion_tokens_details as { reasoning_tokens?: unknown } | undefined;
  const reasoning = typeof details?.reasoning_tokens === 'number' ? details.reasoning_tokens : 0;
  const problems: string[] = [];
  const b = USAGE_BOUNDS;
  const promptMax = expected.prompt_chars * b.maxTokensPerChar + b.promptSlack;
  if (prompt < 1 || prompt > promptMax) problems.push(`usage: prompt_tokens ${prompt} for ${expected.prompt_chars} characters of prompt (1 to ${promptMax})`);
  if (reasoning < 0 || reasoning > b.maxReasoningTokens || reasoning > completion) problems.push(`usage: reasoning_tokens ${reasoning} (at most ${b.maxReasoningTokens}, within completion_tokens)`);
  const visible = completion - reasoning;
  const min = Math.floor(outputChars / b.minCharsPerToken);
  const max = outputChars * b.maxTokensPerChar + b.completionSlack;
  if (visible < min || visible > max) problems.push(`usage: completion_tokens ${visible} (less reasoning) for ${outputChars} characters of output (${min} to ${max})`);
  const total = usage.total_tokens;
  if (typeof total === 'number' && total > prompt + completion) problems.push(`usage: total_tokens ${total} above prompt_tokens + completion_tokens (${prompt + completion})`);
  return problems;
}

/**
 * Judges an audit's result: the solver's result (`finish_reason`, `usage`) with the streamed message
 * assembled into `message` (activities/dispatch.ts).
 */
export function judgeChatAudit(expected: ChatAuditExpectation, result: Record<string, unknown>): ChatAuditVerdict {
  const message = (result.message ?? {}) as { content?: unknown; tool_calls?: unknown };
  const content = typeof message.content === 'string' ? message.content : '';
  const calls = Array.isArray(message.tool_calls) ? (message.tool_calls as ToolCall[]) : [];
  const callText = calls.map((call) => `${String(call.function?.name ?? '')}(${String(call.function?.arguments ?? '')})`).join(' ');
  const outputChars = content.length + calls.reduce((sum, call) => sum + String(call.function?.name ?? '').length + String(call.function?.arguments ?? '').length, 0);
  const problems: string[] = [];
  if (expected.kind === 'arithmetic' && !containsNumber(content, expected.answer)) problems.push(`answer: no ${expected.answer} in the reply`);
  if (expected.kind === 'transform' && !content.includes(expected.answer)) problems.push(`answer: no ${expected.answer} in the reply`);
  if (expected.kind === 'tool_call') problems.push(...toolCallProblems(expected, calls));
  const usage = result.usage && typeof result.usage === 'object' ? (result.usage as Record<string, unknown>) : {};
  problems.push(...usageProblems(expected, usage, outputChars));
  // What came back, cut short: enough for an admin to see what the solver answered.
  const returned = [content, callText].filter(Boolean).join(' ').slice(0, 500);
  return { passed: problems.length === 0, problems, returned };
}
