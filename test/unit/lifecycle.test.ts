import {
  ACTIVE_STATES,
  ATTEMPT_ERRORS,
  ATTEMPT_OUTCOME_TABLE,
  ATTEMPT_OUTCOMES,
  attemptFailed,
  canTransition,
  clientFailure,
  isPlatformFault,
  isSolverAttempt,
  isTerminalState,
  solverAfter,
  solverReportedFailure,
  TASK_ERRORS,
  TASK_STATES,
  TASK_TRANSITIONS,
  taskFailure,
  TERMINAL_STATES,
} from '../../src/contract/lifecycle';
import { ERROR_STATUS } from '../../src/errors';

describe('the task lifecycle', () => {
  test('every transition leads to a known state, and the terminal states are exactly those with no way out', () => {
    for (const state of TASK_STATES) for (const next of TASK_TRANSITIONS[state]) expect(TASK_STATES).toContain(next);
    expect(TERMINAL_STATES.sort()).toEqual(['cancelled', 'completed', 'failed', 'timed_out']);
    expect(ACTIVE_STATES.sort()).toEqual(['assigned', 'queued']);
    expect(isTerminalState('queued')).toBe(false);
    expect(isTerminalState('timed_out')).toBe(true);
    expect(canTransition('assigned', 'queued')).toBe(true);
    expect(canTransition('completed', 'queued')).toBe(false);
  });

  test('every terminal state other than completed is reachable by a task error, and every task error maps to a real API error type', () => {
    const reached = new Set(Object.values(TASK_ERRORS).map((entry) => entry.state));
    expect([...reached].sort()).toEqual(['cancelled', 'failed', 'timed_out']);
    for (const entry of Object.values(TASK_ERRORS)) expect(ERROR_STATUS).toHaveProperty(entry.apiError);
    expect(taskFailure('task_timeout', 'late')).toEqual({ status: 'timed_out', error: { type: 'task_timeout', message: 'late' } });
  });

  test("the service's attempt errors carry their outcome; a solver's own error keeps its type", () => {
    expect(attemptFailed('accept_timeout', 'slow', 0)).toEqual({ ok: false, outcome: 'rejected', error: { type: 'accept_timeout', message: 'slow' }, retryable: true, chunks: 0 });
    expect(attemptFailed('task_not_found', 'gone', 0).retryable).toBe(false);
    expect(solverReportedFailure({ type: 'node_unavailable', message: 'mine' }, true, 1)).toMatchObject({ outcome: 'error', error: { type: 'node_unavailable' } });
    for (const type of Object.keys(ATTEMPT_ERRORS) as (keyof typeof ATTEMPT_ERRORS)[]) expect(attemptFailed(type, 'x', 0).outcome).toBe(ATTEMPT_ERRORS[type].outcome);
  });

  test('only an attempt lost with its node leaves its solver as a last resort', () => {
    expect(solverAfter(attemptFailed('node_unavailable', 'x', -1))).toBe('last_resort');
    expect(solverAfter(attemptFailed('solver_disconnected', 'x', 0))).toBe('excluded');
    // A solver cannot earn itself a second try by naming the service's error type.
    expect(solverAfter(solverReportedFailure({ type: 'node_unavailable', message: 'x' }, true, 0))).toBe('excluded');
  });

  test("an attempt lost to a platform fault is nobody's failure, and only the service can say it was", () => {
    for (const type of ['node_unavailable', 'node_shutdown'] as const) {
      expect(attemptFailed(type, 'x', 0)).toMatchObject({ outcome: 'lost', retryable: true });
      expect(isPlatformFault(attemptFailed(type, 'x', 0))).toBe(true);
      expect(solverAfter(attemptFailed(type, 'x', 0))).toBe('last_resort');
      // A solver's own error frame naming the type is its own failure.
      expect(isPlatformFault(solverReportedFailure({ type, message: 'x' }, true, 0))).toBe(false);
    }
    expect(isPlatformFault(attemptFailed('solver_disconnected', 'x', 0))).toBe(false);
    expect(ATTEMPT_OUTCOME_TABLE.lost.counts).toBeNull();
    // Not one of the solver's attempts: its success rate leaves it out.
    expect(ATTEMPT_OUTCOMES.filter((outcome) => outcome !== 'pending' && !isSolverAttempt(outcome))).toEqual(['lost']);
  });

  test('what a waiting client is told', () => {
    const task = { task_id: 'task_1', timeout_seconds: 30 };
    expect(clientFailure('web', task, null)).toEqual({ type: 'task_timeout', message: 'The task did not finish in 30 s; poll GET /v1/tasks/task_1.' });
    expect(clientFailure('chat', task, { status: 'timed_out' })).toEqual({ type: 'task_timeout', message: 'The completion did not finish in time.' });
    expect(clientFailure('web', task, { status: 'failed', error: { type: 'solver_failed', message: 'All 3 attempts failed.' } })).toEqual({
      type: 'solver_failed',
      message: 'The task failed: All 3 attempts failed.',
    });
    expect(clientFailure('chat', task, { status: 'failed', error: { type: 'service_unavailable', message: 'not started' } })).toEqual({ type: 'service_unavailable', message: 'not started' });
    expect(clientFailure('web', task, { status: 'cancelled', error: { type: 'task_cancelled', message: 'Cancelled by its client.' } })).toEqual({
      type: 'task_cancelled',
      message: 'The task was cancelled: Cancelled by its client.',
    });
  });
});
