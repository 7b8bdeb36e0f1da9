import Ajv, { type ErrorObject, type ValidateFunction } from 'ajv';
import { ApiError } from '../errors';
import { PUBLIC_MODEL_ID } from '../schemas/domain';

/**
 * Firecrawl's LLM formats served by the market (docs/crawl.md, "Extraction and summary"): `json` (v1
 * `json`/`extract`) fills a JSON Schema, or answers a prompt with JSON, from the page's markdown;
 * `summary` summarises it. Each is a chat completion of a strong-tier solver: this module writes its
 * request and judges its answer.
 */

export interface JsonExtraction {
  kind: 'json';
  /** Where the answer goes in `data`: v2's and v1's `json`, or v1's `extract`. */
  field: 'json' | 'extract';
  schema?: Record<string, unknown>;
  prompt?: string;
  systemPrompt?: string;
}

export type Extraction = JsonExtraction | { kind: 'summary' };

/**
 * The page's markdown given to the model is cut here (about 25 000 tokens): a page's main content fits, its
 * longest tail does not.
 */
export const EXTRACTION_PAGE_CHARS = 100_000;
/** The completion budget of an extraction or a summary: a filled schema or a summary fits in far less. */
export const EXTRACTION_MAX_TOKENS = 4096;
/** One repair attempt (a second chat with the invalid answer and what is wrong with it), then extraction_failed. */
export const EXTRACTION_ATTEMPTS = 2;

const ajv = new Ajv({ allErrors: true, strict: false });

/** Validation errors as one line each, as the repair request and the error message name them. */
const describe = (errors: ErrorObject[] | null | undefined) =>
  (errors ?? []).map((error) => `${error.instancePath || '(root)'} ${error.message ?? 'is invalid'}`).slice(0, 20);

function optionalString(value: unknown, option: string): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string')
    throw new ApiError('unsupported_option', `The "${option}" must be a string.`, { option });
  return value;
}

/**
 * The json format's options (`{schema, prompt, systemPrompt}`), checked: a schema that does not compile is
 * refused before any work.
 */
export function jsonExtraction(
  options: Record<string, unknown>,
  field: JsonExtraction['field'],
  option: string,
): JsonExtraction {
  const schema = options.schema;
  if (schema !== undefined && schema !== null && (typeof schema !== 'object' || Array.isArray(schema))) {
    throw new ApiError('unsupported_option', `The "${option}.schema" must be a JSON Schema object.`, { option });
  }
  const prompt = optionalString(options.prompt, `${option}.prompt`);
  const systemPrompt = optionalString(options.systemPrompt, `${option}.systemPrompt`);
  if (!schema && !prompt)
    throw new ApiError('unsupported_option', `The json format needs a "schema" or a "prompt" (${option}).`, { option });
  if (schema) compiled(schema as Record<string, unknown>, option);
  return {
    kind: 'json',
    field,
    ...(schema ? { schema: schema as Record<string, unknown> } : {}),
    ...(prompt ? { prompt } : {}),
    ...(systemPrompt ? { systemPrompt } : {}),
  };
}

function compiled(schema: Record<string, unknown>, option = 'schema'): ValidateFunction {
  try {
    return ajv.compile(schema);
  } catch (error) {
    throw new ApiError(
      'unsupported_option',
      `The "${option}.schema" is not a valid JSON Schema: ${(error as Error).message}`,
      { option },
    );
  }
}

type ChatMessage = { role: 'system' | 'user' | 'assistant'; content: string };

function pageMessage(markdown: string, url: string): string {
  const page = markdown.length > EXTRACTION_PAGE_CHARS ? `${markdown.slice(0, EXTRACTION_PAGE_CHARS)}\n…` : markdown;
  return `The page ${url}, as markdown:\n\n<page>\n${page}\n</page>`;
}

