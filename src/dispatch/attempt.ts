import type { CapabilityTaskType } from '../schemas/domain';
import type { ResultIssueData } from '../schemas/frames';
import {
  attemptFailed,
  solverReportedFailure,
  type AttemptErrorType,
  type AttemptFailed,
  type ErrorBody,
} from '../contract/lifecycle';

/** One attempt as the solver hub runs it on a solver's socket, and how it fails. */

export interface AttemptRequest {
  solverId: string;
  attemptId: string;
  taskId: string;
  taskType: CapabilityTaskType;
  payload: Record<string, unknown>;
  deadline: Date;
  acceptTimeoutMs: number;
  signal?: AbortSignal;
  onChunk?(delta: Record<string, unknown>): void;
  /** A test task (test mode, src/dispatch/test-tasks.ts): marked `test` in its frame. */
  test?: boolean;
  /** The result failed its schema (the solver is also sent `result_rejected`). */
  onResultRejected?(issues: ResultIssueData[]): void;
}

/** An attempt that ended without a result; `failure` is what the workflow is told (chunks counted by the caller). */
export class AttemptFailure extends Error {
  private constructor(readonly failure: AttemptFailed) {
    super(failure.error.message);
  }

  /** One of the service's own reasons. */
  static of(type: AttemptErrorType, message: string) {
    return new AttemptFailure(attemptFailed(type, message, 0));
  }

  /** The solver's `error` frame. */
  static reported(error: ErrorBody, retryable: boolean) {
    return new AttemptFailure(solverReportedFailure(error, retryable, 0));
  }
}
