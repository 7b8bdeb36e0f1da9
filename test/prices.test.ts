import OpenAI from 'openai';
import { sql } from 'slonik';
import { z } from 'zod';
import { boundOf, estimatePromptTokens, textTokens } from '../src/chat/usage';
import { auditLedger, getBalance } from '../src/db/ledger';
import { listCapabilities } from '../src/db/solvers';
import { FakeSolver, strongChat, suiteSolvers, talker, waitFor } from './support/fake-solver';
import { api, QUIET_TRUST_ENV, registerAccount, startTestStack, type TestStack } from './support/stack';

// A prompt of exactly 600 tokens (gpt-tokenizer), as in issue 41's bait row.
const PROMPT_600 = ' a'.repeat(600);
const chat600 = { model: 'service/strong', messages: [{ role: 'user' as const, content: PROMPT_600 }], max_tokens: 100 };
const usage600 = { prompt_tokens: 600, completion_tokens: 5, total_tokens: 605 };

describe('chat offers ranked, held and billed by their estimated price for the request', () => {
  let stack: TestStack;
  const startSolver = suiteSolvers(() => stack.url);
  const openai = (apiKey: string) => new OpenAI({ apiKey, baseURL: `${stack.url}/v1`, maxRetries: 0 });
  const offer = (min: string, rates: { marginal: string; prompt?: string; completion?: string }) =>
    strongChat({ min, marginal: rates.marginal }).map((capability) => ({
      ...capability,
      ...(rates.prompt ? { prompt_cost: rates.prompt } : {}),
      ...(rates.completion ? { completion_cost: rates.completion } : {}),
    }));
  const chatSolver = (capabilities: Record<string, unknown>[], behaviour: FakeSolver['behaviour'] = talker(['ok'], usage600)) => startSolver({ behaviour, capabilities });
  const taskOf = async (accountId: string) =>
    stack.db.oneFirst(sql.type(z.object({ task_id: z.string() }))`SELECT task_id FROM tasks WHERE account_id = ${accountId} ORDER BY created_at DESC LIMIT 1`);
  const ledgerExact = async () => expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });

  beforeAll(async () => {
    stack = await startTestStack({ env: { ...QUIET_TRUST_ENV, ACCEPT_TIMEOUT_MS: '1000', HEARTBEAT_INTERVAL_MS: '1000', PLATFORM_FEE_PERCENT: '10' } });
  });
  afterAll(async () => {
    await stack.close();
  });

  test('the prompt is counted with the tokenizer: the bait row\'s prompt is 600 tokens', () => {
    expect(estimatePromptTokens({ messages: chat600.messages })).toBe(600);
    // Special-token text is counted as text, not refused.
    expect(estimatePromptTokens({ messages: [{ content: '<|endoftext|>' }] })).toBeGreaterThan(0);
  });

  test('issue 41\'s bait row: 0.01 + 500/1k loses to 0.5 + 1/1k on a 600-token prompt; the hold is the fair estimate; the task shows it', async () => {
    const bait = await chatSolver(offer('0.01', { marginal: '500' }), talker(['ok'], { prompt_tokens: 600, completion_tokens: 100, total_tokens: 700 }));
    const fair = await chatSolver(offer('0.5', { marginal: '1' }));
    const client = await registerAccount(stack.url, '500');
    for (let i = 0; i < 3; i++) {
      const { response } = await openai(client.api_key).chat.completions.create(chat600).withResponse();
      // Estimate 0.5 + 1 × 600 / 1000 + 1 × 100 / 1000 = 1.2, held; charged 0.5 + (600 + 5) / 1000.
      expect([response.headers.get('x-points-charged'), response.headers.get('x-points-held')]).toEqual(['1.105', '1.2']);
    }
    expect([bait.received.length, fair.received.length]).toEqual([0, 3]);
    const task = await api(stack.url, 'GET', `/v1/tasks/${await taskOf(client.account_id)}`, { headers: client.auth });
    expect(task.json).toMatchObject({ estimated_price_points: '1.2', held_points: '1.2', charged_points: '1.105', max_price_points: '1.2' });
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '496.685', held_points: '0', lifetime_spent_points: '3.315' });
    await ledgerExact();
  });

  test('a bait under the cap loses too: ranked by base + rates × tokens, not by its base', async () => {
    // 0.01 + 50 × 0.7 = 35.01 against 0.5 + 0.7 = 1.2: below the chat cap of 100, so only the ranking keeps it off.
    const bait = await chatSolver(offer('0.01', { marginal: '50' }));
    const fair = await chatSolver(offer('0.5', { marginal: '1' }));
    const client = await registerAccount(stack.url, '500');
    for (let i = 0; i < 3; i++) await openai(client.api_key).chat.completions.create(chat600);
    expect([bait.received.length, fair.received.length]).toEqual([0, 3]);
    await ledgerExact();
  });

  test('prompt and completion rates apart: a cheap prompt rate wins a long prompt, and usage is billed at each rate', async () => {
    // For 600 prompt + 100 completion tokens: 0.5 + (0.1 × 600 + 4 × 100) / 1000 = 0.96 against 0.5 + 0.7 = 1.2.
    const split = await chatSolver(offer('0.5', { marginal: '1', prompt: '0.1', completion: '4' }));
    const flat = await chatSolver(offer('0.5', { marginal: '1' }));
    expect((await listCapabilities(stack.db, split.solverId))[0]).toMatchObject({ marginal_cost: '1', prompt_cost: '0.1', completion_cost: '4' });
    const client = await registerAccount(stack.url, '500');
    const { response } = await openai(client.api_key).chat.completions.create(chat600).withResponse();
    // 0.5 + (0.1 × 600 + 4 × 5) / 1000 = 0.58.
    expect([response.headers.get('x-points-charged'), response.headers.get('x-points-held')]).toEqual(['0.58', '0.96']);
    expect([split.received.length, flat.received.length]).toEqual([1, 0]);
    await ledgerExact();
  });

  test('each rate bills the metered usage: an inflated completion is billed at its bound, a smaller total as reported, prompt tokens first', async () => {
    // Streams "ok" but reports 5,000 completion tokens at 4 per 1,000: billed at the bound of what it delivered.
    const inflating = await chatSolver(offer('0.5', { marginal: '1', prompt: '0.1', completion: '4' }), talker(['ok'], { prompt_tokens: 600, completion_tokens: 5000, total_tokens: 5600 }));
    const client = await registerAccount(stack.url, '500');
    const bound = boundOf(textTokens('ok'));
    const first = await openai(client.api_key).chat.completions.create(chat600).withResponse();
    expect(Number(first.response.headers.get('x-points-charged'))).toBeCloseTo(0.5 + (0.1 * 600 + 4 * bound) / 1000, 9);
    expect(first.data.usage).toMatchObject({ prompt_tokens: 600, completion_tokens: bound });
    expect(inflating.received).toHaveLength(1);
    await inflating.close();
    await inflating.offline(stack.url);
    // A reported total of 300 (below 600 + 5) is what is billed: 300 prompt tokens, no completion token.
    const understating = await chatSolver(offer('0.5', { marginal: '1', prompt: '0.1', completion: '4' }), talker(['ok'], { prompt_tokens: 600, completion_tokens: 5, total_tokens: 300 }));
    const second = await openai(client.api_key).chat.completions.create(chat600).withResponse();
    expect(second.response.headers.get('x-points-charged')).toBe('0.53');
    expect(understating.received).toHaveLength(1);
    await ledgerExact();
  });

  test('an old solver sending only marginal_cost still works: both rates are its marginal_cost', async () => {
    const old = await chatSolver(strongChat({ min: '1', marginal: '2' }));
    expect((await listCapabilities(stack.db, old.solverId))[0]).toMatchObject({ marginal_cost: '2', prompt_cost: '2', completion_cost: '2' });
    const client = await registerAccount(stack.url, '500');
    const { response } = await openai(client.api_key).chat.completions.create(chat600).withResponse();
    // Held 1 + 2 × 700 / 1000 = 2.4; charged 1 + 2 × 605 / 1000 = 2.21.
    expect([response.headers.get('x-points-charged'), response.headers.get('x-points-held')]).toEqual(['2.21', '2.4']);
    await ledgerExact();
  });

  test('no max_tokens: the completion is estimated at the documented default budget', async () => {
    await chatSolver(offer('0.5', { marginal: '1' }));
    const client = await registerAccount(stack.url, '500');
    const { response } = await openai(client.api_key).chat.completions.create({ model: 'service/strong', messages: chat600.messages }).withResponse();
    // 0.5 + (600 + 4096) / 1000.
    expect(response.headers.get('x-points-held')).toBe('5.196');
    await ledgerExact();
  });

  test('provider.max_price, through the openai SDK\'s extra_body: offers above a limit are passed over, and a limit none meets is refused naming it', async () => {
    const dear = await chatSolver(offer('0.2', { marginal: '1', prompt: '0.5', completion: '3' }));
    const cheap = await chatSolver(offer('0.5', { marginal: '1', prompt: '1', completion: '1' }));
    const client = await registerAccount(stack.url, '500');
    const sdk = openai(client.api_key);
    // dear: 0.2 + (300 + 300) / 1000 = 0.8, the better estimate; but its completion rate is 3,000 per million.
    await sdk.chat.completions.create({ ...chat600, provider: { max_price: { completion: 2000 } } } as never);
    expect([dear.received.length, cheap.received.length]).toEqual([0, 1]);
    const refusal = async (maxPrice: Record<string, unknown>) => {
      const error = await sdk.chat.completions.create({ ...chat600, provider: { max_price: maxPrice } } as never).then(() => null, (thrown) => thrown);
      expect(error).toBeInstanceOf(OpenAI.APIError);
      return { status: error.status, code: error.code, param: error.param };
    };
    const before = await getBalance(stack.db, client.account_id);
    expect(await refusal({ prompt: 0.4 * 1000 })).toEqual({ status: 422, code: 'no_solver_within_price', param: 'provider.max_price.prompt' });
    expect(await refusal({ completion: '0.9' })).toEqual({ status: 422, code: 'no_solver_within_price', param: 'provider.max_price.completion' });
    expect(await refusal({ request: 0.1 })).toEqual({ status: 422, code: 'no_solver_within_price', param: 'provider.max_price.request' });
    // Each limit alone admits one offer; together none.
    expect(await refusal({ prompt: 600, completion: 2000 })).toEqual({ status: 422, code: 'no_solver_within_price', param: 'provider.max_price' });
    // A prompt whose estimate no offer can serve within the chat's maximum price (100 points).
    const huge = await sdk.chat.completions.create({ ...chat600, max_tokens: 1_000_000 }).then(() => null, (thrown) => thrown);
    expect({ status: huge.status, code: huge.code, param: huge.param }).toEqual({ status: 422, code: 'no_solver_within_price', param: 'max_price_points' });
    // Nothing was held or charged for a refusal.
    expect(await getBalance(stack.db, client.account_id)).toEqual(before);
    await ledgerExact();
  });

  test('provider.allow_fallbacks false: the chat is not handed to a second solver after the first fails; with fallbacks it is, its hold raised to a dearer offer', async () => {
    // The first solver fails only once a backup is online, so the backup is there to fall back to.
    let backupOnline: () => void = () => undefined;
    const failsOnceBackedUp = (): FakeSolver['behaviour'] => {
      const online = new Promise<void>((resolve) => {
        backupOnline = resolve;
      });
      return (frame, self) => {
        self.send({ type: 'accept', attempt_id: frame.attempt_id });
        void online.then(() =>
          self.send({ type: 'error', attempt_id: frame.attempt_id, error: { type: 'upstream_failed', message: 'scripted failure' }, retryable: true }),
        );
      };
    };
    const client = await registerAccount(stack.url, '500');
    let sdk = openai(client.api_key);
    const run = async (provider: Record<string, unknown> | undefined, backupOffer: Record<string, unknown>[]) => {
      const failing = await chatSolver(offer('0.1', { marginal: '1' }), failsOnceBackedUp());
      const answer = sdk.chat.completions.create({ ...chat600, ...(provider ? { provider } : {}) } as never).then(
        () => 'answered',
        (thrown) => ({ status: thrown.status, code: thrown.code }),
      );
      await waitFor(() => failing.received.length === 1);
      const backup = await chatSolver(backupOffer);
      backupOnline();
      const outcome = await answer;
      const served = [failing.received.length, backup.received.length];
      await Promise.all([failing, backup].map(async (solver) => { await solver.close(); await solver.offline(); }));
      return { outcome, served };
    };
    // Estimates: 0.1 + 0.7 = 0.8 for both, the hold.
    expect(await run({ allow_fallbacks: false }, offer('0.1', { marginal: '1' }))).toEqual({ outcome: { status: 502, code: 'solver_failed' }, served: [1, 0] });
    expect(await run(undefined, offer('0.1', { marginal: '1' }))).toEqual({ outcome: 'answered', served: [1, 1] });
    // A backup whose estimate (1.2) is above the hold (0.8): the hold is raised to it, and it is paid its price.
    expect(await run(undefined, offer('0.5', { marginal: '1' }))).toEqual({ outcome: 'answered', served: [1, 1] });
    const task = await api(stack.url, 'GET', `/v1/tasks/${await taskOf(client.account_id)}`, { headers: client.auth });
    expect(task.json).toMatchObject({ estimated_price_points: '1.2', held_points: '1.2', max_price_points: '1.2', charged_points: '1.105' });
    // Charged for the two answered chats: 0.1 + 0.605 and 0.5 + 0.605.
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ held_points: '0', lifetime_spent_points: '1.81' });
    // An account that cannot cover the raise (1 point: 0.8 held, 0.2 available, 0.4 needed) is not
    // overdrawn, nor left waiting: the chat fails at once.
    const poor = await registerAccount(stack.url, '1');
    sdk = openai(poor.api_key);
    const started = Date.now();
    expect(await run(undefined, offer('0.5', { marginal: '1' }))).toEqual({ outcome: { status: 502, code: 'solver_failed' }, served: [1, 0] });
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(await getBalance(stack.db, poor.account_id)).toMatchObject({ available_points: '1', held_points: '0', lifetime_spent_points: '0' });
    await ledgerExact();
  });

  test('offer fields are checked: a negative or malformed rate is refused with 422 naming it', async () => {
    const account = await registerAccount(stack.url);
    const refused = await api(stack.url, 'POST', '/v1/solver/capabilities', {
      body: offer('0.5', { marginal: '1', prompt: '-1' }),
      headers: account.auth,
    });
    expect(refused.status).toBe(422);
    expect(refused.text).toContain('prompt_cost');
  });
});
