import crypto from 'node:crypto';
import { z } from 'zod';
import { PUBLIC_MODEL_ID } from '../schemas/domain';

/**
 * Chat audits (docs/trust.md, "Chat audits"): canaries of task type `chat_completion` for strong-tier
 * solvers. The platform sends a chat request drawn from a generated bank (topics, wordings, system
 * prompts, earlier turns) whose answers are checked without a model (a product of fresh operands, a
 * fresh word in capitals, a call of an offered function with given values), and the judge checks the answer, the tool call against the offered
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
const chance = (p: number) => crypto.randomInt(1_000_000) < p * 1_000_000;
const LETTERS = 'abcdefghijkmnpqrstuvwxyz';
const word = (length: number, alphabet = LETTERS) => Array.from({ length }, () => alphabet[crypto.randomInt(alphabet.length)]).join('');
const fill = (template: string, values: Record<string, string | number>) => template.replace(/\{(\w+)\}/g, (_, key: string) => String(values[key] ?? ''));

/**
 * The bank audits are drawn from: topics a client's chat may be about, each with who asks, what it is
 * about and the names its functions use, composed with many wordings of each question, optional
 * system prompts, earlier turns, context and closing requests. No text here holds a digit or a double
 * quote: the question's values are the only ones, and the judge knows them.
 */
const TOPICS = [
  { who: 'I run a small bakery', about: 'our weekly flour orders', unit: 'bags', verbs: ['order', 'restock'], nouns: ['supplier', 'batch', 'order'], text: ['supplier', 'batch', 'flavor'], number: ['quantity', 'loaves', 'trays'] },
  { who: 'I manage a warehouse', about: 'pallet counts for the audit', unit: 'boxes', verbs: ['log', 'move'], nouns: ['pallet', 'shipment', 'bin'], text: ['sku', 'bin', 'carrier'], number: ['quantity', 'pallets', 'weight'] },
  { who: 'I teach a chemistry class', about: 'lab supplies for next term', unit: 'vials', verbs: ['reserve', 'record'], nouns: ['lab', 'sample', 'reading'], text: ['sample', 'student', 'sensor'], number: ['value', 'grams', 'minutes'] },
  { who: 'I am planning a wedding', about: 'the seating and catering', unit: 'guests', verbs: ['book', 'assign'], nouns: ['table', 'venue', 'menu'], text: ['table', 'guest', 'menu'], number: ['seats', 'guests', 'courses'] },
  { who: 'I keep the books for a cafe', about: 'this month\'s invoices', unit: 'invoices', verbs: ['record', 'file'], nouns: ['invoice', 'expense', 'receipt'], text: ['vendor', 'category', 'reference'], number: ['amount', 'cents', 'items'] },
  { who: 'I coordinate volunteers at a food bank', about: 'the weekend shifts', unit: 'parcels', verbs: ['schedule', 'assign'], nouns: ['shift', 'volunteer', 'parcel'], text: ['volunteer', 'station', 'shift'], number: ['hours', 'parcels', 'people'] },
  { who: 'I maintain a fleet of delivery vans', about: 'fuel and mileage', unit: 'litres', verbs: ['log', 'schedule'], nouns: ['van', 'trip', 'service'], text: ['vehicle', 'driver', 'route'], number: ['kilometers', 'litres', 'stops'] },
  { who: 'I run a tabletop game night', about: 'tournament brackets', unit: 'players', verbs: ['register', 'score'], nouns: ['player', 'match', 'round'], text: ['player', 'team', 'deck'], number: ['points', 'round', 'wins'] },
  { who: 'I work on a backend team', about: 'a capacity estimate for the next release', unit: 'requests', verbs: ['create', 'open'], nouns: ['ticket', 'incident', 'deploy'], text: ['service', 'owner', 'label'], number: ['priority', 'replicas', 'minutes'] },
  { who: 'I look after a community garden', about: 'seed trays and plots', unit: 'seedlings', verbs: ['plant', 'water'], nouns: ['plot', 'bed', 'harvest'], text: ['plot', 'crop', 'gardener'], number: ['rows', 'plants', 'days'] },
  { who: 'I organise a running club', about: 'training plans', unit: 'meters', verbs: ['log', 'plan'], nouns: ['run', 'workout', 'race'], text: ['runner', 'route', 'pace'], number: ['meters', 'laps', 'minutes'] },
  { who: 'I run a small print shop', about: 'a flyer job for a client', unit: 'sheets', verbs: ['queue', 'quote'], nouns: ['print', 'job', 'proof'], text: ['customer', 'paper', 'finish'], number: ['copies', 'pages', 'sheets'] },
  { who: 'I handle bookings for a hostel', about: 'next month\'s occupancy', unit: 'nights', verbs: ['book', 'hold'], nouns: ['room', 'booking', 'guest'], text: ['room', 'guest', 'channel'], number: ['nights', 'beds', 'attendees'] },
  { who: 'I am a librarian', about: 'returning and shelving books', unit: 'books', verbs: ['catalog', 'reserve'], nouns: ['book', 'loan', 'shelf'], text: ['isbn', 'shelf', 'patron'], number: ['copies', 'days', 'pages'] },
  { who: 'I coach a youth football team', about: 'kit and travel costs', unit: 'shirts', verbs: ['add', 'track'], nouns: ['player', 'game', 'kit'], text: ['player', 'position', 'opponent'], number: ['goals', 'minutes', 'number'] },
  { who: 'I run an online plant shop', about: 'pot sizes and stock', unit: 'pots', verbs: ['list', 'update'], nouns: ['listing', 'stock', 'order'], text: ['plant', 'size', 'sku'], number: ['quantity', 'price', 'stock'] },
  { who: 'I manage a call center team', about: 'staffing for the holidays', unit: 'calls', verbs: ['set', 'log'], nouns: ['reminder', 'shift', 'call'], text: ['label', 'agent', 'queue'], number: ['minutes', 'agents', 'calls'] },
  { who: 'I am renovating a flat', about: 'tiles and paint', unit: 'tiles', verbs: ['order', 'note'], nouns: ['material', 'room', 'quote'], text: ['material', 'room', 'color'], number: ['tiles', 'liters', 'meters'] },
  { who: 'I run a podcast', about: 'episode downloads', unit: 'downloads', verbs: ['publish', 'schedule'], nouns: ['episode', 'guest', 'ad'], text: ['episode', 'guest', 'sponsor'], number: ['minutes', 'downloads', 'slot'] },
  { who: 'I help at a bike repair cafe', about: 'spare parts', unit: 'spokes', verbs: ['log', 'reserve'], nouns: ['repair', 'part', 'bike'], text: ['part', 'owner', 'frame'], number: ['quantity', 'minutes', 'size'] },
] as const;

