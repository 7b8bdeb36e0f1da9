import { createChatStreamActivities } from '../../activities/chat-stream';
import { ChatRelay } from '../../src/chat/relay';
import type { NotifyBus } from '../../src/db/notify';
import type { Handoff } from '../../src/db/matching';
import { AttemptStops } from '../../src/dispatch/attempt-stops';
import { EarlyAttempts, type EarlyAttemptRequest } from '../../src/dispatch/early-attempts';
import { AttemptFailure, type AttemptRequest } from '../../src/dispatch/attempt';
import type { SolverHub } from '../../src/dispatch/hub';
import { createLogger } from '../../src/logger';

/** A hub with one connected solver whose attempts the test settles by hand. */
function fakeHub() {
  const running = new Map<string, { request: AttemptRequest; resolve(result: Record<string, unknown>): void }>();
  const cancelled: string[] = [];
  const hub = {
    canDispatch: (solverId: string) => solverId === 'solver-here',
    isRunning: (_solverId: string, attemptId: string) => running.has(attemptId),
    runAttempt: (request: AttemptRequest) =>
      new Promise<Record<string, unknown>>((resolve, reject) => {
        running.set(request.attemptId, { request, resolve });
        request.signal?.addEventListener('abort', () => {
          cancelled.push(request.attemptId);
          reject(AttemptFailure.of('cancelled', 'The attempt was cancelled.'));
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
    const stops = new AttemptStops({ publish: async () => undefined } as unknown as NotifyBus);
    const early = new EarlyAttempts({ hub: solvers.hub, relay, logger, nodeId: 'node-x', stops, acceptTimeoutMs: 1000, attemptTimeoutMs: 60_000 });
    return { ...solvers, relay, stops, early };
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
    occasion: 'created',
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
    expect(adopted.deltas!.chunks).toBe(1);
    adopted.deltas!.onChunk({ content: 'late' });
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
  /** A slot handed to a waiting task, as handOnSlots returns it. */
  const handoff = (overrides: Partial<Handoff> = {}, task: Partial<NonNullable<Handoff['task']>> = {}): Handoff => ({
    taskId: 'task_2',
    workflowId: 'task-task_2',
    attemptNumber: 2,
    assignment: { attemptId: 'task_2.a2', solverId: 'solver-here', nodeId: 'node-x', pricePoints: '1', billingType: 'per_request', marginalCost: '0', modelName: 'm' },
    task: { taskType: 'web_search', payload: { query: 'q' }, deadlineMs: Date.now() + 600_000, ...task },
    ...overrides,
  });

  test('a web task handed a slot here goes to its solver at once, bounded by the attempt deadline, with no delta stream', async () => {
    const { early, running } = setup();
    const before = Date.now();
    expect(early.startHanded(handoff())).toBe(true);
    const { request } = running.get('task_2.a2')!;
    expect(request).toMatchObject({ taskId: 'task_2', taskType: 'web_search', payload: { query: 'q' }, acceptTimeoutMs: 1000 });
    expect(request.onChunk).toBeUndefined();
    expect(request.deadline.getTime() - before).toBeGreaterThanOrEqual(60_000);
    expect(request.deadline.getTime() - before).toBeLessThan(61_000);
    const adopted = early.adopt('task_2.a2', new AbortController().signal)!;
    expect(adopted.deltas).toBeUndefined();
    running.get('task_2.a2')!.resolve({ results: [] });
    await expect(adopted.result).resolves.toEqual({ results: [] });
  });

  test('a handoff goes early only with its task, to a solver here, never twice, and a chat only when its client is served here', () => {
    const { early, running, relay } = setup();
    expect(early.startHanded({ ...handoff(), task: undefined })).toBe(false);
    expect(early.startHanded(handoff({ assignment: { ...handoff().assignment, solverId: 'solver-elsewhere' } }))).toBe(false);
    expect(early.startHanded(handoff())).toBe(true);
    expect(early.startHanded(handoff())).toBe(false);
    const chat = handoff({ taskId: 'chat_3', workflowId: 'chatcmpl-3', assignment: { ...handoff().assignment, attemptId: 'chat_3.a2' } }, { taskType: 'chat_completion' });
    expect(early.startHanded(chat)).toBe(false);
    const seen: unknown[] = [];
    relay.listen('chatcmpl-3', (event) => seen.push(event));
    expect(early.startHanded(chat)).toBe(true);
    running.get('chat_3.a2')!.request.onChunk!({ content: 'hi' });
    expect(seen).toEqual([{ type: 'chunk', attempt: 'chat_3.a2', seq: 0, delta: { content: 'hi' } }]);
    expect([...running.keys()]).toEqual(['task_2.a2', 'chat_3.a2']);
  });

  test('a chat audit handed its solver slot here goes at once, with no client stream: its deltas are assembled for the activity', async () => {
    const { early, running } = setup();
    const audit = handoff(
      { taskId: 'chat_5', workflowId: 'canary-solver-here-chat_completion-1', attemptNumber: 1, assignment: { ...handoff().assignment, attemptId: 'chat_5.a1' } },
      { taskType: 'chat_completion', payload: { messages: [{ role: 'user', content: 'Compute 2 * 3.' }] }, canaryFor: 'solver-here', deadlineMs: Date.now() + 300_000 },
    );
    expect(early.startHanded(audit)).toBe(true);
    const { request } = running.get('chat_5.a1')!;
    // Bounded as a client's chat is, by the task's deadline (the canary workflow bounds its attempt so too).
    expect(request.deadline.getTime()).toBe(audit.task!.deadlineMs);
    request.onChunk!({ content: '6' });
    const adopted = early.adopt('chat_5.a1', new AbortController().signal)!;
    expect(adopted.deltas).toBeUndefined();
    request.onChunk!({ content: '.' });
    running.get('chat_5.a1')!.resolve({ finish_reason: 'stop' });
    await expect(adopted.result).resolves.toEqual({ finish_reason: 'stop' });
    expect(adopted.assembled!.message()).toMatchObject({ role: 'assistant', content: '6.' });
  });

  test('an attempt not taken over is cancelled when its task is stopped, or at its deadline', async () => {
    const { early, cancelled, stops } = setup();
    early.startHanded(handoff());
    await stops.stop('task_2');
    expect(cancelled).toEqual(['task_2.a2']);
    expect(early.adopt('task_2.a2', new AbortController().signal)).toBeUndefined();
    early.startHanded(handoff({ taskId: 'task_4', assignment: { ...handoff().assignment, attemptId: 'task_4.a2' } }, { deadlineMs: Date.now() + 50 }));
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(cancelled).toEqual(['task_2.a2', 'task_4.a2']);
    expect(early.size).toBe(0);
  });
});
