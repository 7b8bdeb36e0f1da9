import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { DeliveredTokens, textTokens } from '../../src/chat/usage';

/**
 * Micro-benchmark: the CPU a chat's usage count costs per 1,000 streamed tokens (src/chat/usage.ts), in
 * this process alone. A 1,000-token answer is streamed as one delta per token through DeliveredTokens,
 * then counted; each round's text differs, so nothing is served from a cache.
 * `node --import tsx bench/lib/tokenizer.ts` prints it on its own.
 */
const WORDS = 'the quick brown fox jumps over a lazy dog while solvers stream answers to clients across nodes'.split(' ');

// Deltas added between two counts while an answer is built: counting the whole text after every delta
// would cost about a thousand counts an answer, seconds for the 200.
const BUILD_STEP = 32;

function answer(round: number): string[] {
  const delta = (i: number) => `${i === 0 ? '' : ' '}${WORDS[(i * 7 + round) % WORDS.length]}${i % 13 === 0 ? `${round}.` : ''}`;
  const deltas: string[] = [];
  // Whole steps while the text stays under 1,000 tokens, then one delta at a time up to them.
  while (textTokens([...deltas, ...Array.from({ length: BUILD_STEP }, (_, k) => delta(deltas.length + k))].join('')) < 1000) {
    for (let k = 0; k < BUILD_STEP; k++) deltas.push(delta(deltas.length));
  }
  while (textTokens(deltas.join('')) < 1000) deltas.push(delta(deltas.length));
  return deltas;
}

export async function tokenizerCost(rounds = 200): Promise<{ ms_per_1000_tokens: number; us_per_delta: number; rounds: number }> {
  const answers = Array.from({ length: rounds }, (_, round) => answer(round));
  // Warm the tokenizer (its tables load on first use) outside the measurement.
  await new DeliveredTokens({ messages: [] }).counted();
  const payload = { messages: [{ role: 'user', content: 'Tell me about foxes.' }] };
  let deltas = 0;
  const started = process.cpuUsage();
  for (const parts of answers) {
    const delivered = new DeliveredTokens(payload);
    for (const content of parts) delivered.add({ content });
    await delivered.counted();
    deltas += parts.length;
  }
  const spent = process.cpuUsage(started);
  const ms = (spent.user + spent.system) / 1000;
  return { ms_per_1000_tokens: Math.round((ms / rounds) * 1000) / 1000, us_per_delta: Math.round(((ms * 1000) / deltas) * 100) / 100, rounds };
}

/**
 * tokenizerCost in a process of its own: it runs for seconds without yielding, and in the benchmark's
 * process it would stop the simulated solvers from answering the API's pings, which then drops them as
 * gone (a missed heartbeat). Its own process also keeps the benchmark's CPU out of the figure.
 */
export async function tokenizerCostApart(): Promise<Awaited<ReturnType<typeof tokenizerCost>>> {
  const { stdout } = await promisify(execFile)(process.execPath, [...process.execArgv.filter((arg) => arg !== '-e' && arg !== '--eval' && !arg.startsWith('--eval=')), __filename]);
  return JSON.parse(stdout);
}

if (require.main === module) void tokenizerCost().then((cost) => console.log(JSON.stringify(cost)));
