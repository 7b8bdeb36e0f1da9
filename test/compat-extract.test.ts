import crypto from 'node:crypto';
import Firecrawl from '@mendable/firecrawl-js';
import { auditLedger, getBalance } from '../src/db/ledger';
import { FakeSolver, SAMPLE_RESULTS, strongChat, suiteSolvers, waitFor, type TaskFrame } from './support/fake-solver';
import { runFirecrawlPy } from './support/firecrawl-py';
import { api, registerAccount, startTestStack, type TestStack } from './support/stack';

/**
 * Firecrawl's json and summary formats (docs/decisions.md, "json and summary"): the page from a web
 * solver, then a strong-tier chat on its markdown, validated (one repair), billed as one request.
 */

const PAGE = `<!doctype html><html lang="en"><head><title>Widget Deluxe</title></head>
<body><main><h1>Widget Deluxe</h1><p>The finest widget. Price: 42 points. In stock.</p></main></body></html>`;

/** Answers fetches with PAGE; other web tasks with samples. */
function pageSolver(frame: TaskFrame, self: FakeSolver) {
  self.send({ type: 'accept', attempt_id: frame.attempt_id });
  const url = frame.payload.url as string;
  if (frame.task_type !== 'proxy_fetch') return self.send({ type: 'result', attempt_id: frame.attempt_id, result: SAMPLE_RESULTS[frame.task_type]!(frame.payload) });
  self.send({ type: 'result', attempt_id: frame.attempt_id, result: { url, final_url: url, status_code: 200, content_type: 'html', content: PAGE, title: null } });
}

const tokensFor = (text: string) => Math.max(1, Math.ceil(text.length / 4));

/**
 * What a model would answer from the page in the prompt: the schema's fields filled from the markdown
 * (a string from its first heading, a number from its first number, a boolean from "in stock"), or a
 * summary naming the heading. `mistakes` first answers are wrong (a string where the schema wants a number).
 */