/** The chat completion request of an extraction (its first attempt). */
export function extractionRequest(extraction: Extraction, markdown: string, url: string): Record<string, unknown> {
  if (extraction.kind === 'summary') {
    return {
      model: PUBLIC_MODEL_ID,
      max_tokens: EXTRACTION_MAX_TOKENS,
      messages: [
        {
          role: 'system',
          content:
            'You summarise web pages. Answer with a concise summary of the page (a few sentences) in ' +
            "the page's language, and nothing else.",
        },
        { role: 'user', content: `${pageMessage(markdown, url)}\n\nSummarise this page.` },
      ] satisfies ChatMessage[],
    };
  }
  const system =
    extraction.systemPrompt ??
    'You extract structured data from web pages. Answer with one JSON value only, taken from ' +
      'the page; use null where the page does not say.';
  const task = [
    extraction.prompt
      ? `Instructions: ${extraction.prompt}`
      : 'Extract the data the JSON Schema describes from this page.',
    extraction.schema
      ? `Answer with JSON matching this JSON Schema:\n${JSON.stringify(extraction.schema)}`
      : 'Answer with a JSON object.',
  ].join('\n\n');
  return {
    model: PUBLIC_MODEL_ID,
    max_tokens: EXTRACTION_MAX_TOKENS,
    messages: [
      { role: 'system', content: system },
      { role: 'user', content: `${pageMessage(markdown, url)}\n\n${task}` },
    ] satisfies ChatMessage[],
    response_format: extraction.schema
      ? { type: 'json_schema', json_schema: { name: 'extraction', schema: extraction.schema, strict: true } }
      : { type: 'json_object' },
  };
}

/** The repair request: the first request, the invalid answer, and what is wrong with it. */
export function repairRequest(
  first: Record<string, unknown>,
  answer: string,
  problems: string[],
): Record<string, unknown> {
  const messages = first.messages as ChatMessage[];
  return {
    ...first,
    messages: [
      ...messages,
      { role: 'assistant', content: answer },
      {
        role: 'user',
        content: `That answer is not valid:\n${problems.map((problem) => `- ${problem}`).join('\n')}\n\nAnswer again with the corrected JSON only.`,
      },
    ] satisfies ChatMessage[],
  };
}

/** A model's JSON, without the markdown code fence some models wrap it in. */
function parseJson(text: string): { ok: true; value: unknown } | { ok: false } {
  const trimmed = text.trim().replace(/^```(?:json)?\s*\n?([\s\S]*?)\n?```$/, '$1');
  try {
    return { ok: true, value: JSON.parse(trimmed) };
  } catch {
    return { ok: false };
  }
}

/** The extraction's value from a model's answer, or what is wrong with it. */
export function judgeAnswer(
  extraction: Extraction,
  answer: string,
): { ok: true; value: unknown } | { ok: false; problems: string[] } {
  if (extraction.kind === 'summary') {
    const summary = answer.trim();
    return summary ? { ok: true, value: summary } : { ok: false, problems: ['the summary is empty'] };
  }
  const parsed = parseJson(answer);
  if (!parsed.ok) return { ok: false, problems: ['the answer is not JSON'] };
  if (!extraction.schema) {
    return parsed.value !== null && typeof parsed.value === 'object'
      ? { ok: true, value: parsed.value }
      : { ok: false, problems: ['the answer is not a JSON object'] };
  }
  const validate = compiled(extraction.schema);
  return validate(parsed.value)
    ? { ok: true, value: parsed.value }
    : { ok: false, problems: describe(validate.errors) };
}

/** 502 extraction_failed: neither the answer nor its repair was valid; the page and the chats delivered are charged. */
export function extractionFailed(extraction: Extraction, problems: string[], taskIds: string[]): ApiError {
  const what =
    extraction.kind === 'summary' ? 'a summary' : extraction.schema ? 'JSON matching the schema' : 'a JSON object';
  return new ApiError(
    'extraction_failed',
    `The strong-tier solvers did not answer with ${what} after ${EXTRACTION_ATTEMPTS} attempts ` +
      `(${problems.join('; ')}). The page and the completions delivered are charged; retry, or ` +
      `simplify the schema.`,
    { problems, task_ids: taskIds },
  );
}
