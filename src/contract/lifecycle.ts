/**
 * The life of a task, in one place: its states and their transitions, how an attempt ends, the errors
 * orchestration gives attempts and tasks, and what a client is told about a task that did not complete.
 * Pure data and functions: workflow code imports it, and so do the database layer, the activities, the
 * dispatch hub and the HTTP routes. The SQL CHECKs on these columns are proven equal to these tables by
 * test/lifecycle-schema.test.ts.
 */

// ---------------------------------------------------------------------------------------------------
// Task states
// ---------------------------------------------------------------------------------------------------

/** Each state of a task and the states that may follow it. */
export const TASK_TRANSITIONS = {
  /** Waiting for a solver (new, or back after a failed attempt). An admin may complete it from here. */
  queued: ['assigned', 'completed', 'failed', 'timed_out', 'cancelled'],
  /** An attempt is reserved or running; it completes the task, or puts it back to queued. */
  assigned: ['queued', 'completed', 'failed', 'timed_out', 'cancelled'],
  completed: [],
  failed: [],
  timed_out: [],
  /** Its client cancelled it (POST /v1/tasks/{id}/cancel); its hold was released. */
  cancelled: [],
} as const satisfies Record<string, readonly string[]>;

export type TaskState = keyof typeof TASK_TRANSITIONS;
export const TASK_STATES = Object.keys(TASK_TRANSITIONS) as TaskState[];

/** A state with no way out: the task has its verdict and its hold is settled or released. */
export type TerminalState = {
  [S in TaskState]: (typeof TASK_TRANSITIONS)[S] extends readonly [] ? S : never;
}[TaskState];
export type ActiveState = Exclude<TaskState, TerminalState>;

export const TERMINAL_STATES = TASK_STATES.filter((state) => TASK_TRANSITIONS[state].length === 0) as TerminalState[];
export const ACTIVE_STATES = TASK_STATES.filter((state) => TASK_TRANSITIONS[state].length > 0) as ActiveState[];

export const isTerminalState = (state: string): state is TerminalState =>
  (TERMINAL_STATES as readonly string[]).includes(state);

export const canTransition = (from: TaskState, to: TaskState): boolean =>
  (TASK_TRANSITIONS[from] as readonly TaskState[]).includes(to);

/** What a webhook can be told about: a task's terminal states, and its refund (`task.refunded`). */
export const REFUNDED_EVENT = 'refunded';
export type WebhookEvent = TerminalState | typeof REFUNDED_EVENT;
export const WEBHOOK_EVENTS: readonly WebhookEvent[] = [...TERMINAL_STATES, REFUNDED_EVENT];

/** A webhook delivery: waiting for (or between) attempts, accepted by the receiver, or given up on. */
export const DELIVERY_STATES = ['pending', 'delivered', 'failed'] as const;
export type DeliveryState = (typeof DELIVERY_STATES)[number];

/**
 * A canary's verdict once its task ends (null while it runs): its solver's answer passed or failed the
 * check, or no answer came (not held against its honesty; docs/trust.md, "Canaries").
 */
export const CANARY_VERDICTS = ['passed', 'failed', 'unanswered'] as const;
export type CanaryVerdict = (typeof CANARY_VERDICTS)[number];

/**
 * The states of a redundant run (docs/trust.md, "Redundant runs"): waiting for its second result;
 * a chat's first check compared, waiting for the verifier's second (`compared`); judged (`refuted`:
 * the client's result proven wrong, `upheld`: the second run was the odd one out);
 * or ended without a verdict.
 */
export const REDUNDANT_RUN_STATES = Object.freeze([
  'pending',
  'compared',
  'agreed',
  'disagreed',
  'incomparable',
  'unanswered',
  'skipped',
  'refuted',
  'upheld',
] as const);
export type RedundantRunState = (typeof REDUNDANT_RUN_STATES)[number];

/**
 * What a task is for: a client's own; a canary testing one solver; a verification run of a client's
 * task (a redundant run, docs/trust.md "Verified client tasks"). Platform tasks (the last two) run as
 * the task workflow with one attempt, matched as their purpose says.
 */
export const TASK_PURPOSES = ['client', 'canary', 'verification'] as const;
export type TaskPurpose = (typeof TASK_PURPOSES)[number];

/**
 * What a completed task's result is known to be worth (docs/trust.md, "Escrow and refunds"): not
 * checked; verified (a redundant run agreed); disputed (a redundant run disagreed, or its solver's pay
 * for it is frozen by a quarantine); refunded (its client got back what it paid).
 */
export const VERIFICATION_STATES = ['unchecked', 'verified', 'disputed', 'refunded'] as const;
export type Verification = (typeof VERIFICATION_STATES)[number];

