import { CHAT_VERIFICATION_SPRT, chatVerificationRate, compareChatAnswers, judgeChatTriad, type ChatTriad } from '../../src/trust/chat-agreement';
import { sprtStep, verificationRate } from '../../src/trust/sprt';
import { seededRandom } from '../support/seeded-random';

/**
 * Verified client chats (docs/trust.md, "Verified client chats"): the answers' comparison, the triad of
 * three answers, and a seeded simulation of the whole rule (the real rate at the defaults and the real
 * chat test) against the cheats and honest models the docs' table names.
 */

const message = (content: string) => ({ message: { role: 'assistant', content } });

describe('answers compared', () => {
  test('the same words agree whatever their spacing or case; other words do not', () => {
    expect(compareChatAnswers(message('The answer is 42.'), message('the answer is   42')).similarity).toBe(1);
    expect(compareChatAnswers(message('The answer is 42.'), message('I cannot say.')).similarity).toBe(0);
  });

  test('a tool call compares by its function and its arguments, not their JSON spacing or key order', () => {
    const call = (args: string) => ({ message: { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'lookup', arguments: args } }] } });
    expect(compareChatAnswers(call('{"city":"Oslo","days":3}'), call('{ "days": 3, "city": "Oslo" }')).similarity).toBe(1);
    expect(compareChatAnswers(call('{"city":"Oslo","days":3}'), call('{"city":"Rome","days":9}')).similarity).toBeLessThan(0.5);
  });

  test("a check that answered nothing cannot judge an answer; an empty answer where the check's has words is compared", () => {
    expect(compareChatAnswers(message('Hello there'), message('')).incomparable).toBe('check_empty');
    expect(compareChatAnswers(message(''), message('Hello there'))).toMatchObject({ similarity: 0 });
    expect(compareChatAnswers(message(''), message('')).similarity).toBe(1);
  });
});

describe('three answers', () => {
  const triad = (client: string, first: string, second: string) => judgeChatTriad(message(client), message(first), message(second)).triad;
  test.each<[string, string, string, ChatTriad]>([
    ['red', 'red', 'red', 'all_agree'],
    ['blue', 'red', 'red', 'client_odd'],
    ['red', 'red', 'blue', 'check_odd'],
    ['red', 'blue', 'red', 'check_odd'],
    ['red', 'blue', 'green', 'undecided'],
    ['', 'red', 'red', 'client_odd'],
  ])('client %p, checks %p and %p: %p', (client, first, second, expected) => {
    expect(triad(client, first, second)).toBe(expected);
  });
  test('a check that answered nothing where the client did leaves the triad incomparable', () => {
    expect(triad('red', '', 'red')).toBe('incomparable');
  });
});

const rng = seededRandom;

/** A model: the answer it draws for a request (answers are compared as equal or not). */
type Model = (random: () => number) => string;
const deterministic: Model = () => 'a';
/** A model that samples: its most likely answer at `top`, the rest spread over `others` answers. */
const sampling =
  (top: number, others: number): Model =>
  (random) => {
    const draw = random();
    return draw < top ? 'a' : `b${Math.floor(((draw - top) / (1 - top)) * others)}`;
  };

/** What a solver serves a client, given what the model would have said: the model's answer, or its own. */
type Solver = (model: Model, random: () => number) => { answer: string; wrong: boolean };
const honest: Solver = (model, random) => ({ answer: model(random), wrong: false });
const wrongOneIn =
  (share: number): Solver =>
  (model, random) =>
    random() < share ? { answer: `wrong${random()}`, wrong: true } : { answer: model(random), wrong: false };
const noModel: Solver = () => ({ answer: '', wrong: true });

/** VERIFICATION_START_FRACTION and REDUNDANT_RUN_FRACTION at their defaults. */
const START = 0.5;
const FLOOR = 0.02;
/** Chats after which a solver's rate is taken to have settled (its start rate spent). */
const SETTLED_AFTER = 5000;