function reader(mistakes: number) {
  let wrong = 0;
  return (frame: TaskFrame, self: FakeSolver) => {
    self.send({ type: 'accept', attempt_id: frame.attempt_id });
    const messages = frame.payload.messages as { role: string; content: string }[];
    const prompt = messages.map((message) => message.content).join('\n');
    const page = prompt.match(/<page>\n([\s\S]*?)\n<\/page>/)?.[1] ?? '';
    const heading = page.match(/^#\s+(.+)$/m)?.[1] ?? '';
    const format = frame.payload.response_format as { type: string; json_schema?: { schema: { properties: Record<string, { type: string }> } } } | undefined;
    let answer: string;
    if (!format) answer = `A product page for ${heading}, priced at ${page.match(/\d+/)?.[0]} points.`;
    else if (wrong < mistakes) {
      wrong += 1;
      answer = JSON.stringify({ title: heading, price: 'forty-two' });
    } else {
      const properties = format.json_schema?.schema.properties ?? { title: { type: 'string' } };
      const value: Record<string, unknown> = {};
      for (const [field, property] of Object.entries(properties)) {
        value[field] = property.type === 'number' || property.type === 'integer' ? Number(page.match(/\d+/)?.[0]) : property.type === 'boolean' ? /in stock/i.test(page) : heading;
      }
      answer = `\`\`\`json\n${JSON.stringify(value)}\n\`\`\``;
    }
    const half = Math.floor(answer.length / 2);
    self.send({ type: 'chunk', attempt_id: frame.attempt_id, delta: { content: answer.slice(0, half) } });
    self.send({ type: 'chunk', attempt_id: frame.attempt_id, delta: { content: answer.slice(half) } });
    const usage = { prompt_tokens: tokensFor(prompt), completion_tokens: tokensFor(answer), total_tokens: tokensFor(prompt) + tokensFor(answer) };
    self.send({ type: 'result', attempt_id: frame.attempt_id, result: { finish_reason: 'stop', usage } });
  };
}

const SCHEMA = {
  type: 'object',
  properties: { title: { type: 'string' }, price: { type: 'number' }, inStock: { type: 'boolean' } },
  required: ['title', 'price', 'inStock'],
  additionalProperties: false,
};

let stack: TestStack;
const solvers = suiteSolvers(() => stack.url);
const freshUrl = () => `https://example.com/extract/${crypto.randomUUID()}`;
const scrape = (auth: Record<string, string>, body: Record<string, unknown>) => api(stack.url, 'POST', '/v2/scrape', { headers: auth, body });
const task = async (auth: Record<string, string>, taskId: string) => (await api(stack.url, 'GET', `/v1/tasks/${taskId}`, { headers: auth })).json;
/** A sum of decimal points, exact to the ledger's precision (thousandths and finer). */
const sum = (values: string[]) => Math.round(values.reduce((total, value) => total + Number(value) * 1e9, 0)) / 1e9;

/** Every task of the answer: its charge, and the answer's total, headers and parts agree; the ledger is exact. */
async function expectOneBill(answer: { headers: Headers; json: any }, auth: Record<string, string>) {
  const metadata = answer.json.data.metadata;
  const { page, completions } = metadata.costParts;
  expect(metadata.taskIds).toEqual([...page.taskIds, ...completions.taskIds]);
  const pageCharges = await Promise.all(page.taskIds.map(async (id: string) => (await task(auth, id)).charged_points as string));
  const chatTasks = await Promise.all(completions.taskIds.map((id: string) => task(auth, id)));
  expect(chatTasks.every((chat) => chat.task_type === 'chat_completion' && chat.status === 'completed')).toBe(true);
  expect(Number(page.pointsCharged)).toBe(sum(pageCharges));
  expect(Number(completions.pointsCharged)).toBe(sum(chatTasks.map((chat) => chat.charged_points)));
  expect(Number(completions.pointsCharged)).toBeGreaterThan(0);
  expect(Number(metadata.pointsCharged)).toBe(sum([page.pointsCharged, completions.pointsCharged]));
  expect(answer.headers.get('x-points-charged')).toBe(metadata.pointsCharged);
  expect(completions.promptTokens).toBeGreaterThan(0);
  expect(completions.completionTokens).toBeGreaterThan(0);
  await waitFor(async () => (await auditLedger(stack.db)).openHoldsOnFinishedTasks === 0);
  expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
}

beforeAll(async () => {
  // The service's default maxAge (the suites' stacks turn it off), so that a repeat finds the page cached.
  stack = await startTestStack({ env: { PAGE_CACHE_DEFAULT_MAX_AGE_SECONDS: String(2 * 86400) } });
}, 120_000);

afterAll(async () => {
  await stack?.close();
});

describe('json', () => {
  test('fills the schema from the page: one request, the page\'s price plus the chat\'s tokens, both shown', async () => {
    const web = await solvers({ behaviour: pageSolver, price: '2' });
    const chat = await solvers({ behaviour: reader(0), capabilities: strongChat() });
    const client = await registerAccount(stack.url, '1000');
    const answer = await scrape(client.auth, { url: freshUrl(), formats: [{ type: 'json', schema: SCHEMA, prompt: 'The product' }] });
    expect(answer.status).toBe(200);
    expect(answer.json.data.json).toEqual({ title: 'Widget Deluxe', price: 42, inStock: true });
    expect(answer.json.data.markdown).toBeUndefined();
    expect(answer.json.data.metadata).toMatchObject({ cacheState: 'miss', title: 'Widget Deluxe', costParts: { page: { pointsCharged: '2' } } });
    expect(web.received).toHaveLength(1);
    // The chat is structured output with the schema, and the page's markdown in its prompt.
    expect(chat.received).toHaveLength(1);
    expect(chat.received[0]!.payload.response_format).toEqual({ type: 'json_schema', json_schema: { name: 'extraction', schema: SCHEMA, strict: true } });
    expect(JSON.stringify(chat.received[0]!.payload.messages)).toContain('Widget Deluxe');
    await expectOneBill(answer, client.auth);
    const balance = await getBalance(stack.db, client.account_id);
    expect(Number(balance!.available_points)).toBe(sum(['1000', `-${answer.json.data.metadata.pointsCharged}`]));
  });

  test('a prompt alone asks for a JSON object; v1 answers json in data.json and extract in data.extract', async () => {
    await solvers({ behaviour: pageSolver, price: '2' });
    const chat = await solvers({ behaviour: reader(0), capabilities: strongChat() });
    const client = await registerAccount(stack.url, '1000');
    const prompted = await scrape(client.auth, { url: freshUrl(), formats: ['markdown', { type: 'json', prompt: 'The product title' }] });
    expect(prompted.status).toBe(200);
    expect(chat.received[0]!.payload.response_format).toEqual({ type: 'json_object' });
    expect(prompted.json.data).toMatchObject({ json: { title: 'Widget Deluxe' }, markdown: expect.stringContaining('# Widget Deluxe') });
    const v1 = await api(stack.url, 'POST', '/v1/compat/scraper/v1/scrape', {
      headers: client.auth,
      body: { url: freshUrl(), formats: ['json', 'extract'], jsonOptions: { schema: SCHEMA }, extract: { schema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] } } },
    });
    expect(v1.status).toBe(200);
    expect(v1.json.data.json).toEqual({ title: 'Widget Deluxe', price: 42, inStock: true });
    expect(v1.json.data.extract).toEqual({ title: 'Widget Deluxe' });
    await expectOneBill(v1, client.auth);
  });

  test('an invalid first answer is repaired by the second, told what was wrong', async () => {
    await solvers({ behaviour: pageSolver, price: '2' });
    const chat = await solvers({ behaviour: reader(1), capabilities: strongChat() });
    const client = await registerAccount(stack.url, '1000');
    const answer = await scrape(client.auth, { url: freshUrl(), formats: [{ type: 'json', schema: SCHEMA }] });
    expect(answer.status).toBe(200);
    expect(answer.json.data.json).toEqual({ title: 'Widget Deluxe', price: 42, inStock: true });
    expect(chat.received).toHaveLength(2);
    const repair = chat.received[1]!.payload.messages as { role: string; content: string }[];
    expect(repair.map((message) => message.role)).toEqual(['system', 'user', 'assistant', 'user']);
    expect(repair[3]!.content).toContain('/price must be number');
    expect(answer.json.data.metadata.costParts.completions.taskIds).toHaveLength(2);
    await expectOneBill(answer, client.auth);
  });

  test('two invalid answers: 502 extraction_failed (500 to Firecrawl) naming the problems; the page and both completions delivered are charged', async () => {
    await solvers({ behaviour: pageSolver, price: '2' });
    const chat = await solvers({ behaviour: reader(2), capabilities: strongChat() });
    const client = await registerAccount(stack.url, '1000');
    const answer = await scrape(client.auth, { url: freshUrl(), formats: [{ type: 'json', schema: SCHEMA }] });
    expect(answer.status).toBe(500);
    expect(answer.json).toMatchObject({ success: false, code: 'extraction_failed', problems: expect.arrayContaining(['/price must be number']), task_ids: [expect.stringMatching(/^task_/), expect.stringMatching(/^chat_/), expect.stringMatching(/^chat_/)] });
    expect(chat.received).toHaveLength(2);
    const charged = await Promise.all((answer.json.task_ids as string[]).map(async (id) => (await task(client.auth, id)).charged_points as string));
    expect(Number(answer.json.points_charged)).toBe(sum(charged));
    expect(answer.headers.get('x-points-charged')).toBe(answer.json.points_charged);
    await waitFor(async () => (await auditLedger(stack.db)).openHoldsOnFinishedTasks === 0);
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
    expect(Number((await getBalance(stack.db, client.account_id))!.available_points)).toBe(sum(['1000', ...charged.map((points) => `-${points}`)]));
  });

  test('a schema that does not compile, or neither schema nor prompt, is refused before any work', async () => {
    const web = await solvers({ behaviour: pageSolver, price: '2' });
    await solvers({ behaviour: reader(0), capabilities: strongChat() });
    const client = await registerAccount(stack.url, '1000');
    const bad = await scrape(client.auth, { url: freshUrl(), formats: [{ type: 'json', schema: { type: 'nonsense' } }] });
    expect([bad.status, bad.json.code]).toEqual([400, 'unsupported_option']);
    const empty = await scrape(client.auth, { url: freshUrl(), formats: [{ type: 'json' }] });
    expect([empty.status, empty.json.code]).toEqual([400, 'unsupported_option']);
    expect(web.received).toHaveLength(0);
    expect((await getBalance(stack.db, client.account_id))!.available_points).toBe('1000');
  });
});