// ---------------------------------------------------------------------------------------------------
// Attempt outcomes
// ---------------------------------------------------------------------------------------------------

/**
 * How an attempt ended, and what it counts as in its solver's record (which matching ranks by):
 * `failed` is held against the solver; `null` is not counted (still running, or ended by the service).
 * `solverAttempt: false`: not one of the solver's attempts at all (its record's attempt count, and so its
 * success rate, leave it out).
 */
export const ATTEMPT_OUTCOME_TABLE = {
  pending: { counts: null },
  completed: { counts: 'completed' },
  /** The solver reported an error. */
  error: { counts: 'failed' },
  /** The solver declined the task, or did not accept it in time. */
  rejected: { counts: 'failed' },
  /** No result before the attempt's deadline. */
  timeout: { counts: 'failed' },
  /** The solver's socket, or the node holding it, went away during the attempt. */
  disconnected: { counts: 'failed' },
  /** The result failed its schema. */
  invalid_result: { counts: 'failed' },
  /** Stopped by the service (the task finished otherwise, or its client went away). */
  cancelled: { counts: null },
  /**
   * Lost to a fault of the platform: the node holding the solver's socket died or shut down, or the
   * service could not run the attempt (its dispatch activity timed out or failed). Nobody's failure: the
   * task tries again, its solver included, and the solver's record does not count it.
   */
  lost: { counts: null, solverAttempt: false },
} as const satisfies Record<string, { counts: 'completed' | 'failed' | null; solverAttempt?: false }>;

export type AttemptOutcome = keyof typeof ATTEMPT_OUTCOME_TABLE;
export type EndedAttemptOutcome = Exclude<AttemptOutcome, 'pending'>;
export const ATTEMPT_OUTCOMES = Object.keys(ATTEMPT_OUTCOME_TABLE) as AttemptOutcome[];

/** Whether an ended attempt counts as one of its solver's attempts in its record (all but a platform fault's). */
export const isSolverAttempt = (outcome: EndedAttemptOutcome): boolean =>
  !('solverAttempt' in ATTEMPT_OUTCOME_TABLE[outcome]);

/** An attempt the platform lost (outcome `lost`): it counts against nobody (docs/decisions.md, "Platform faults"). */
export const isPlatformFault = (failure: { outcome: string }): boolean => failure.outcome === 'lost';

// ---------------------------------------------------------------------------------------------------
// Attempt errors: why an attempt failed, when the service (not the solver) says so
// ---------------------------------------------------------------------------------------------------

/**
 * The error types the service gives a failed attempt, each with its outcome. A solver's own `error`
 * frame keeps the solver's type (outcome `error`). `retryable: false` ends the task: no other solver
 * could do better.
 */
export const ATTEMPT_ERRORS = {
  solver_disconnected: { outcome: 'disconnected', retryable: true, solverAfter: 'excluded' },
  /**
   * The node holding the solver's socket died or never took the attempt, or the attempt's activity failed
   * (what the workflow sees of it: a heartbeat, schedule-to-start or start-to-close timeout, or an error
   * it threw): not the solver's doing, so it is offered again, first to other solvers (a dead node drops
   * out of matching once its liveness lapses).
   */
  node_unavailable: { outcome: 'lost', retryable: true, solverAfter: 'last_resort' },
  /** The node holding the solver's socket shut down during the attempt, closing the socket itself. */
  node_shutdown: { outcome: 'lost', retryable: true, solverAfter: 'last_resort' },
  accept_timeout: { outcome: 'rejected', retryable: true, solverAfter: 'excluded' },
  attempt_timeout: { outcome: 'timeout', retryable: true, solverAfter: 'excluded' },
  invalid_result: { outcome: 'invalid_result', retryable: true, solverAfter: 'excluded' },
  /** The attempt ended (timed out, was reassigned, or its client went away) before its result was taken. */
  attempt_closed: { outcome: 'cancelled', retryable: true, solverAfter: 'excluded' },
  cancelled: { outcome: 'cancelled', retryable: true, solverAfter: 'excluded' },
  /** Matched in the moment before the solver's drain was recorded: never sent, and not held against it. */
  solver_draining: { outcome: 'cancelled', retryable: true, solverAfter: 'excluded' },
  task_not_found: { outcome: 'error', retryable: false, solverAfter: 'excluded' },
  /**
   * The result's screenshot or page body could not be written to the artifact store: not the solver's
   * doing, so not held against its reputation, and it may have the task again when no other solver fits.
   */
  artifact_store_failed: { outcome: 'cancelled', retryable: true, solverAfter: 'last_resort' },
} as const satisfies Record<
  string,
  { outcome: EndedAttemptOutcome; retryable: boolean; solverAfter: 'excluded' | 'last_resort' }
