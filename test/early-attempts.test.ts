import { createChatStreamActivities } from '../activities/chat-stream';
import { ChatRelay } from '../src/chat/relay';
import type { NotifyBus } from '../src/db/notify';
import { EarlyAttempts, type EarlyAttemptRequest } from '../src/dispatch/early-attempts';
import { AttemptFailure, type AttemptRequest, type SolverHub } from '../src/dispatch/hub';
import { createLogger } from '../src/logger';

/** A hub with one connected solver whose attempts the test settles by hand. */
function fakeHub() {
  const running = new Map<string, { request: AttemptRequest; resolve(result: Record<string, unknown>): void }>();
  const cancelled: string[] = [];
  const hub = {
    canDispatch: (solverId: string) => solverId === 'solver-here',
    runAttempt: (request: AttemptRequest) =>
      new Promise<Record<string, unknown>>((resolve, reject) => {
        running.set(request.attemptId, { request, resolve });
        request.signal?.addEventListener('abort', () => {
          cancelled.push(request.attemptId);
          reject(new AttemptFailure('cancelled', 'cancelled', 'The attempt was cancelled.'));
        });
      }),
  } as unknown as SolverHub;
  return { hub, running, cancelled };
}

describe('EarlyAttempts', () => {
  const logger = createLogger('silent');
  const setup = () => {
    const solvers = fakeHub();
    const relay = new ChatRelay({ bus: {} as NotifyBus, nodeId: 'node-x', logger });
    const early = new EarlyAttempts({ hub: solvers.hub, relay, logger, nodeId: 'node-x' });
    return { ...solvers, relay, early };
  };
  const request = (overrides: Partial<EarlyAttemptRequest> = {}): EarlyAttemptRequest => ({
    attemptId: 'chat_1.a1',
    solverId: 'solver-here',
    nodeId: 'node-x',
    taskId: 'chat_1',
    taskType: 'chat_completion',
    payload: { messages: [] },
    deadline: new Date(Date.now() + 60_000),
    acceptTimeoutMs: 1000,
    stream: { clientNodeId: 'node-x', completionId: 'chatcmpl-1' },
    clientGone: new AbortController().signal,
    ...overrides,
  });

  test('sends only to a solver connected here, matched to this node, for a client still waiting', () => {
    const { early, running } = setup();
    const gone = new AbortController();
    gone.abort();
    expect(early.start(request({ solverId: 'solver-elsewhere' }))).toBe(false);
    expect(early.start(request({ nodeId: 'node-y' }))).toBe(false);
    expect(early.start(request({ clientGone: gone.signal }))).toBe(false);
    expect(running.size).toBe(0);
    expect(early.start(request())).toBe(true);
    expect([...running.keys()]).toEqual(['chat_1.a1']);
  });

  test('the activity takes over the running attempt: the deltas already relayed count, the result comes through', async () => {
    const { early, running, relay } = setup();
    const seen: unknown[] = [];
    relay.listen('chatcmpl-1', (event) => seen.push(event));
    expect(early.start(request())).toBe(true);
    running.get('chat_1.a1')!.request.onChunk!({ content: 'early' });
    const adopted = early.adopt('chat_1.a1', new AbortController().signal)!;
    expect(adopted.deltas.chunks).toBe(1);
    adopted.deltas.onChunk({ content: 'late' });
    running.get('chat_1.a1')!.resolve({ finish_reason: 'stop' });
    await expect(adopted.result).resolves.toEqual({ finish_reason: 'stop' });
    expect(seen).toEqual([
      { type: 'chunk', attempt: 'chat_1.a1', seq: 0, delta: { content: 'early' } },
      { type: 'chunk', attempt: 'chat_1.a1', seq: 1, delta: { content: 'late' } },
    ]);
    // Taken over once: a second activity for the same attempt finds nothing to take.
    expect(early.adopt('chat_1.a1', new AbortController().signal)).toBeUndefined();
    expect(early.size).toBe(0);
  });

  test("once taken over, the activity's cancellation cancels the attempt and the client's going away no longer does", async () => {
    const { early, cancelled } = setup();
    const client = new AbortController();
    early.start(request({ clientGone: client.signal }));
    const activity = new AbortController();
    const adopted = early.adopt('chat_1.a1', activity.signal)!;
    client.abort();
    expect(cancelled).toEqual([]);
    activity.abort();
    expect(cancelled).toEqual(['chat_1.a1']);
    await expect(adopted.result).rejects.toBeInstanceOf(AttemptFailure);
  });

  test('a client going away before the take-over cancels the attempt, and the activity then finds nothing', () => {
    const { early, cancelled } = setup();
    const client = new AbortController();
    early.start(request({ clientGone: client.signal }));
    client.abort();
    expect(cancelled).toEqual(['chat_1.a1']);
    expect(early.adopt('chat_1.a1', new AbortController().signal)).toBeUndefined();
    expect(early.size).toBe(0);
  });

  test('a workflow fencing the attempt (its activity never started) cancels it at the solver', async () => {
    const { early, cancelled, relay } = setup();
    relay.listen('chatcmpl-1', () => undefined);
    early.start(request());
    const { fenceChatAttempt } = createChatStreamActivities({ relay, earlyAttempts: early });
    await expect(fenceChatAttempt({ completionId: 'chatcmpl-1', attemptId: 'chat_1.a1' })).resolves.toBe(0);
    expect(cancelled).toEqual(['chat_1.a1']);
    expect(early.size).toBe(0);
  });
});