describe('summary', () => {
  test('returns a summary of the page, billed with it', async () => {
    await solvers({ behaviour: pageSolver, price: '2' });
    const chat = await solvers({ behaviour: reader(0), capabilities: strongChat() });
    const client = await registerAccount(stack.url, '1000');
    const answer = await scrape(client.auth, { url: freshUrl(), formats: ['summary', 'links'] });
    expect(answer.status).toBe(200);
    expect(answer.json.data.summary).toBe('A product page for Widget Deluxe, priced at 42 points.');
    expect(answer.json.data.links).toEqual([]);
    expect(chat.received[0]!.payload.response_format).toBeUndefined();
    await expectOneBill(answer, client.auth);
  });
});

describe('around the chat', () => {
  test('no strong-tier solver online: 402 no_strong_solver_available before any work, nothing charged', async () => {
    const web = await solvers({ behaviour: pageSolver, price: '2' });
    const client = await registerAccount(stack.url, '1000');
    const answer = await scrape(client.auth, { url: freshUrl(), formats: ['markdown', 'summary'] });
    expect([answer.status, answer.json.code]).toEqual([402, 'no_strong_solver_available']);
    expect(web.received).toHaveLength(0);
    expect((await getBalance(stack.db, client.account_id))!.available_points).toBe('1000');
  });

  test('an account that cannot hold the page and the completion is refused before any work: 402 insufficient_balance naming the points, nothing held', async () => {
    const web = await solvers({ behaviour: pageSolver, price: '2' });
    const chat = await solvers({ behaviour: reader(0), capabilities: strongChat() });
    // The page's hold (the default web task price, 10) fits; with the cheapest completion's estimate (1 + 2 × 4096 / 1000) it does not.
    const client = await registerAccount(stack.url, '15');
    const answer = await scrape(client.auth, { url: freshUrl(), formats: [{ type: 'json', schema: SCHEMA }] });
    expect([answer.status, answer.json.code, answer.json.required_points]).toEqual([402, 'insufficient_balance', '19.192']);
    expect(web.received).toHaveLength(0);
    expect(chat.received).toHaveLength(0);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '15', held_points: '0' });
    // A markdown scrape needs only the page.
    expect((await scrape(client.auth, { url: freshUrl(), formats: ['markdown'] })).status).toBe(200);
  });

  test('the page cache keeps the page, not the answer: a repeat takes the page from the cache (free) and asks a solver again', async () => {
    const web = await solvers({ behaviour: pageSolver, price: '2' });
    const chat = await solvers({ behaviour: reader(0), capabilities: strongChat() });
    const client = await registerAccount(stack.url, '1000');
    const url = freshUrl();
    const first = await scrape(client.auth, { url, formats: [{ type: 'json', schema: SCHEMA }] });
    expect(first.json.data.metadata.cacheState).toBe('miss');
    const again = await scrape(client.auth, { url, formats: [{ type: 'json', schema: SCHEMA }] });
    expect(again.status).toBe(200);
    expect(again.json.data.json).toEqual(first.json.data.json);
    expect(again.json.data.metadata).toMatchObject({ cacheState: 'hit', cachedAt: expect.any(String), costParts: { page: { taskIds: [], pointsCharged: '0' } } });
    expect(web.received).toHaveLength(1);
    expect(chat.received).toHaveLength(2);
    await expectOneBill(again, client.auth);
    // A markdown scrape of the same page is the page, not an answer.
    const plain = await scrape(client.auth, { url, formats: ['markdown'] });
    expect(plain.json.data).toMatchObject({ markdown: expect.stringContaining('# Widget Deluxe'), metadata: { cacheState: 'hit' } });
    expect(plain.json.data.json).toBeUndefined();
  });

  test('a client that goes away while the completion runs cancels it: its solver is told to stop, its hold released', async () => {
    await solvers({ behaviour: pageSolver, price: '2' });
    const chat = await solvers({ behaviour: (frame, self) => self.send({ type: 'accept', attempt_id: frame.attempt_id }), capabilities: strongChat() });
    const client = await registerAccount(stack.url, '1000');
    const gone = new AbortController();
    const request = fetch(`${stack.url}/v2/scrape`, {
      method: 'POST',
      headers: { ...client.auth, 'content-type': 'application/json' },
      body: JSON.stringify({ url: freshUrl(), formats: ['summary'] }),
      signal: gone.signal,
    }).catch(() => null);
    await waitFor(() => chat.received.length === 1);
    gone.abort();
    await request;
    await waitFor(() => chat.cancels.length === 1);
    await waitFor(async () => (await getBalance(stack.db, client.account_id))!.held_points === '0');
    await waitFor(async () => (await auditLedger(stack.db)).openHoldsOnFinishedTasks === 0);
    expect(await auditLedger(stack.db)).toEqual({ accountsOff: 0, openHoldsOnFinishedTasks: 0, doubleMovements: 0 });
  });

  test('an Idempotency-Key is refused with these formats, naming it, before any work', async () => {
    const web = await solvers({ behaviour: pageSolver, price: '2' });
    await solvers({ behaviour: reader(0), capabilities: strongChat() });
    const client = await registerAccount(stack.url, '1000');
    const answer = await scrape({ ...client.auth, 'X-Idempotency-Key': crypto.randomUUID() }, { url: freshUrl(), formats: ['summary'] });
    expect([answer.status, answer.json.code, answer.json.option]).toEqual([400, 'unsupported_option', 'Idempotency-Key']);
    expect(web.received).toHaveLength(0);
  });
});

