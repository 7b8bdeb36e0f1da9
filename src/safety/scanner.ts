/**
 * Prompt-safety scanner: finds known prompt-injection phrasings, hidden-instruction markup and leaked
 * credentials in text. Pure and synchronous, so the chat route can call it before dispatch and the task
 * store can call it on web results. Every pattern is bounded (no nested unbounded quantifiers), so a
 * multi-megabyte page scans in linear time.
 */

export const FINDING_TYPES = ['prompt_injection', 'hidden_instructions', 'secret'] as const;
export type FindingType = (typeof FINDING_TYPES)[number];

export interface Finding {
  type: FindingType;
  rule: string;
  /** The matched text with a little context; for secrets only a short prefix, the rest redacted. */
  excerpt: string;
  /** Where the text was found, e.g. `messages[1].content` or `results[2].snippet`. */
  location?: string;
}

export interface ScanResult {
  flagged: boolean;
  findings: Finding[];
}

interface Rule {
  type: FindingType;
  rule: string;
  pattern: RegExp;
}

// Bounded gaps between the words of a phrase: enough for "all of your", never a whole paragraph.
const GAP = String.raw`[^.!?\n]{0,40}?`;

const INJECTION_RULES: Rule[] = [
  {
    type: 'prompt_injection',
    rule: 'ignore_previous_instructions',
    pattern: new RegExp(
      String.raw`\b(?:ignore|disregard|forget|override|skip|bypass)\b${GAP}\b(?:previous|prior|above|earlier|preceding|original|all)\s+(?:instructions?|prompts?|directions?|directives?|rules|guidelines|commands?)\b`,
      'gi',
    ),
  },
  {
    type: 'prompt_injection',
    rule: 'system_prompt_override',
    pattern: new RegExp(
      String.raw`\b(?:ignore|disregard|forget|override|bypass|reveal|print|repeat|leak|show\s+me)\b${GAP}\b(?:system|developer|hidden|initial|secret)\s+(?:prompt|message|instructions?)\b`,
      'gi',
    ),
  },
  {
    type: 'prompt_injection',
    rule: 'dan_jailbreak',
    pattern:
      /\byou\s+are\s+(?:now\s+)?(?:DAN|in\s+(?:developer|god|jailbreak)\s+mode|jailbroken|(?:an?\s+)?unrestricted|(?:an?\s+)?unfiltered)\b|\bdo\s+anything\s+now\b|\b(?:developer|god|jailbreak)\s+mode\s+(?:enabled|activated|on)\b/gi,
  },
  {
    type: 'prompt_injection',
    rule: 'roleplay_jailbreak',
    pattern: new RegExp(
      String.raw`\b(?:pretend|act\s+as|roleplay|role-play|imagine)\b${GAP}\b(?:no|without(?:\s+any)?)\s+(?:restrictions|rules|limits|limitations|filters|guidelines|ethics|ethical\s+guidelines|content\s+polic(?:y|ies))\b|\[(?:🔓\s*)?JAILBREAK\]|\bstay\s+in\s+character\b${GAP}\b(?:no|never)\s+(?:refuse|restrictions)`,
      'gi',
    ),
  },
  {
    type: 'prompt_injection',
    rule: 'new_instructions',
    pattern:
      /\b(?:new|updated|real|actual)\s+(?:system\s+)?instructions\s*:|\bfrom\s+now\s+on,?\s+you\s+(?:will|must|are)\b/gi,
  },
  {
    type: 'prompt_injection',
    rule: 'chat_template_tokens',
    pattern: /<\|(?:im_start|im_end|system|endoftext|start_header_id|end_header_id|eot_id)\|>|\[\/?INST\]|<<\/?SYS>>/gi,
  },
  {
    type: 'hidden_instructions',
    rule: 'html_comment_instructions',
    pattern:
      /<!--(?:(?!-->)[\s\S]){0,600}?\b(?:ignore|instructions?|assistant|system\s+prompt|you\s+must|AI\s+model|language\s+model)\b(?:(?!-->)[\s\S]){0,600}?-->/gi,
  },
  {
    type: 'hidden_instructions',
    rule: 'css_hidden_text',
    // Text styled invisible that speaks to a model: a human reader never sees it.
    pattern:
      /<[a-z][^>]{0,300}?style\s*=\s*["'][^"']{0,200}?(?:display\s*:\s*none|visibility\s*:\s*hidden|font-size\s*:\s*0(?![.\d]*[1-9])|opacity\s*:\s*0(?![.\d]*[1-9]))[^>]{0,300}>[^<]{0,200}?\b(?:ignore|instructions?|assistant|you\s+must)\b/gi,
  },
  {
    type: 'hidden_instructions',
    rule: 'invisible_unicode',
    // Unicode tag characters smuggle ASCII invisibly; long zero-width runs hide text between visible words.
    pattern: /[\u{E0000}-\u{E007F}]{4,}|[\u200B-\u200D\u2060\uFEFF]{8,}/gu,
  },
];

const SECRET_RULES: Rule[] = [
  { type: 'secret', rule: 'private_key', pattern: /-----BEGIN (?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?-----/g },
  { type: 'secret', rule: 'openai_api_key', pattern: /\bsk-(?:proj-|svcacct-|admin-|ant-)?[A-Za-z0-9_-]{20,200}/g },
  { type: 'secret', rule: 'aws_access_key_id', pattern: /\b(?:AKIA|ASIA)[0-9A-Z]{16}\b/g },
  {
    type: 'secret',
    rule: 'github_token',
    pattern: /\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b/g,
  },
  { type: 'secret', rule: 'slack_token', pattern: /\bxox[abposr]-[A-Za-z0-9-]{10,200}/g },
  { type: 'secret', rule: 'google_api_key', pattern: /\bAIza[0-9A-Za-z_-]{35}\b/g },
  { type: 'secret', rule: 'marketplace_api_key', pattern: /\btmk_[A-Za-z0-9_-]{32,64}/g },
  {
    type: 'secret',
    rule: 'jwt',
    pattern: /\beyJ[A-Za-z0-9_-]{8,2000}\.eyJ[A-Za-z0-9_-]{8,4000}\.[A-Za-z0-9_-]{8,2000}/g,
  },
];

const RULES = [...INJECTION_RULES, ...SECRET_RULES];

// A page full of one phrase is one problem, not hundreds: findings are capped per text and per rule.
const MAX_FINDINGS = 20;
const MAX_PER_RULE = 3;
const CONTEXT_CHARS = 30;
const MAX_EXCERPT_CHARS = 160;
const SECRET_VISIBLE_CHARS = 6;

const oneLine = (text: string) => text.replace(/\s+/g, ' ').trim();

/** A secret is never echoed: its first few characters name its kind, the rest is replaced. */
export function redactSecret(secret: string): string {
  // A private key's BEGIN line names its kind and carries no key material.
  if (secret.startsWith('-----')) return secret;
  return `${secret.slice(0, SECRET_VISIBLE_CHARS)}…[redacted ${secret.length - SECRET_VISIBLE_CHARS} chars]`;
}

interface SecretSpan {
  start: number;
  end: number;
  redacted: string;
}

/**
 * The matched text with a little context on both sides, on one line. Any secret in that window is
 * replaced by its redaction, so a phrase found next to a key never carries the key out.
 */
function excerptOf(text: string, start: number, end: number, secrets: SecretSpan[]): string {
  const from = Math.max(0, start - CONTEXT_CHARS);
  const to = Math.min(text.length, end + CONTEXT_CHARS);
  let excerpt = '';
  let at = from;
  for (const secret of secrets) {
    if (secret.end <= from || secret.start >= to) continue;
    excerpt += text.slice(at, Math.max(at, secret.start)) + secret.redacted;
    at = Math.max(at, secret.end);
  }
  if (at < to) excerpt += text.slice(at, to);
  const line = oneLine(excerpt);
  return line.length > MAX_EXCERPT_CHARS ? `${line.slice(0, MAX_EXCERPT_CHARS - 1)}…` : line;
}

function secretSpans(text: string): SecretSpan[] {
  const spans: SecretSpan[] = [];
  for (const { pattern } of SECRET_RULES) {
    for (const match of text.matchAll(pattern)) {
      const start = match.index ?? 0;
      spans.push({ start, end: start + match[0].length, redacted: redactSecret(match[0]) });
    }
  }
  return spans.sort((a, b) => a.start - b.start);
}

/** Scans one text; `location` is copied onto each finding. */
export function scanText(text: string, location?: string): ScanResult {
  const findings: Finding[] = [];
  if (typeof text !== 'string' || text.length === 0) return { flagged: false, findings };
  const secrets = secretSpans(text);
  for (const { type, rule, pattern } of RULES) {
    let count = 0;
    for (const match of text.matchAll(pattern)) {
      const start = match.index ?? 0;
      const end = start + match[0].length;
      const excerpt = type === 'secret' ? redactSecret(match[0]) : excerptOf(text, start, end, secrets);
      findings.push({ type, rule, excerpt, ...(location ? { location } : {}) });
      count += 1;
      if (count >= MAX_PER_RULE || findings.length >= MAX_FINDINGS) break;
    }
    if (findings.length >= MAX_FINDINGS) break;
  }
  return { flagged: findings.length > 0, findings };
}

/** Merges several scans into one verdict, keeping the cap. */
export function mergeScans(results: ScanResult[]): ScanResult {
  const findings = results.flatMap((result) => result.findings).slice(0, MAX_FINDINGS);
  return { flagged: findings.length > 0, findings };
}

/** An OpenAI chat message: content is a string or an array of parts, text parts carrying `text`. */
export interface ChatMessageLike {
  role?: string;
  content?: unknown;
  [key: string]: unknown;
}

/**
 * Scans every text a chat request carries: string contents, text parts of array contents, and the
 * arguments of tool calls an assistant message replays (they reach the model as text too).
 */
export function scanChatMessages(messages: readonly ChatMessageLike[]): ScanResult {
  const scans: ScanResult[] = [];
  messages.forEach((message, index) => {
    const content = message?.content;
    if (typeof content === 'string') scans.push(scanText(content, `messages[${index}].content`));
    else if (Array.isArray(content)) {
      content.forEach((part, partIndex) => {
        const text = typeof part === 'string' ? part : (part as { text?: unknown } | null)?.text;
        if (typeof text === 'string') scans.push(scanText(text, `messages[${index}].content[${partIndex}].text`));
      });
    }
    const toolCalls = (message as { tool_calls?: unknown }).tool_calls;
    if (Array.isArray(toolCalls)) {
      toolCalls.forEach((call, callIndex) => {
        const args = (call as { function?: { arguments?: unknown } } | null)?.function?.arguments;
        if (typeof args === 'string')
          scans.push(scanText(args, `messages[${index}].tool_calls[${callIndex}].function.arguments`));
      });
    }
  });
  return mergeScans(scans);
}
