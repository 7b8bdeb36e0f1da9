import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';
import { boundOf, DeliveredTokens, estimatePromptTokens, meterUsage, PROMPT_CHARS_COUNTED, promptTokens, textTokens, USAGE_TOLERANCE } from '../../src/chat/usage';

const payload = { model: 'service/strong', messages: [{ role: 'user', content: 'What is two plus two? Answer in four words.' }] };

describe('the usage a chat is billed for', () => {
  test('the delivered text is counted as a whole, however the deltas split it', async () => {
    const text = 'The quick brown fox jumps over the lazy dog. '.repeat(400);
    const byCharacter = new DeliveredTokens(payload);
    for (const character of text) byCharacter.add({ content: character });
    const whole = new DeliveredTokens(payload);
    whole.add({ content: text });
    expect(await byCharacter.counted()).toEqual(await whole.counted());
    expect((await whole.counted()).completion_tokens).toBe(countTokens(text));
  });

  test('content, tool calls and streamed reasoning count; roles and ids do not', async () => {
    const delivered = new DeliveredTokens(payload);
    delivered.add({ role: 'assistant', reasoning_content: 'Two plus two is four.' });
    delivered.add({ reasoning: ' Easy.' });
    delivered.add({ tool_calls: [{ index: 0, id: 'call_123456789', type: 'function', function: { name: 'answer', arguments: '{"n":4}' } }] });
    delivered.add({ content: 'Four.' });
    expect(await delivered.counted()).toEqual({
      prompt_tokens: promptTokens(payload),
      completion_tokens: textTokens('Two plus two is four. Easy.') + textTokens('answer{"n":4}Four.'),
      reasoning_tokens: textTokens('Two plus two is four. Easy.'),
    });
  });

  test('invisible characters are not counted, and special-token text counts as text', () => {
    expect(textTokens(`Four${'\u200b'.repeat(500)}${'\u{E0041}'.repeat(100)}${'\uFE0F'.repeat(100)}.`)).toBe(textTokens('Four.'));
    expect(textTokens('<|endoftext|>')).toBeGreaterThan(1);
  });

  test('the prompt: message framing, text parts, an allowance for images and for tools', () => {
    const text = promptTokens(payload);
    expect(text).toBe(3 + 4 + countTokens(payload.messages[0].content));
    const withImage = promptTokens({ messages: [{ role: 'user', content: [{ type: 'text', text: payload.messages[0].content }, { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } }] }] });
    expect(withImage).toBe(text + 2000);
    expect(promptTokens({ ...payload, tools: [{ type: 'function', function: { name: 'f' } }] })).toBeGreaterThan(text + 400);
  });

  test('the estimate counts the texts the bill counts, without its allowances; past PROMPT_CHARS_COUNTED at the same tokens per character', () => {
    const withTools = { ...payload, tools: [{ type: 'function', function: { name: 'add', parameters: {} } }] };
    const texts = textTokens(payload.messages[0]!.content) + textTokens(JSON.stringify(withTools.tools));
    expect(estimatePromptTokens(withTools)).toBe(texts);
    expect(promptTokens(withTools)).toBeGreaterThan(texts);
    const long = { messages: [{ role: 'user', content: ' a'.repeat(PROMPT_CHARS_COUNTED) }] };
    expect(estimatePromptTokens(long)).toBe(PROMPT_CHARS_COUNTED);
    expect(estimatePromptTokens({ messages: [] })).toBe(1);
  });

  test('a huge delta is not counted on its way: add only appends, and the count comes after', async () => {
    const huge = 'Foxes are quick and dogs are lazy. '.repeat(30_000);
    const delivered = new DeliveredTokens(payload);
    const started = performance.now();
    delivered.add({ content: huge });
    // Tokenizing it whole takes some 100 ms and more.
    expect(performance.now() - started).toBeLessThan(20);
    expect((await delivered.counted()).completion_tokens).toBe(countTokens(huge));
  });

  test('a long prompt is counted in pieces, as a whole', async () => {
    const long = { messages: [{ role: 'user', content: 'Foxes are quick and dogs are lazy. '.repeat(3000) }] };
    const delivered = new DeliveredTokens(long);
    expect((await delivered.counted()).prompt_tokens).toBe(promptTokens(long));
  });

  test('bills the smaller of each reported count and its bound; only a report above the bound is inflated', () => {
    const counted = { prompt_tokens: 18, completion_tokens: 5, reasoning_tokens: 0 };
    expect(boundOf(5)).toBe(Math.ceil(5 * USAGE_TOLERANCE.factor) + USAGE_TOLERANCE.slack);
    const inflated = meterUsage({ prompt_tokens: 20, completion_tokens: 8980, total_tokens: 9000 }, counted);
    expect(inflated).toMatchObject({ billed: { prompt_tokens: 20, completion_tokens: boundOf(5), total_tokens: 20 + boundOf(5) }, inflated: true });
    expect(meterUsage({ prompt_tokens: 18, completion_tokens: boundOf(5) }, counted)).toMatchObject({ billed: { completion_tokens: boundOf(5) }, inflated: false });
    expect(meterUsage({ prompt_tokens: boundOf(18) + 1, completion_tokens: 5 }, counted)).toMatchObject({ billed: { prompt_tokens: boundOf(18) }, inflated: true });
    expect(meterUsage({ prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 }, counted)).toMatchObject({ billed: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 }, inflated: false });
    // A total below the counts' sum is billed as reported; a report with no usage bills nothing.
    expect(meterUsage({ prompt_tokens: 18, completion_tokens: 5, total_tokens: 3 }, counted).billed.total_tokens).toBe(3);
    expect(meterUsage(undefined, counted)).toMatchObject({ billed: { total_tokens: 0 }, inflated: false });
  });

  test('declared hidden reasoning is not billed and not held against the solver; streamed reasoning is billed', () => {
    const hidden = meterUsage({ prompt_tokens: 18, completion_tokens: 3005, completion_tokens_details: { reasoning_tokens: 3000 } }, { prompt_tokens: 18, completion_tokens: 2, reasoning_tokens: 0 });
    expect(hidden).toMatchObject({ billed: { completion_tokens: boundOf(2) }, inflated: false });
    const streamed = meterUsage({ prompt_tokens: 18, completion_tokens: 3005, completion_tokens_details: { reasoning_tokens: 3000 } }, { prompt_tokens: 18, completion_tokens: 3002, reasoning_tokens: 3000 });
    expect(streamed).toMatchObject({ billed: { completion_tokens: 3005 }, inflated: false });
  });
});