describe('maxPricePoints', () => {
  // The cheapest completion's floor: 1 + 2 × 4096 / 1000 points (strongChat's offer, the completion budget).
  const FLOOR = 9.192;

  test('bounds the page and the completion together: each task\'s maximum is its share, the bill at most the limit', async () => {
    await solvers({ behaviour: pageSolver, price: '2' });
    await solvers({ behaviour: reader(0), capabilities: strongChat() });
    const client = await registerAccount(stack.url, '1000');
    const answer = await scrape(client.auth, { url: freshUrl(), formats: [{ type: 'json', schema: SCHEMA }], maxPricePoints: '30' });
    expect(answer.status).toBe(200);
    expect(answer.json.data.json).toEqual({ title: 'Widget Deluxe', price: 42, inStock: true });
    const { page, completions } = answer.json.data.metadata.costParts;
    // The page's share is the limit less the completion's floor; the completion's is what the page left.
    expect((await task(client.auth, page.taskIds[0])).max_price_points).toBe(String(30 - FLOOR));
    // A matched chat's maximum is its offer's estimate (1 + 2 × its prompt's tokens / 1000 + 2 × 4096 / 1000), within the 28 left.
    expect(Number((await task(client.auth, completions.taskIds[0])).max_price_points)).toBeLessThanOrEqual(28);
    expect(Number(answer.json.data.metadata.pointsCharged)).toBeLessThanOrEqual(30);
    await expectOneBill(answer, client.auth);
    // 11.3 leaves the page its price (2.108 ≥ 2) and the completion 9.3, below its estimate with the page in its prompt.
    const tight = await scrape(client.auth, { url: freshUrl(), formats: [{ type: 'json', schema: SCHEMA }], maxPricePoints: '11.3' });
    expect([tight.status, tight.json.code, tight.json.param, tight.json.points_charged]).toEqual([422, 'no_solver_within_price', 'maxPricePoints', '2']);
  });

  test('a limit below the completion\'s floor, or leaving the page less than its price, is 422 no_solver_within_price before any work', async () => {
    const web = await solvers({ behaviour: pageSolver, price: '2' });
    const chat = await solvers({ behaviour: reader(0), capabilities: strongChat() });
    const client = await registerAccount(stack.url, '1000');
    for (const limit of ['5', '10']) {
      const answer = await scrape(client.auth, { url: freshUrl(), formats: ['summary'], maxPricePoints: limit });
      expect([answer.status, answer.json.success, answer.json.code, answer.json.param]).toEqual([422, false, 'no_solver_within_price', 'maxPricePoints']);
    }
    expect(web.received).toHaveLength(0);
    expect(chat.received).toHaveLength(0);
    expect(await getBalance(stack.db, client.account_id)).toMatchObject({ available_points: '1000', held_points: '0' });
  });

  test('without extractions it bounds the page\'s tasks; v1 takes it too; a negative limit is 422', async () => {
    const web = await solvers({ behaviour: pageSolver, price: '2' });
    const client = await registerAccount(stack.url, '1000');
    const below = await scrape(client.auth, { url: freshUrl(), formats: ['markdown'], maxPricePoints: 1 });
    expect([below.status, below.json.code, below.json.param]).toEqual([422, 'no_solver_within_price', 'maxPricePoints']);
    expect(web.received).toHaveLength(0);
    const v1 = await api(stack.url, 'POST', '/v1/compat/scraper/v1/scrape', { headers: client.auth, body: { url: freshUrl(), formats: ['markdown'], maxPricePoints: '2' } });
    expect(v1.status).toBe(200);
    expect((await task(client.auth, v1.json.data.metadata.taskIds[0])).max_price_points).toBe('2');
    expect((await scrape(client.auth, { url: freshUrl(), maxPricePoints: '-1' })).status).toBe(422);
  });
});

