/**
 * A program posing as a model, kept to show what chat audits no longer let through: it reads the
 * request's surface with regular expressions and answers without understanding anything. It
 * multiplies the first two numbers it sees (or repeats the only one), puts a quoted word in capitals,
 * fills an offered function's or a JSON schema's fields with the first value of the field's type it
 * finds, and answers a list request with every "a <word>" it finds. It answered every audit of the
 * earlier bank; tests show it passes almost none now.
 */

interface Schema {
  properties?: Record<string, { type?: string; format?: string }>;
}

const MONTHS = ['january', 'february', 'march', 'april', 'may', 'june', 'july', 'august', 'september', 'october', 'november', 'december'];

function fillSchema(schema: Schema, text: string): Record<string, unknown> {
  const numbers = [...text.matchAll(/\b\d+\b/g)].map((m) => Number(m[0]));
  const names = [...text.matchAll(/\b([A-Z][a-z]+ [A-Z][a-z]+)\b/g)].map((m) => m[1]!).filter((name) => !/^(Hello|Thanks|Sorry|My|Actually)\b/.test(name));
  const words = [...text.matchAll(/\bin ([A-Z][a-z]+)\b/g)].map((m) => m[1]!);
  const date = text.match(/\b(\d{1,2})(?:st|nd|rd|th)? (?:of )?([A-Z][a-z]+),? (\d{4})\b/);
  const iso = date && MONTHS.includes(date[2]!.toLowerCase()) ? `${date[3]}-${String(MONTHS.indexOf(date[2]!.toLowerCase()) + 1).padStart(2, '0')}-${date[1]!.padStart(2, '0')}` : '2025-01-01';
  const out: Record<string, unknown> = {};
  let textFields = 0;
  for (const [field, property] of Object.entries(schema.properties ?? {})) {
    if (property.type === 'integer' || property.type === 'number') out[field] = numbers.find((n) => n < 1000) ?? 1;
    else if (property.type === 'boolean') out[field] = !/\b(no|not|nobody)\b/i.test(text);
    else if (property.format === 'date') out[field] = iso;
    else out[field] = (textFields++ === 0 ? names[0] : words[0]) ?? 'unknown';
  }
  return out;
}

export interface ScriptReply {
  content: string;
  toolCall?: { name: string; arguments: string };
}

export function bankedScript(payload: Record<string, any>): ScriptReply {
  const messages = payload.messages as { role: string; content: string }[];
  const prompt = messages.filter((message) => message.role === 'user').at(-1)?.content ?? '';
  const tools = (payload.tools ?? []) as { function: { name: string; parameters: Schema } }[];
  if (tools.length > 0) {
    const fn = tools[0]!.function;
    return { content: '', toolCall: { name: fn.name, arguments: JSON.stringify(fillSchema(fn.parameters, prompt)) } };
  }
  const schemaText = prompt.match(/\{"type":"object".*\}/)?.[0];
  const schema = payload.response_format?.json_schema?.schema ?? (schemaText ? JSON.parse(schemaText) : null);
  if (schema) return { content: JSON.stringify(fillSchema(schema, prompt)) };
  if (/\bList every\b/.test(prompt)) {
    const items = [...new Set([...prompt.matchAll(/\ba ([a-z]+)\b/g)].map((m) => m[1]!))];
    const cased = /capital letters/.test(prompt) ? items.map((item) => item.toUpperCase()) : items;
    if (/JSON array/.test(prompt)) return { content: JSON.stringify(cased) };
    if (/separated by commas/.test(prompt)) return { content: cased.join(', ') };
    if (/numbered list/.test(prompt)) return { content: cased.map((item, i) => `${i + 1}. ${item}`).join('\n') };
    return { content: cased.join('\n') };
  }
  const quoted = prompt.match(/"([^"]+)"/);
  const numbers = [...prompt.matchAll(/\b\d+\b/g)].map((m) => BigInt(m[0]));
  if (numbers.length >= 2) return { content: String(numbers[0]! * numbers[1]!) };
  if (numbers.length === 1) return { content: String(numbers[0]) };
  return { content: quoted ? quoted[1]!.toUpperCase() : 'Hello! How can I help?' };
}
