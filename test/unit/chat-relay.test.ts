import { ChatRelay, type RelayEvent } from '../../src/chat/relay';
import type { NotifyBus } from '../../src/db/notify';
import { createLogger } from '../../src/logger';

/** The relay on the node serving a chat client: local delivery, counting and fencing. */
describe('ChatRelay', () => {
  const relay = () => new ChatRelay({ bus: {} as NotifyBus, nodeId: 'node-x', logger: createLogger('silent') });
  const chunk = (attempt: string, seq: number, content: string): RelayEvent => ({ type: 'chunk', attempt, seq, delta: { content } });

  test('a fenced attempt reaches the client no more; the fence says how many deltas the client holds', async () => {
    const node = relay();
    const seen: string[] = [];
    node.listen('chatcmpl-1', (event) => seen.push(event.type === 'chunk' ? String(event.delta.content) : `end:${event.attempt}`));
    await node.forward('node-x', 'chatcmpl-1', chunk('a1', 0, 'one'));
    expect(node.fence('chatcmpl-1', 'a1')).toBe(1);
    await node.forward('node-x', 'chatcmpl-1', chunk('a1', 1, 'late'));
    await node.forward('node-x', 'chatcmpl-1', { type: 'end', attempt: 'a1', chunks: 2, finish_reason: 'stop', usage: null });
    await node.forward('node-x', 'chatcmpl-1', chunk('a2', 0, 'two'));
    await node.forward('node-x', 'chatcmpl-1', { type: 'end', attempt: 'a2', chunks: 1, finish_reason: 'stop', usage: null });
    expect(seen).toEqual(['one', 'two', 'end:a2']);
  });

  test('an attempt fenced before sending anything leaves the client with nothing', async () => {
    const node = relay();
    const seen: RelayEvent[] = [];
    node.listen('chatcmpl-2', (event) => seen.push(event));
    expect(node.fence('chatcmpl-2', 'lost')).toBe(0);
    await node.forward('node-x', 'chatcmpl-2', chunk('lost', 0, 'zombie'));
    expect(seen).toEqual([]);
  });

  test('a completion this node no longer serves cannot be fenced (its client is gone)', () => {
    const node = relay();
    const stop = node.listen('chatcmpl-3', () => undefined);
    stop();
    expect(node.fence('chatcmpl-3', 'a1')).toBeNull();
    expect(node.fence('chatcmpl-unknown', 'a1')).toBeNull();
  });
});