>;

export type AttemptErrorType = keyof typeof ATTEMPT_ERRORS;

export interface ErrorBody {
  type: string;
  message: string;
}

/** A failed attempt as the workflow sees it. */
export interface AttemptFailed {
  ok: false;
  outcome: EndedAttemptOutcome;
  error: ErrorBody;
  retryable: boolean;
  /** Chat deltas the client received from this attempt; `UNKNOWN_CHUNKS` when that cannot be known here. */
  chunks: number;
}

/** The attempt's result was stored and the task completed and settled; `status` is the task's state after that. */
export interface AttemptSucceeded {
  ok: true;
  chunks: number;
  status: TerminalState;
}

export type AttemptReport = AttemptSucceeded | AttemptFailed;

/** The chunk count of an attempt lost with its node: how many deltas reached the client is not known there. */
export const UNKNOWN_CHUNKS = -1;

/** A failure of one of the service's own attempt error types. */
export function attemptFailed(type: AttemptErrorType, message: string, chunks: number): AttemptFailed {
  const { outcome, retryable } = ATTEMPT_ERRORS[type];
  return { ok: false, outcome, error: { type, message }, retryable, chunks };
}

/**
 * Whether the task may go back to the failed attempt's solver: `excluded` (never again for this task) or
 * `last_resort`. A solver's own error excludes it.
 */
export function solverAfter(failure: AttemptFailed): 'excluded' | 'last_resort' {
  const type = failure.error.type;
  return failure.outcome !== 'error' && type in ATTEMPT_ERRORS
    ? ATTEMPT_ERRORS[type as AttemptErrorType].solverAfter
    : 'excluded';
}

/** A failure the solver reported in an `error` frame (its own error type). */
export function solverReportedFailure(error: ErrorBody, retryable: boolean, chunks: number): AttemptFailed {
  return { ok: false, outcome: 'error', error, retryable, chunks };
}

/** Why the service tells a solver (`cancel` frame `reason`) to stop an attempt. */
export const CANCEL_REASONS = {
  /** The service stopped it: the task finished otherwise, or its client went away. */
  cancelled: 'cancelled',
  accept_timeout: 'accept_timeout',
  deadline: 'deadline',
} as const;
export type CancelReason = keyof typeof CANCEL_REASONS;

// ---------------------------------------------------------------------------------------------------
// Task errors: why a task ended without a result, and what its client is told
// ---------------------------------------------------------------------------------------------------

/**
 * The error types of a task that ended without a result: the state each leaves the task in, the API
 * error type its client gets when it waits for the verdict (POST /v1/fetch and the like, chat), and
 * whether what a chat's attempt delivered before it stopped is billed (`billsDelivered`: the client
 * ended it, after the solver paid its upstream for the text the client received; docs/queue.md, "What
 * a chat pays"). Otherwise its hold is released whole.
 */
export const TASK_ERRORS = {
  /** The task's deadline passed. */
  task_timeout: { state: 'timed_out', apiError: 'task_timeout', billsDelivered: false },
  /** Every attempt failed, no untried solver is left, or a solver said the task cannot succeed. */
  solver_failed: { state: 'failed', apiError: 'solver_failed', billsDelivered: false },
  /** The client of a chat completion went away before the result. */
  client_cancelled: { state: 'failed', apiError: 'solver_failed', billsDelivered: true },
  /** Its workflow could not be started. */
  service_unavailable: { state: 'failed', apiError: 'service_unavailable', billsDelivered: false },
  /** Its client cancelled it. */
  task_cancelled: { state: 'cancelled', apiError: 'task_cancelled', billsDelivered: true },
} as const satisfies Record<string, { state: TerminalState; apiError: string; billsDelivered: boolean }>;

export type TaskErrorType = keyof typeof TASK_ERRORS;
export type UnfinishedState = (typeof TASK_ERRORS)[TaskErrorType]['state'];

/**
 * How a task ends without a result: its terminal state follows from the error type. When its last
 * failed attempt was the solver's own `error` frame, `solver_error_type` keeps that frame's type for the
 * client (e.g. a page that does not exist, told from a solver that crashed).
 */
export interface TaskFailure {
  status: UnfinishedState;
  error: { type: TaskErrorType; message: string; solver_error_type?: string };
}

export function taskFailure(type: TaskErrorType, message: string, solverErrorType?: string): TaskFailure {
  return {
    status: TASK_ERRORS[type].state,
    error: { type, message, ...(solverErrorType ? { solver_error_type: solverErrorType } : {}) },
  };
}

