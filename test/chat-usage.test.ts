import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import OpenAI from 'openai';
import { sql } from 'slonik';
import { z } from 'zod';
import { boundOf, estimatePromptTokens, promptTokens, textTokens } from '../src/chat/usage';
import { auditLedger, getBalance } from '../src/db/ledger';
import { replaceCapabilities } from '../src/db/solvers';
import type { SolverCapabilityInput } from '../src/schemas/requests';
import { FakeSolver, SAMPLE_RESULTS, strongChat, suiteSolvers, waitFor, type TaskFrame } from './support/fake-solver';
import { ADMIN_KEY, api, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * Usage the service counts (docs/decisions.md, "How a chat is billed"): a chat is billed for the smaller
 * of its solver's report and the bound of what the service counted; a report above the bound is
 * evidence. Web task types are billed per request only.
 */

const QUESTION = 'What is two plus two? Answer in four words.';
const FOUR_WORDS = ['The', ' answer', ' is', ' four.'];
const ADMIN = { 'X-Admin-API-Key': ADMIN_KEY };

/** A chat solver that streams `deltas` and reports `usage` (a function of the task frame, for reports made from the prompt). */
function reporter(deltas: Record<string, unknown>[], usage: (frame: TaskFrame) => Record<string, unknown>) {
  return (frame: TaskFrame, self: FakeSolver) => {
    self.send({ type: 'accept', attempt_id: frame.attempt_id });
    for (const delta of deltas) self.send({ type: 'chunk', attempt_id: frame.attempt_id, delta });
    self.send({ type: 'result', attempt_id: frame.attempt_id, result: { finish_reason: 'stop', usage: usage(frame) } });
  };
}

const words = (list: string[]) => list.map((content) => ({ content }));
/** min + marginal × tokens / 1000, as the ledger writes it (no trailing zeros). */
const price = (min: number, marginal: number, tokens: number) => String(Number((min + (marginal * tokens) / 1000).toFixed(9)));

describe('usage the service counts', () => {
  let stack: TestStack;
  const startSolver = suiteSolvers(() => stack.url);
  const openai = (apiKey: string) => new OpenAI({ apiKey, baseURL: `${stack.url}/v1`, maxRetries: 0 });
  const ask = (apiKey: string, options: { max_tokens?: number } = {}) =>
    openai(apiKey).chat.completions.create({ model: 'strong', messages: [{ role: 'user', content: QUESTION }], ...options });
  const trustOf = async (solverId: string) => (await api(stack.url, 'GET', `/v1/admin/solvers/${solverId}/trust`, { headers: ADMIN })).json;
  const expectLedgerExact = async () => expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });

  beforeAll(async () => {
    stack = await startTestStack({ env: { PLATFORM_FEE_PERCENT: '10' } });
  });
  afterAll(async () => {
    await stack.close();
  });

  test('a chat listed at 0.5 + 2 per 1,000 tokens that streams four words and reports 9,000 tokens is billed at the bound, and the report is evidence', async () => {
    const cheat = await startSolver({
      behaviour: reporter(words(FOUR_WORDS), () => ({ prompt_tokens: 20, completion_tokens: 8980, total_tokens: 9000 })),
      capabilities: strongChat({ min: '0.5', marginal: '2' }),
    });
    const client = await registerAccount(stack.url, '500');
    const bound = boundOf(textTokens(FOUR_WORDS.join('')));
    const billed = { prompt_tokens: 20, completion_tokens: bound, total_tokens: 20 + bound };

    const { data: completion, response } = await ask(client.api_key).withResponse();
    expect(completion.choices[0].message.content).toBe('The answer is four.');
    // The client's usage shows what was billed: 0.5 + 2 × (20 + 40) / 1000 = 0.62, not 18.5.
    expect(completion.usage).toEqual(billed);
    const charged = price(0.5, 2, billed.total_tokens);
    expect(Number(charged)).toBeLessThan(0.7);
    expect(response.headers.get('x-points-charged')).toBe(charged);
    expect((await getBalance(stack.db, client.account_id))?.lifetime_spent_points).toBe(charged);

    const trust = await trustOf(cheat.solverId);
    expect(trust.usage_inflations).toEqual([
      expect.objectContaining({
        task_type: 'chat_completion',
        reported: { prompt_tokens: 20, completion_tokens: 8980, total_tokens: 9000, reasoning_tokens: null },
        counted: { prompt_tokens: promptTokens(cheat.received[0].payload), completion_tokens: textTokens(FOUR_WORDS.join('')), reasoning_tokens: 0 },
        bound: { prompt_tokens: boundOf(promptTokens(cheat.received[0].payload)), completion_tokens: bound },
        billed,
      }),
    ]);
    // Counted like a failed chat audit (3 failures); one report does not quarantine.
    expect(trust.reputation.find((row: { task_type: string }) => row.task_type === 'chat_completion').failures).toBeGreaterThan(2.9);
    expect(trust.quarantined).toBe(false);

    // A second inflated report, streamed: the final usage chunk shows the billed usage, and the solver is
    // quarantined with both numbers as evidence and its earnings from that chat held.
    const stream = await openai(client.api_key).chat.completions.create({
      model: 'strong',
      messages: [{ role: 'user', content: QUESTION }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
    for await (const part of stream) chunks.push(part);
    expect(chunks[chunks.length - 1].usage).toEqual(billed);
    const after = await trustOf(cheat.solverId);
    expect(after.usage_inflations).toHaveLength(2);
    expect(after.quarantined).toBe(true);
    expect(after.quarantines[0]).toMatchObject({
      reason: 'usage_inflated',
      evidence: { reported: { completion_tokens: 8980 }, bound: { completion_tokens: bound }, billed, inflated_reports: 2 },
    });
    expect(after.held_points).toBe(String(Number((Number(charged) * 0.9).toFixed(9))));
    await expectLedgerExact();
  });

  test('an honest report is billed as reported, and one that under-reports is billed what it reports', async () => {
    let report: (frame: TaskFrame) => Record<string, unknown> = (frame) => ({
      prompt_tokens: promptTokens(frame.payload),
      completion_tokens: countTokens(FOUR_WORDS.join('')),
    });
    const honest = await startSolver({ behaviour: reporter(words(FOUR_WORDS), (frame) => report(frame)), capabilities: strongChat({ min: '0.5', marginal: '2' }) });
    const client = await registerAccount(stack.url, '500');
    const first = await ask(client.api_key);
    const tokens = promptTokens(honest.received[0].payload) + countTokens(FOUR_WORDS.join(''));
    expect(first.usage).toEqual({ prompt_tokens: promptTokens(honest.received[0].payload), completion_tokens: countTokens(FOUR_WORDS.join('')), total_tokens: tokens });
    expect((await getBalance(stack.db, client.account_id))?.lifetime_spent_points).toBe(price(0.5, 2, tokens));

    report = () => ({ prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 });
    const second = await ask(client.api_key);
    expect(second.usage).toEqual({ prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 });
    expect((await getBalance(stack.db, client.account_id))?.lifetime_spent_points).toBe(price(1, 2, tokens + 2));
    expect((await trustOf(honest.solverId)).usage_inflations).toEqual([]);
    await expectLedgerExact();
  });

  test('inflating by exactly the tolerance is billed as reported; one token more is billed at the bound and is evidence', async () => {
    let extra = 0;
    const bound = boundOf(textTokens(FOUR_WORDS.join('')));
    const solver = await startSolver({ behaviour: reporter(words(FOUR_WORDS), () => ({ prompt_tokens: 10, completion_tokens: bound + extra })), capabilities: strongChat({ min: '0', marginal: '1000' }) });
    const client = await registerAccount(stack.url, '500');
    // At 1 point a token the offer is estimated at the prompt + max_tokens (the default 4,096 would put it
    // above the chat's maximum): a budget above the bound, so the hold does not cap the charge.
    const budget = { max_tokens: bound + 20 };
    expect((await ask(client.api_key, budget)).usage?.completion_tokens).toBe(bound);
    expect((await trustOf(solver.solverId)).usage_inflations).toEqual([]);
    extra = 1;
    expect((await ask(client.api_key, budget)).usage?.completion_tokens).toBe(bound);
    expect((await trustOf(solver.solverId)).usage_inflations).toEqual([expect.objectContaining({ reported: expect.objectContaining({ completion_tokens: bound + 1 }) })]);
    // 1 point a token: both billed (10 + bound) tokens.
    expect((await getBalance(stack.db, client.account_id))?.lifetime_spent_points).toBe(String(2 * (10 + bound)));
    await expectLedgerExact();
  });

  test('padding deltas with invisible characters does not raise the bound: delivered to the client, not counted', async () => {
    const padding = '\u200b'.repeat(300);
    const padded = FOUR_WORDS.map((word) => `${word}${padding}`);
    // The report counts the padding as a tokenizer would if it were text.
    const reported = countTokens(padded.join(''));
    const solver = await startSolver({ behaviour: reporter(words(padded), () => ({ prompt_tokens: 10, completion_tokens: reported })), capabilities: strongChat({ min: '0.5', marginal: '2' }) });
    const client = await registerAccount(stack.url, '500');
    const completion = await ask(client.api_key);
    expect(completion.choices[0].message.content).toBe(padded.join(''));
    const bound = boundOf(textTokens(FOUR_WORDS.join('')));
    expect(reported).toBeGreaterThan(bound);
    expect(completion.usage).toEqual({ prompt_tokens: 10, completion_tokens: bound, total_tokens: 10 + bound });
    expect((await trustOf(solver.solverId)).usage_inflations).toHaveLength(1);
    await expectLedgerExact();
  });

  test('reasoning: streamed reasoning is billed and delivered in the JSON answer too; hidden reasoning is not billed and, declared, is no evidence', async () => {
    const thought = 'Two plus two is four, so the answer is four. '.repeat(20);
    const thoughtTokens = textTokens(thought);
    let streamReasoning = true;
    const solver = await startSolver({
      behaviour: (frame, self) =>
        reporter(
          [...(streamReasoning ? [{ reasoning_content: thought }] : []), { content: 'Four.' }],
          () => ({ prompt_tokens: 10, completion_tokens: thoughtTokens + 2, completion_tokens_details: { reasoning_tokens: thoughtTokens } }),
        )(frame, self),
      capabilities: strongChat({ min: '0.5', marginal: '2' }),
    });
    const client = await registerAccount(stack.url, '500');
    const reasoned = await ask(client.api_key);
    expect(reasoned.usage?.completion_tokens).toBe(thoughtTokens + 2);
    // Billed, so delivered: the JSON answer carries it as DeepSeek's API does, which the openai SDK passes on.
    expect((reasoned.choices[0]!.message as { reasoning_content?: string }).reasoning_content).toBe(thought);
    streamReasoning = false;
    const hidden = await ask(client.api_key);
    expect(hidden.usage?.completion_tokens).toBe(boundOf(textTokens('Four.')));
    expect(hidden.choices[0]!.message).not.toHaveProperty('reasoning_content');
    expect((await trustOf(solver.solverId)).usage_inflations).toEqual([]);
    await expectLedgerExact();
  });

  test('web task types are billed per request: a per_token offer is refused with 422, and the market says so', async () => {
    const solver = await registerAccount(stack.url);
    const offer = (taskType: string, billing: string) => ({
      task_type: taskType,
      tier: taskType === 'chat_completion' ? 'strong' : 'standard',
      billing_type: billing,
      fulfillment_path: 'http',
      provider_name: 'cheat',
      model_name: 'gpt-4o',
      marginal_cost: '100',
      min_price_points: '0.1',
      max_concurrent: 4,
    });
    // The cheat: proxy_fetch at 0.1 + 100 per 1,000 tokens.
    const refused = await api(stack.url, 'POST', '/v1/solver/capabilities', { headers: { Authorization: `Bearer ${solver.api_key}` }, body: [offer('chat_completion', 'per_token'), offer('proxy_fetch', 'per_token')] });
    expect(refused.status).toBe(422);
    expect(refused.json.detail).toEqual([expect.objectContaining({ type: 'literal_error', loc: ['body', 1, 'billing_type'], input: 'per_token', ctx: { expected: "'per_request'" } })]);
    for (const taskType of ['web_search', 'screenshot', 'page_snapshot']) {
      expect((await api(stack.url, 'POST', '/v1/solver/capabilities', { headers: { Authorization: `Bearer ${solver.api_key}` }, body: [offer(taskType, 'per_token')] })).status).toBe(422);
    }
    const accepted = await api(stack.url, 'POST', '/v1/solver/capabilities', { headers: { Authorization: `Bearer ${solver.api_key}` }, body: [offer('chat_completion', 'per_token'), offer('proxy_fetch', 'per_request')] });
    expect(accepted.status).toBe(200);
    const market = (await api(stack.url, 'GET', '/v1/solver/market', { headers: { Authorization: `Bearer ${solver.api_key}` } })).json;
    expect(market.task_types.proxy_fetch.billing_types).toEqual(['per_request']);
    expect(market.task_types.chat_completion.billing_types).toEqual(['per_request', 'per_token']);
  });

  test('a web task settled on a per_token offer stored before the rule bills no tokens', async () => {
    const cheat = await startSolver({
      taskTypes: ['proxy_fetch'],
      price: '0.1',
      behaviour: (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        self.send({ type: 'result', attempt_id: frame.attempt_id, result: { ...SAMPLE_RESULTS.proxy_fetch(frame.payload), usage: { prompt_tokens: 0, completion_tokens: 10000, total_tokens: 10000 } } });
      },
    });
    // Written past the route's check, as a row from before it would be.
    const stored: SolverCapabilityInput = {
      task_type: 'proxy_fetch',
      tier: 'standard',
      billing_type: 'per_token',
      fulfillment_path: 'http',
      provider_name: 'fake',
      model_name: 'fake',
      marginal_cost: '100',
      min_price_points: '0.1',
      max_concurrent: 8,
    };
    await replaceCapabilities(stack.db, stack.config.trust, cheat.solverId, [stored]);
    const client = await registerAccount(stack.url, '500');
    const fetched = await api(stack.url, 'POST', '/v1/fetch', { headers: { Authorization: `Bearer ${client.api_key}` }, body: { url: 'https://example.com/usage' } });
    expect(fetched.status).toBe(200);
    expect((await getBalance(stack.db, client.account_id))?.lifetime_spent_points).toBe('0.1');
    await expectLedgerExact();
  });

  describe('what a chat its client ends is billed (docs/queue.md, "What a chat pays")', () => {
    /** A solver that streams `deltas` and then works on, its report never sent: it answers only a stop. */
    const streamsThenWorks = (deltas: Record<string, unknown>[], sent: () => void = () => undefined) => (frame: TaskFrame, self: FakeSolver) => {
      self.send({ type: 'accept', attempt_id: frame.attempt_id });
      for (const delta of deltas) self.send({ type: 'chunk', attempt_id: frame.attempt_id, delta });
      sent();
    };
    const taskOf = async (apiKey: string, taskId: string) => (await api(stack.url, 'GET', `/v1/tasks/${taskId}`, { headers: { Authorization: `Bearer ${apiKey}` } })).json;
    const ended = async (apiKey: string, taskId: string) => {
      let task: Record<string, any> = {};
      await waitFor(async () => ['failed', 'cancelled', 'completed'].includes((task = await taskOf(apiKey, taskId)).status), 15_000);
      return task;
    };
    /** What the service counts of a stopped attempt: its prompt and the text of the deltas it relayed (reasoning and answer apart). */
    const deliveredPrice = (frame: TaskFrame, texts: string[], min = 0.5, marginal = 2) =>
      price(min, marginal, texts.reduce((sum, text) => sum + textTokens(text), promptTokens(frame.payload)));
    const earned = async (solverId: string) => (await getBalance(stack.db, solverId))?.lifetime_earned_points;

    test('a stream the client aborts after three chunks: the client pays for the prompt and what it got (reasoning included), the solver earns it', async () => {
      const deltas = [{ reasoning_content: 'Two and two make four.' }, ...words(FOUR_WORDS.slice(0, 2))];
      const solver = await startSolver({ behaviour: streamsThenWorks(deltas), capabilities: strongChat({ min: '0.5', marginal: '2' }) });
      const client = await registerAccount(stack.url, '500');
      const stream = await openai(client.api_key).chat.completions.create({ model: 'strong', messages: [{ role: 'user', content: QUESTION }], stream: true });
      const got: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
      for await (const part of stream) {
        got.push(part);
        if (got.length === deltas.length) break;
      }
      stream.controller.abort();
      // The reasoning it pays for reached it, as the SDK passes it on.
      expect((got[0].choices[0].delta as { reasoning_content?: string }).reasoning_content).toBe('Two and two make four.');
      await waitFor(() => solver.cancels.length === 1);
      const task = await ended(client.api_key, solver.received[0].task_id);
      const charged = deliveredPrice(solver.received[0], ['Two and two make four.', 'The answer']);
      expect(task).toMatchObject({ status: 'failed', error: { type: 'client_cancelled' }, hold_status: 'settled', charged_points: charged, solver_id: solver.solverId });
      expect(Number(charged)).toBeGreaterThan(0.5);
      expect((await getBalance(stack.db, client.account_id))?.lifetime_spent_points).toBe(charged);
      // Paid as a completed chat's solver is, less the platform's 10 %.
      expect(await earned(solver.solverId)).toBe(String(Number((Number(charged) * 0.9).toFixed(9))));
      await expectLedgerExact();
    });

    test('a JSON client that disconnects once the answer has streamed upstream, before the solver reports: billed for the whole answer', async () => {
      let streamed!: () => void;
      const answered = new Promise<void>((resolve) => (streamed = resolve));
      const solver = await startSolver({ behaviour: streamsThenWorks(words(FOUR_WORDS), () => streamed()), capabilities: strongChat({ min: '0.5', marginal: '2' }) });
      const client = await registerAccount(stack.url, '500');
      const controller = new AbortController();
      const request = openai(client.api_key).chat.completions.create({ model: 'strong', messages: [{ role: 'user', content: QUESTION }] }, { signal: controller.signal });
      await answered;
      // The deltas are on their way to the client's node, which assembles the JSON answer.
      await new Promise((resolve) => setTimeout(resolve, 300));
      controller.abort();
      await expect(request).rejects.toThrow();
      const task = await ended(client.api_key, solver.received[0].task_id);
      const charged = deliveredPrice(solver.received[0], [FOUR_WORDS.join('')]);
      expect(task).toMatchObject({ status: 'failed', error: { type: 'client_cancelled' }, hold_status: 'settled', charged_points: charged });
      expect(await earned(solver.solverId)).toBe(String(Number((Number(charged) * 0.9).toFixed(9))));
      await expectLedgerExact();
    });

    test('a chat cancelled by its client (POST /v1/tasks/{id}/cancel) after content ends cancelled, charged for what was delivered; before content, nothing', async () => {
      let deltas = words(FOUR_WORDS.slice(0, 1));
      let streamed!: () => void;
      let answered = new Promise<void>((resolve) => (streamed = resolve));
      const solver = await startSolver({ behaviour: (frame, self) => streamsThenWorks(deltas, () => streamed())(frame, self), capabilities: strongChat({ min: '0.5', marginal: '2' }) });
      const client = await registerAccount(stack.url, '500');
      const cancelAfterContent = async (attempt: number) => {
        const request = openai(client.api_key).chat.completions.create({ model: 'strong', messages: [{ role: 'user', content: QUESTION }] });
        request.catch(() => undefined);
        await answered;
        await new Promise((resolve) => setTimeout(resolve, 300));
        const taskId = solver.received[attempt].task_id;
        const cancelled = await api(stack.url, 'POST', `/v1/tasks/${taskId}/cancel`, { headers: client.auth });
        expect(cancelled.status).toBe(200);
        const error = await request.catch((thrown) => thrown);
        expect(error).toBeInstanceOf(OpenAI.APIError);
        return cancelled.json;
      };
      const first = await cancelAfterContent(0);
      const charged = deliveredPrice(solver.received[0], [FOUR_WORDS[0]]);
      expect(first).toMatchObject({ status: 'cancelled', error: { type: 'task_cancelled' }, hold_status: 'settled', charged_points: charged });
      expect(await earned(solver.solverId)).toBe(String(Number((Number(charged) * 0.9).toFixed(9))));

      deltas = [];
      answered = new Promise<void>((resolve) => (streamed = resolve));
      const second = await cancelAfterContent(1);
      expect(second).toMatchObject({ status: 'cancelled', hold_status: 'released', charged_points: '0' });
      expect((await getBalance(stack.db, client.account_id))?.lifetime_spent_points).toBe(charged);
      await expectLedgerExact();
    });

    test('a chat that waits holds the estimate of the cheapest offer it may go to, raised when a dearer offer\'s slot is handed to it', async () => {
      const oneSlot = (min: string, marginal: string) => strongChat({ min, marginal }).map((capability) => ({ ...capability, max_concurrent: 1 }));
      const held: { frame: TaskFrame; self: FakeSolver }[] = [];
      const keep = (frame: TaskFrame, self: FakeSolver) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        held.push({ frame, self });
      };
      const finish = ({ frame, self }: { frame: TaskFrame; self: FakeSolver }) => reporter(words(FOUR_WORDS), () => ({ prompt_tokens: 10, completion_tokens: 5 }))(frame, self);
      const cheap = await startSolver({ behaviour: keep, capabilities: oneSlot('0.5', '1') });
      const dear = await startSolver({ behaviour: keep, capabilities: oneSlot('1', '2') });
      const client = await registerAccount(stack.url, '500');
      const body = { model: 'strong', messages: [{ role: 'user' as const, content: QUESTION }], max_tokens: 100 };
      const tokens = estimatePromptTokens(body) + 100;
      const estimate = { cheap: price(0.5, 1, tokens), dear: price(1, 2, tokens) };
      const sdk = openai(client.api_key);
      const answers = [sdk.chat.completions.create(body), sdk.chat.completions.create(body)];
      await waitFor(() => held.length === 2);
      expect(cheap.received).toHaveLength(1);
      expect(dear.received).toHaveLength(1);
      // Both offers busy: the third waits, holding the cheaper estimate, not the chat's maximum (100).
      answers.push(sdk.chat.completions.create(body));
      let waiting = '';
      await waitFor(async () => (waiting = (await stack.db.maybeOneFirst(sql.type(z.object({ task_id: z.string() }))`SELECT task_id FROM task_queue q JOIN tasks t USING (task_id) WHERE t.account_id = ${client.account_id}`)) ?? '') !== '');
      expect(await taskOf(client.api_key, waiting)).toMatchObject({ status: 'queued', held_points: estimate.cheap });
      expect((await getBalance(stack.db, client.account_id))?.held_points).toBe(String(Number((Number(estimate.cheap) * 2 + Number(estimate.dear)).toFixed(9))));
      // The dearer solver's slot frees first: the waiting chat takes it, its hold raised to that offer's estimate.
      finish(held.find(({ self }) => self === dear)!);
      await waitFor(() => held.length === 3);
      expect(held[2].self).toBe(dear);
      expect(await taskOf(client.api_key, waiting)).toMatchObject({ status: 'assigned', held_points: estimate.dear, estimated_price_points: estimate.dear });
      finish(held[2]);
      finish(held.find(({ self }) => self === cheap)!);
      await Promise.all(answers);
      const task = await taskOf(client.api_key, waiting);
      expect(task).toMatchObject({ status: 'completed', held_points: estimate.dear, hold_status: 'settled' });
      expect(Number(task.charged_points)).toBeLessThanOrEqual(Number(task.held_points));
      expect((await getBalance(stack.db, client.account_id))?.held_points).toBe('0');
      await expectLedgerExact();
    });
  

    test('under a key with a spend limit, which counts the first hold only, a chat that waits holds its maximum', async () => {
      const held: { frame: TaskFrame; self: FakeSolver }[] = [];
      await startSolver({
        behaviour: (frame, self) => {
          self.send({ type: 'accept', attempt_id: frame.attempt_id });
          held.push({ frame, self });
        },
        capabilities: strongChat({ min: '0.5', marginal: '1' }).map((capability) => ({ ...capability, max_concurrent: 1 })),
      });
      const client = await registerAccount(stack.url, '500');
      const capped = (await api(stack.url, 'POST', '/v1/account/keys', { headers: client.auth, body: { name: 'capped', spend_limit: { points: '300', period: 'total' } } })).json.api_key;
      const body = { model: 'strong', messages: [{ role: 'user' as const, content: QUESTION }], max_tokens: 100 };
      const answers = [openai(client.api_key).chat.completions.create(body)];
      await waitFor(() => held.length === 1);
      answers.push(openai(capped).chat.completions.create(body));
      let waiting = '';
      await waitFor(async () => (waiting = (await stack.db.maybeOneFirst(sql.type(z.object({ task_id: z.string() }))`SELECT task_id FROM task_queue q JOIN tasks t USING (task_id) WHERE t.account_id = ${client.account_id}`)) ?? '') !== '');
      expect(await taskOf(client.api_key, waiting)).toMatchObject({ status: 'queued', held_points: '100' });
      held[0].self.send({ type: 'result', attempt_id: held[0].frame.attempt_id, result: { finish_reason: 'stop', usage: { prompt_tokens: 1, completion_tokens: 0 } } });
      await waitFor(() => held.length === 2);
      held[1].self.send({ type: 'chunk', attempt_id: held[1].frame.attempt_id, delta: { content: 'Four.' } });
      held[1].self.send({ type: 'result', attempt_id: held[1].frame.attempt_id, result: { finish_reason: 'stop', usage: { prompt_tokens: 1, completion_tokens: 1 } } });
      await Promise.all(answers);
      expect(await taskOf(client.api_key, waiting)).toMatchObject({ status: 'completed', held_points: '100', charged_points: price(0.5, 1, 2) });
      await expectLedgerExact();
    });
  });
});