describe('Firecrawl SDKs', () => {
  test('JS 4.x: json fills the schema, summary returns a summary', async () => {
    await solvers({ behaviour: pageSolver, price: '2' });
    await solvers({ behaviour: reader(0), capabilities: strongChat() });
    const client = await registerAccount(stack.url, '1000');
    const firecrawl = new Firecrawl({ apiKey: client.api_key, apiUrl: `${stack.url}/v1/compat/scraper` });
    const doc = await firecrawl.scrape(freshUrl(), { formats: [{ type: 'json', schema: SCHEMA }, 'summary'] });
    expect(doc.json).toEqual({ title: 'Widget Deluxe', price: 42, inStock: true });
    expect(doc.summary).toContain('Widget Deluxe');
    expect(doc.metadata).toMatchObject({ costParts: { page: { pointsCharged: '2' } } });
  });

  test('firecrawl-py 4.x: json fills the schema, summary returns a summary, billed once with both parts shown', async () => {
    await solvers({ behaviour: pageSolver, price: '2' });
    await solvers({ behaviour: reader(0), capabilities: strongChat() });
    const client = await registerAccount(stack.url, '1000');
    const call = (options: Record<string, unknown>) => runFirecrawlPy(4, { api_url: `${stack.url}/v1/compat/scraper`, api_key: client.api_key, call: 'scrape', url: freshUrl(), options });
    const json = await call({ formats: [{ type: 'json', schema: SCHEMA }] });
    expect(json.raised).toBeUndefined();
    expect(json.result.json).toEqual({ title: 'Widget Deluxe', price: 42, inStock: true });
    const summary = await call({ formats: ['summary'] });
    expect(summary.raised).toBeUndefined();
    expect(summary.result.summary).toContain('Widget Deluxe');
    // The SDK's document keeps the metadata the service sends.
    const metadata = summary.result.metadata;
    const parts = metadata.costParts ?? metadata.cost_parts;
    expect(parts.page.pointsCharged).toBe('2');
    expect(Number(metadata.pointsCharged ?? metadata.points_charged)).toBe(sum([parts.page.pointsCharged, parts.completions.pointsCharged]));
  });
});