/** The solver's own error type of a failed attempt, when the solver reported the failure. */
export const solverErrorTypeOf = (failure: AttemptFailed): string | undefined =>
  failure.outcome === 'error' ? failure.error.type : undefined;

/**
 * The solver error types that say the target failed, not the solver: its host does not resolve, it
 * refused the connection or the TLS handshake, or its page answered an HTTP error. Only a claim: it is
 * held against the solver unless corroborated (docs/trust.md, "Target failures").
 */
export const TARGET_FAILURE_TYPES = Object.freeze([
  'host_not_found',
  'connection_refused',
  'tls_error',
  'http_error',
] as const);
/**
 * The solver error types the client's own request causes: a selector the page does not have, a body that
 * is binary or above the size limit, a target that stalls or a deadline set too short. Judged as target
 * failures are (a claim, corroborated before it is not held against the solver), per URL and type rather
 * than per origin (docs/trust.md, "Target failures").
 */
export const REQUEST_FAILURE_TYPES = Object.freeze([
  'selector_not_found',
  'unsupported_content',
  'response_too_large',
  'timeout',
  'deadline_exceeded',
] as const);
/** Every error type that claims the failure is not the solver's: the target's, or the request's. */
export const CLAIMED_FAILURE_TYPES = Object.freeze([...TARGET_FAILURE_TYPES, ...REQUEST_FAILURE_TYPES] as const);
export type TargetFailureType = (typeof CLAIMED_FAILURE_TYPES)[number];
export const isTargetFailureType = (type: string): type is TargetFailureType =>
  (CLAIMED_FAILURE_TYPES as readonly string[]).includes(type);
export const isRequestFailureType = (type: string): boolean =>
  (REQUEST_FAILURE_TYPES as readonly string[]).includes(type);
/** Whether a failed attempt is its solver's claim that the target failed. */
export const claimsTargetFailure = (failure: { outcome: string; error?: ErrorBody }): boolean =>
  failure.outcome === 'error' && failure.error !== undefined && isTargetFailureType(failure.error.type);

/**
 * How a target failure claim was judged: `target`, not held against the solver (the service's own
 * check confirmed it, another solver's claim on the same target did, its solver is a verifier, or it is
 * a canary name the solver could not resolve); `solver`, held against it (so
 * far uncorroborated); `contradicted`, held against it because another solver then answered the task.
 */
export const TARGET_FAILURE_VERDICTS = Object.freeze(['target', 'solver', 'contradicted'] as const);
export type TargetFailureVerdict = (typeof TARGET_FAILURE_VERDICTS)[number];

/** What a waiting client is told about a task with no result: an API error type and its message. */
export interface ClientFailure {
  type: (typeof TASK_ERRORS)[TaskErrorType]['apiError'];
  message: string;
  solverErrorType?: string;
}

/**
 * What a client waiting for `task` is told when it did not complete: `verdict` is its final state and
 * error, or null when none came in time (the client's own wait ran out). A web task's timeout says
 * where to poll for it.
 */
export function clientFailure(
  kind: 'web' | 'chat',
  task: { task_id: string; timeout_seconds: number },
  verdict: { status: TaskState; error?: { type?: string; message?: string; solver_error_type?: string } | null } | null,
): ClientFailure {
  if (!verdict || !isTerminalState(verdict.status) || verdict.status === 'timed_out') {
    return {
      type: 'task_timeout',
      message:
        kind === 'chat'
          ? 'The completion did not finish in time.'
          : `The task did not finish in ${task.timeout_seconds} s; poll GET /v1/tasks/${task.task_id}.`,
    };
  }
  const type = verdict.error?.type;
  const known =
    type !== undefined && type in TASK_ERRORS ? TASK_ERRORS[type as TaskErrorType] : TASK_ERRORS.solver_failed;
  const reason = verdict.error?.message ?? 'unknown error';
  const solverErrorType = verdict.error?.solver_error_type;
  const what = verdict.status === 'cancelled' ? 'The task was cancelled' : 'The task failed';
  return {
    type: known.apiError,
    message: kind === 'chat' ? reason : `${what}: ${reason}`,
    ...(solverErrorType ? { solverErrorType } : {}),
  };
}

// ---------------------------------------------------------------------------------------------------
// What an attempt is given
// ---------------------------------------------------------------------------------------------------

/** The solver, node and price matched for one attempt. */
export interface Assignment {
  attemptId: string;
  solverId: string;
  nodeId: string;
  pricePoints: string;
  billingType: string;
  marginalCost: string;
  modelName: string;
  /** The offer's estimated price for this request (docs/queue.md, "What a chat pays"). */
  estimatedPricePoints?: string;
}
