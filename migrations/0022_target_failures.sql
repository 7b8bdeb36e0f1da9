-- Target failure claims (docs/trust.md, "Target failures"): a solver's error that says the target failed
-- (its host does not resolve, it refused the connection or TLS, its page answered an HTTP error), and
-- whom it was held against. Written by the statement that ends the attempt.
CREATE TABLE target_failures (
  attempt_id text PRIMARY KEY,
  task_id text NOT NULL,
  solver_id text NOT NULL REFERENCES accounts (account_id),
  task_type text NOT NULL,
  -- The task's account: limited (its rate limit charged) when the failure is the target's.
  account_id text NOT NULL REFERENCES accounts (account_id),
  -- The origin of the task's URL (scheme, host and port): what corroborates a claim is a claim on it.
  target text NOT NULL,
  error_type text NOT NULL,
  -- target: not held against the solver; solver: held against it, uncorroborated so far; contradicted:
  -- held against it, another solver answered the same task.
  verdict text NOT NULL CHECK (verdict IN ('target', 'solver', 'contradicted')),
  -- What decided it: service_check, corroborated, platform_task, uncorroborated, answered_by_another.
  reason text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  judged_at timestamptz NOT NULL DEFAULT now()
);
-- A claim looks for other solvers' recent claims on its target.
CREATE INDEX target_failures_target_idx ON target_failures (target, created_at);
-- An answered task's earlier claims are contradicted.
CREATE INDEX target_failures_task_idx ON target_failures (task_id);
