/**
 * The one list of API error types. Every non-validation error the API returns is an ApiError,
 * rendered by the error middleware as {"error":{"type","message"}}.
 */
export const ERROR_STATUS = {
  bad_request: 400,
  invalid_trust_mode: 400,
  prompt_safety_violation: 400,
  unsupported_format: 400,
  unsupported_option: 400,
  invalid_action: 400,
  location_unavailable: 400,
  authentication_required: 401,
  invalid_api_key: 401,
  admin_authentication_required: 401,
  invalid_admin_key: 401,
  metrics_authentication_required: 401,
  invalid_metrics_token: 401,
  insufficient_balance: 402,
  no_strong_solver_available: 402,
  key_spend_limit_reached: 402,
  domain_blocked: 403,
  admin_disabled: 403,
  metrics_disabled: 403,
  forbidden: 403,
  restricted_api_key: 403,
  not_found: 404,
  task_not_found: 404,
  model_not_found: 404,
  account_not_found: 404,
  api_key_not_found: 404,
  quarantine_not_found: 404,
  webhook_not_found: 404,
  webhook_delivery_not_found: 404,
  job_not_found: 404,
  artifact_not_found: 404,
  method_not_allowed: 405,
  task_already_finished: 409,
  last_api_key: 409,
  webhook_delivery_not_failed: 409,
  task_cancelled: 409,
  result_expired: 410,
  payload_too_large: 413,
  unsupported_media_type: 415,
  idempotency_key_reused: 422,
  no_solver_within_price: 422,
  rate_limited: 429,
  solvers_busy: 429,
  internal_error: 500,
  invalid_domain_policy: 500,
  solver_failed: 502,
  extraction_failed: 502,
  no_solver_available: 503,
  solver_checks_unfunded: 503,
  service_unavailable: 503,
  task_timeout: 504,
} as const;

export type ErrorType = keyof typeof ERROR_STATUS;

export class ApiError extends Error {
  readonly status: number;
  constructor(
    readonly type: ErrorType,
    message: string,
    readonly extra: Record<string, unknown> = {},
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.status = ERROR_STATUS[type];
  }

  toBody() {
    return { error: { type: this.type, message: this.message, ...this.extra } };
  }
}
