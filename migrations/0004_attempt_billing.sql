-- How an attempt is billed, fixed when the solver is matched (a later capability change does not
-- re-price work already under way).
ALTER TABLE task_attempts
  ADD COLUMN billing_type text NOT NULL DEFAULT 'per_request' CHECK (billing_type IN ('per_request', 'per_token')),
  ADD COLUMN marginal_cost numeric NOT NULL DEFAULT 0 CHECK (marginal_cost >= 0);