type Topic = (typeof TOPICS)[number];

const SYSTEM_PROMPTS = [
  'You are a helpful assistant.',
  'You are a concise assistant. Keep answers short.',
  'You are an assistant for a small business. Be accurate and brief.',
  'You help with everyday office tasks. Answer exactly what is asked.',
  'You are a careful assistant. Do not add explanations unless asked.',
  'Answer in plain text without markdown.',
  'You are a friendly assistant for {about}.',
];
const OPENERS = ['Hi!', 'Hello,', 'Quick question.', 'Hey there.', 'Good morning!', 'Hi, hope you are well.', 'Sorry to bother you again.', ''];
const CONTEXTS = [
  '{who} and I am sorting out {about}.',
  '{who}. We are going through {about} today.',
  'Context: {about}.',
  '{who}, and the numbers keep getting mixed up.',
  'This is for {about}.',
  'My colleague asked me to double check {about}.',
  '{who} and I need this for a spreadsheet.',
  'We are tidying up {about} before the end of the week.',
];
const CLOSERS = ['', 'Thanks!', 'Thank you.', 'Much appreciated.', 'Thanks in advance.', 'Cheers.'];
const PRIOR_TURNS = [
  ['Can you help me with some numbers for {about}?', 'Of course. What do you need?'],
  ['I have a couple of quick tasks about {about}.', 'Sure, go ahead.'],
  ['Are you there?', 'Yes, how can I help?'],
  ['{who}. Can you help me with something?', 'Happy to help. What is it?'],
] as const;

const ARITHMETIC_ASKS = [
  'Compute {a} * {b}. Reply with the number only.',
  'What is {a} × {b}? Answer with just the number.',
  'Calculate {a} * {b} and give only the result.',
  'We have {a} lots of {b} {unit}. How many {unit} is that, {a} times {b}? Just the number please.',
  'What is the product of {a} and {b}? Only the number.',
  'How much is {a} multiplied by {b}? Reply with the result only.',
  'I need {a} × {b} for a cell in my sheet. Number only, no working.',
  'Can you work out {a} times {b} for me? Just give me the final figure.',
  'Multiply {a} by {b}: {a} * {b}. Answer with the number alone.',
  'Quick sanity check on {about}: {a} × {b} = ? Only the number, please.',
];
const TRANSFORM_ASKS = [
  'Write "{w}" in capital letters. Reply with that word only.',
  'Convert "{w}" to upper case and reply with nothing else.',
  'Our label printer needs codes in capitals. Please give me "{w}" in all caps, nothing else.',
  'Uppercase this code for me: "{w}". Reply with just the uppercased code.',
  'Can you rewrite "{w}" using only capital letters? Only the word, please.',
  'Please return "{w}" in uppercase, with no other text.',
  'The reference "{w}" has to be written in block capitals for the form. What is it in capitals? Reply with the word only.',
  'Turn "{w}" into upper case letters. Just the result.',
];
const TOOL_ASKS = [
  'Call {name} with {text} "{tv}" and {number} {nv}.',
  'Use the {name} function: {text} "{tv}", {number} {nv}.',
  'Please {verb} this with {name}: {text} "{tv}" and {number} {nv}.',
  'Run {name} for {text} "{tv}" with {number} {nv}, please.',
  'Go ahead and call {name}, {text} "{tv}", {number} {nv}.',
  'Can you use {name} to {verb} it? The {text} "{tv}" and the {number} {nv}.',
  'I need a {noun} recorded through {name} with {text} "{tv}" and {number} {nv}.',
];

