import { DeliveredTokens, textTokens } from '../../src/chat/usage';

/**
 * Micro-benchmark: the CPU a chat's usage count costs per 1,000 streamed tokens (src/chat/usage.ts), in
 * this process alone. A 1,000-token answer is streamed as one delta per token through DeliveredTokens,
 * then counted; each round's text differs, so nothing is served from a cache.
 * `node --import tsx bench/lib/tokenizer.ts` prints it on its own.
 */
const WORDS = 'the quick brown fox jumps over a lazy dog while solvers stream answers to clients across nodes'.split(' ');

function answer(round: number): string[] {
  const deltas: string[] = [];
  let text = '';
  for (let i = 0; textTokens(text) < 1000; i++) {
    const delta = `${i === 0 ? '' : ' '}${WORDS[(i * 7 + round) % WORDS.length]}${i % 13 === 0 ? `${round}.` : ''}`;
    deltas.push(delta);
    text += delta;
  }
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

if (require.main === module) void tokenizerCost().then((cost) => console.log(JSON.stringify(cost)));
