/**
 * The error types a solver reports in `error` frames, each with whether another attempt (possibly on
 * another solver) could succeed. Defined once; handlers throw SolverError with one of these.
 */
export const SOLVER_ERROR_RETRYABLE = {
  invalid_payload: false,
  target_blocked: false,
  too_many_redirects: false,
  response_too_large: false,
  unsupported_content: false,
  host_not_found: false,
  connection_refused: false,
  selector_not_found: false,
  action_failed: false,
  invalid_selector: false,
  upstream_rejected: false,
  http_error: false,
  tls_error: false,
  fetch_failed: true,
  navigation_failed: true,
  timeout: true,
  deadline_exceeded: true,
  upstream_error: true,
  unsupported_task_type: true,
  busy: true,
  shutting_down: true,
  disconnected: true,
  invalid_result: true,
  cancelled: true,
  internal_error: true,
} as const;

export type SolverErrorType = keyof typeof SOLVER_ERROR_RETRYABLE;

export class SolverError extends Error {
  readonly retryable: boolean;
  constructor(
    readonly type: SolverErrorType,
    message: string,
    retryable?: boolean,
  ) {
    super(message);
    this.name = 'SolverError';
    this.retryable = retryable ?? SOLVER_ERROR_RETRYABLE[type];
  }
}

/** The reason an attempt's AbortSignal carries, so a handler's failure can be told apart from our own abort. */
export function abortReason(
  type: 'cancelled' | 'deadline_exceeded' | 'timeout' | 'shutting_down' | 'disconnected',
  message: string,
) {
  return new SolverError(type, message);
}

/**
 * Maps whatever a handler threw to a SolverError. When the attempt's signal has fired, its reason wins:
 * the handler's own error is then only a consequence (a closed page, an aborted socket).
 */
export function toSolverError(error: unknown, signal?: AbortSignal): SolverError {
  if (signal?.aborted && signal.reason instanceof SolverError) return signal.reason;
  if (error instanceof SolverError) return error;
  if (signal?.aborted) return new SolverError('cancelled', 'the attempt was aborted');
  const message = error instanceof Error ? error.message : String(error);
  return new SolverError('internal_error', firstLine(message));
}

export function firstLine(message: string): string {
  return message.split('\n')[0]!.slice(0, 500);
}
