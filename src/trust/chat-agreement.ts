import type { Comparison } from './similarity';
import { EXCERPT_CHARS, jaccard, words } from './similarity';
import type { SprtParameters } from './sprt';

/**
 * Verified client chats (docs/trust.md, "Verified client chats"), the pure part: how two answers to one
 * chat request are compared, and what three answers (the client's and two of a verifier running the
 * same model) say about the solver. Pure functions; the runs and their records: src/trust/redundant.ts.
 *
 * One answer's wording proves nothing: a model that samples gives another answer each time. The test
 * rests on exchangeability instead. The client's answer and the verifier's two are three draws from one
 * model on one request when the solver is honest, so when exactly one of the three disagrees with the
 * other two (the odd one out), it is the client's with probability 1/3, whatever the model, the request
 * or the temperature. A solver that serves another model, or none, is the odd one out far more often.
 * The sequential test (CHAT_VERIFICATION_SPRT) counts those outcomes over many chats.
 */

/** Two answers agree at or above this share of words in common (word-set Jaccard). */
export const CHAT_AGREEMENT_THRESHOLD = 0.5;

/**
 * What an answer says, as compared: its text, its refusal, and each tool call as its function's name
 * and its arguments' values (a model's JSON spacing is not its answer). Reasoning is not compared: a
 * client need not be shown it, and its length varies from draw to draw.
 */
export function chatAnswerText(result: Record<string, unknown>): string {
  const message = (result.message ?? {}) as Record<string, unknown>;
  const parts: string[] = [];
  const content = message.content;
  if (typeof content === 'string') parts.push(content);
  else if (Array.isArray(content))
    for (const part of content) {
      const text = (part as { text?: unknown } | null)?.text;
      if (typeof text === 'string') parts.push(text);
    }
  if (typeof message.refusal === 'string') parts.push(message.refusal);
  if (Array.isArray(message.tool_calls))
    for (const call of message.tool_calls) {
      const fn = (call as { function?: { name?: unknown; arguments?: unknown } } | null)?.function;
      if (!fn) continue;
      parts.push(String(fn.name ?? ''), argumentValues(fn.arguments));
    }
  return parts.join('\n');
}

/** A tool call's arguments as their values in key order, or the text as sent when it is not JSON. */
function argumentValues(raw: unknown): string {
  if (typeof raw !== 'string') return '';
  try {
    const values: string[] = [];
    const walk = (value: unknown): void => {
      if (value === null || typeof value !== 'object') values.push(String(value));
      else if (Array.isArray(value)) value.forEach(walk);
      else
        for (const key of Object.keys(value).sort()) {
          values.push(key);
          walk((value as Record<string, unknown>)[key]);
        }
    };
    walk(JSON.parse(raw));
    return values.join(' ');
  } catch {
    return raw;
  }
}

/** Word-set Jaccard of two answers' texts; two empty answers agree. */
export const answerSimilarity = (a: string, b: string) => jaccard(new Set(words(a)), new Set(words(b)));

const round = (value: number) => Math.round(value * 1000) / 1000;

/**
 * Compares an answer (`first`, the one checked) with a check's (`second`, a verifier's). Not symmetric
 * like the web measures: a check that answered nothing where the checked answer has words cannot answer
 * (`check_empty`); a checked answer that is empty where the check's is not is compared, and disagrees.
 */
export function compareChatAnswers(first: Record<string, unknown>, second: Record<string, unknown>): Comparison {
  const [x, y] = [chatAnswerText(first), chatAnswerText(second)];
  const excerpts = { first: { excerpt: x.slice(0, EXCERPT_CHARS) }, second: { excerpt: y.slice(0, EXCERPT_CHARS) } };
  const base = { measure: 'chat_answer', threshold: CHAT_AGREEMENT_THRESHOLD, ...excerpts };
  if (words(y).length === 0 && words(x).length > 0) return { ...base, similarity: null, incomparable: 'check_empty' };
  return { ...base, similarity: round(answerSimilarity(x, y)) };
}

/**
 * What three answers to one request say: `client_odd` (the verifier's two agree, the client's agrees
 * with neither), `check_odd` (the client's agrees with one check, the two checks disagree, and the other
 * check agrees with neither), `all_agree`, or `undecided` (none agree, or agreement that is not
 * transitive). `incomparable`: a check answered nothing where the client's has words.
 */
export type ChatTriad = 'client_odd' | 'check_odd' | 'all_agree' | 'undecided' | 'incomparable';

export function judgeChatTriad(
  client: Record<string, unknown>,
  first: Record<string, unknown>,
  second: Record<string, unknown>,
): { triad: ChatTriad; withFirst: Comparison; withSecond: Comparison; checks: Comparison } {
  const withFirst = compareChatAnswers(client, first);
  const withSecond = compareChatAnswers(client, second);
  const checks = compareChatAnswers(first, second);
  const agree = (comparison: Comparison) =>
    comparison.similarity !== null && comparison.similarity >= CHAT_AGREEMENT_THRESHOLD;
  const compared = { withFirst, withSecond, checks };
  if (withFirst.similarity === null || withSecond.similarity === null) return { triad: 'incomparable', ...compared };
  const [a, b, c] = [agree(withFirst), agree(withSecond), agree(checks)];
  const agreeing = [a, b, c].filter(Boolean).length;
  if (agreeing === 3) return { triad: 'all_agree', ...compared };
  if (agreeing !== 1) return { triad: 'undecided', ...compared };
  return { triad: c ? 'client_odd' : 'check_odd', ...compared };
}

/**
 * The sequential test of a solver's verified chats, on the triads with an odd one out: H0, the client's
 * answer is it at 1/3 (three draws of one model); H1, at 0.9 (a solver whose answers differ from the
 * model's, when a difference shows). A triad with no odd one out is no observation. Fourteen odd answers
 * of the client's with no check's between quarantine. α is tiny because an honest solver whose model
 * samples meets odd-one-out triads all the time and starts a new test every few of them, for as long
 * as it serves: at 10⁻⁵ one such solver in a few hundred was quarantined within 20,000 chats
 * (test/unit/chat-verification.test.ts simulates it).
 */
export const CHAT_VERIFICATION_SPRT: SprtParameters = Object.freeze({
  p0: 1 / 3,
  p1: 0.9,
  alpha: 1e-6,
  beta: 0.01,
});

/**
 * A solver's chats are verified at CHAT_SUSPICION_FRACTION at least while its chat test stands at or
 * above CHAT_SUSPICION_ODDS odd answers of the client's not outweighed by a check's: a solver wrong one
 * time in ten then reaches the test's threshold within a few hundred chats instead of a thousand, while
 * an honest one stands there rarely and briefly (the checks' share of its chat work stays near 4 %;
 * from one odd answer on, a model that samples would pay about 1 % more).
 */
export const CHAT_SUSPICION_FRACTION = 0.5;
export const CHAT_SUSPICION_ODDS = 2;

/** The rate of a solver's client chats verified: the web rule's (`rate`), raised while its chat test leans against it. */
export const chatVerificationRate = (rate: number, llr: number) => {
  const leaning = llr >= CHAT_SUSPICION_ODDS * Math.log(CHAT_VERIFICATION_SPRT.p1 / CHAT_VERIFICATION_SPRT.p0) - 1e-9;
  return Math.max(rate, leaning ? CHAT_SUSPICION_FRACTION : 0);
};
