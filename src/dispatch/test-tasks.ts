import crypto from 'node:crypto';
import { CHAT_TASK_TYPE, PUBLIC_MODEL_ID, type CapabilityTaskType } from '../schemas/domain';
import type { ResultIssueData, TestResultMessage } from '../schemas/frames';
import { ChatCompletionBody, PAYLOAD_SCHEMAS } from '../schemas/requests';
import type { AttemptFailure, AttemptRequest } from './attempt';

/**
 * Test mode: a solver asks for a synthetic task (`test_task` frame) to check its handlers and result
 * shapes. It is sent and judged like an attempt on the solver's own connection, but no task, client,
 * hold or record exists: nothing is stored, paid or counted in the solver's stats.
 */

/** What a test task carries when the solver names no payload: one a client could have sent. */
export const TEST_PAYLOADS: Record<CapabilityTaskType, Record<string, unknown>> = {
  proxy_fetch: { url: 'https://example.com/', raw_html: false },
  web_search: { query: 'task marketplace solver', count: 3 },
  screenshot: { url: 'https://example.com/', full_page: false },
  page_snapshot: { url: 'https://example.com/' },
  chat_completion: {
    model: PUBLIC_MODEL_ID,
    messages: [{ role: 'user', content: 'Say hello in five words.' }],
    max_tokens: 32,
  },
};

// A test is about shapes, not load: a handful at once per connection is plenty.
export const MAX_TEST_TASKS_PER_CONNECTION = 4;

export interface TestTaskRun {
  solverId: string;
  taskType: CapabilityTaskType;
  payload?: Record<string, unknown>;
  acceptTimeoutMs: number;
  attemptTimeoutMs: number;
}

export const refuseTestTask = (taskType: CapabilityTaskType, type: string, message: string): TestResultMessage => ({
  type: 'test_result',
  attempt_id: null,
  task_type: taskType,
  passed: false,
  outcome: 'refused',
  error: { type, message },
});

/** The payload a test task is sent with: the solver's own (checked like a client's), else the default. */
function testPayload(run: TestTaskRun): { payload: Record<string, unknown> } | { problem: string } {
  if (run.payload === undefined) return { payload: TEST_PAYLOADS[run.taskType] };
  const schema = run.taskType === CHAT_TASK_TYPE ? ChatCompletionBody : PAYLOAD_SCHEMAS[run.taskType];
  const parsed = schema.safeParse(run.payload);
  if (!parsed.success) {
    return {
      problem: parsed.error.issues
        .map((issue) => `${['payload', ...issue.path].join('.')}: ${issue.message}`)
        .join('; '),
    };
  }
  const { stream: _stream, stream_options: _options, ...payload } = parsed.data as Record<string, unknown>;
  return { payload };
}

const isAttemptFailure = (error: unknown): error is AttemptFailure =>
  error instanceof Error && typeof (error as AttemptFailure).failure?.outcome === 'string';

/** Runs one test task through `runAttempt` and describes how the solver did. */
export async function runTestTask(
  runAttempt: (request: AttemptRequest) => Promise<Record<string, unknown>>,
  run: TestTaskRun,
): Promise<TestResultMessage> {
  const chosen = testPayload(run);
  if ('problem' in chosen)
    return refuseTestTask(
      run.taskType,
      'invalid_payload',
      `The test payload is not one a client could send: ${chosen.problem}`,
    );
  const taskId = `test_${crypto.randomBytes(12).toString('hex')}`;
  const attemptId = `${taskId}.a1`;
  const base = { type: 'test_result' as const, attempt_id: attemptId, task_type: run.taskType };
  let issues: ResultIssueData[] | undefined;
  let chunks = 0;
  try {
    await runAttempt({
      solverId: run.solverId,
      attemptId,
      taskId,
      taskType: run.taskType,
      payload: chosen.payload,
      deadline: new Date(Date.now() + run.attemptTimeoutMs),
      acceptTimeoutMs: run.acceptTimeoutMs,
      test: true,
      onChunk: () => {
        chunks += 1;
      },
      onResultRejected: (found) => {
        issues = found;
      },
    });
    return { ...base, passed: true, outcome: 'passed', ...(run.taskType === CHAT_TASK_TYPE ? { chunks } : {}) };
  } catch (error) {
    if (!isAttemptFailure(error)) throw error;
    const failed = { ...base, passed: false };
    const { outcome, error: body, retryable } = error.failure;
    if (outcome === 'invalid_result')
      return { ...failed, outcome: 'invalid_result', issues: issues ?? [], error: body };
    if (outcome === 'error') return { ...failed, outcome: 'error', error: body, retryable };
    if (outcome === 'rejected') return { ...failed, outcome: 'accept_timeout', error: body };
    if (outcome === 'timeout') return { ...failed, outcome: 'deadline', error: body };
    return { ...failed, outcome: 'refused', error: body };
  }
}