/**
 * Client chats one solver serves until quarantined (or `limit`): each sampled at the solver's rate
 * (chatVerificationRate over verificationRate), its three answers judged as judgeChatTriad does (equal
 * answers agree), the chat test fed with the triads that have an odd one out, the rate lowered by every
 * other triad. `settledShare`: the share of its chat work the checks add once its rate settled (two
 * checks per sampled chat).
 */
function serve(solver: Solver, model: Model, random: () => number, limit: number) {
  let llr = 0;
  let passes = 0;
  let verified = 0;
  let settledVerified = 0;
  let wrongServed = 0;
  for (let chats = 1; chats <= limit; chats++) {
    const served = solver(model, random);
    if (served.wrong) wrongServed++;
    if (random() >= chatVerificationRate(verificationRate(passes, START, FLOOR), llr)) continue;
    verified++;
    if (chats > SETTLED_AFTER) settledVerified++;
    const [c, v1, v2] = [served.answer, model(random), model(random)];
    const agreeing = [c === v1, c === v2, v1 === v2].filter(Boolean).length;
    const triad: ChatTriad =
      agreeing === 3 ? 'all_agree' : agreeing !== 1 ? 'undecided' : v1 === v2 ? 'client_odd' : 'check_odd';
    if (triad !== 'client_odd') passes++;
    if (triad === 'all_agree' || triad === 'undecided') continue;
    const step = sprtStep(llr, triad === 'client_odd', CHAT_VERIFICATION_SPRT);
    llr = step.llr;
    if (step.decision === 'quarantine') return { quarantined: true, chats, wrongServed, verified, settledShare: 0 };
  }
  const settledShare = limit > SETTLED_AFTER ? (2 * settledVerified) / (limit - SETTLED_AFTER) : 0;
  return { quarantined: false, chats: limit, wrongServed, verified, settledShare };
}

const percentile = (values: number[], p: number) => [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(p * values.length))]!;

describe('the rule simulated (seeded)', () => {
  const runs = (solver: Solver, model: Model, limit: number, seed: number) => {
    const random = rng(seed);
    return Array.from({ length: 500 }, () => serve(solver, model, random, limit));
  };

  test.each<[string, Solver]>([
    ['a much weaker model, wrong on every chat', wrongOneIn(1)],
    ['no model at all (empty answers)', noModel],
  ])('%s is quarantined by verification alone within 40 wrong answers to clients (90th percentile of 500 runs)', (_name, solver) => {
    const results = runs(solver, deterministic, 1000, 7);
    expect(results.every((result) => result.quarantined)).toBe(true);
    expect(percentile(results.map((result) => result.wrongServed), 0.9)).toBeLessThanOrEqual(40);
  });

  test('one wrong on one chat in ten is quarantined within 300 of its client chats (median of 500 runs), beside a deterministic model', () => {
    const results = runs(wrongOneIn(0.1), deterministic, 5000, 11);
    expect(results.every((result) => result.quarantined)).toBe(true);
    expect(percentile(results.map((result) => result.chats), 0.5)).toBeLessThanOrEqual(300);
  });

  test.each<[string, Model]>([
    ['deterministic', deterministic],
    ['sampling, its first answer at 90 %', sampling(0.9, 1)],
    ['sampling, its first answer at 60 %', sampling(0.6, 3)],
    ['sampling, its first answer at 34 %', sampling(0.34, 2)],
    ['sampling, every answer different', sampling(0, 1_000_000)],
  ])('an honest solver whose model is %s is never quarantined in 40 runs of 20,000 chats, and its checks settle near 4 % of its chat work', (_name, model) => {
    const random = rng(3);
    const results = Array.from({ length: 40 }, () => serve(honest, model, random, 20_000));
    expect(results.filter((result) => result.quarantined)).toEqual([]);
    expect(percentile(results.map((result) => result.settledShare), 0.5)).toBeLessThanOrEqual(0.05);
  });
});