/** A chat as a client's would be: a system prompt at times, an earlier exchange at times, an opener, context, the question, a closing word. */
function conversation(topic: Topic, ask: string): { role: string; content: string }[] {
  const values = { who: topic.who, about: topic.about };
  const messages: { role: string; content: string }[] = [];
  if (chance(0.4)) messages.push({ role: 'system', content: fill(pick(SYSTEM_PROMPTS), values) });
  if (chance(0.25)) {
    const [user, assistant] = pick(PRIOR_TURNS);
    messages.push({ role: 'user', content: fill(user, values) }, { role: 'assistant', content: assistant });
  }
  const context = chance(0.6) ? fill(pick(CONTEXTS), values) : '';
  const parts = [pick(OPENERS), ...(chance(0.5) ? [context, ask] : [ask, context]), pick(CLOSERS)].filter(Boolean);
  messages.push({ role: 'user', content: parts.join(chance(0.2) ? '\n\n' : ' ') });
  return messages;
}

const promptChars = (payload: { messages: { content: string }[]; tools?: unknown[] }) =>
  payload.messages.reduce((sum, message) => sum + message.content.length, 0) + (payload.tools ? JSON.stringify(payload.tools).length : 0);

/**
 * A fresh audit of one kind (random when not given), drawn from the bank above. Temperature 0; no
 * seed: the answers are checked by value, not by wording, and a seed would make audits stand out
 * among clients' requests.
 */
export function buildChatAudit(kind: ChatAuditKind = pick(CHAT_AUDIT_KINDS)): ChatAudit {
  const topic = pick(TOPICS);
  if (kind === 'arithmetic') {
    const a = crypto.randomInt(1000, 10000);
    const b = crypto.randomInt(11, 100);
    const ask = fill(pick(ARITHMETIC_ASKS), { a, b, unit: topic.unit, about: topic.about });
    const payload = { model: PUBLIC_MODEL_ID, messages: conversation(topic, ask), temperature: 0 };
    const answer = String(a * b);
    return { payload, expected: { kind, answer, prompt_chars: promptChars(payload) }, token: answer };
  }
  if (kind === 'transform') {
    const w = word(crypto.randomInt(6, 11));
    const payload = { model: PUBLIC_MODEL_ID, messages: conversation(topic, fill(pick(TRANSFORM_ASKS), { w })), temperature: 0 };
    const answer = w.toUpperCase();
    return { payload, expected: { kind, answer, prompt_chars: promptChars(payload) }, token: answer };
  }
  const verb = pick(topic.verbs);
  const noun = pick(topic.nouns);
  const name = `${verb}_${noun}`;
  const text = pick(topic.text);
  const number = pick(topic.number.filter((field) => field !== text));
  const textValue = word(crypto.randomInt(5, 9), `${LETTERS}23456789`);
  const numberValue = crypto.randomInt(2, 10000);
  const parameters: ParametersSchema = {
    type: 'object',
    properties: { [text]: { type: 'string', description: `The ${text}.` }, [number]: { type: 'integer', description: `The ${number}.` } },
    required: [text, number],
    additionalProperties: false,
  };
  const description = `${verb.charAt(0).toUpperCase()}${verb.slice(1)}s a ${noun}.`;
  const tools = [{ type: 'function', function: { name, description, parameters } }];
  const ask = fill(pick(TOOL_ASKS), { name, text, tv: textValue, number, nv: numberValue, verb, noun });
  const payload = {
    model: PUBLIC_MODEL_ID,
    messages: conversation(topic, ask),
    temperature: 0,
    tools,
    tool_choice: { type: 'function', function: { name } },
  };
  return {
    payload,
    expected: { kind, name, arguments: { [text]: textValue, [number]: numberValue }, parameters, prompt_chars: promptChars(payload) },
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
