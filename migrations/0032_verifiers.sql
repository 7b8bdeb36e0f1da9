-- Verified client tasks (docs/trust.md, "Verified client tasks"): solvers an operator trusts to re-run a
-- sampled client task, a third run that breaks a tie between two others, and the sequential test on each
-- solver's verified failures.

-- Solvers an operator marked as verifiers (POST /v1/admin/solvers/{id}/verifier).
CREATE TABLE solver_verifiers (
  solver_id text PRIMARY KEY REFERENCES accounts (account_id),
  marked_at timestamptz NOT NULL DEFAULT now()
);

-- refuted: the client's result was proven wrong (by a verifier or a third run); upheld: the second
-- run was the odd one out and the client's result stood.
ALTER TABLE redundant_runs DROP CONSTRAINT redundant_runs_status_check;
ALTER TABLE redundant_runs ADD CONSTRAINT redundant_runs_status_check
  CHECK (status IN ('pending', 'agreed', 'disagreed', 'incomparable', 'unanswered', 'skipped', 'refuted', 'upheld'));
-- The run was sent to verifiers only.
ALTER TABLE redundant_runs ADD COLUMN by_verifier boolean NOT NULL DEFAULT false;
-- The run that breaks a tie between two solvers that are not verifiers, and the solver that answered it.
ALTER TABLE redundant_runs ADD COLUMN third_run_task_id text UNIQUE;
ALTER TABLE redundant_runs ADD COLUMN third_solver_id text REFERENCES accounts (account_id);
-- When the run's checks ended (its last verdict, or none to come): while NULL the client task's
-- solver's pay for it does not vest, so a refund can still reach it.
ALTER TABLE redundant_runs ADD COLUMN concluded_at timestamptz;
UPDATE redundant_runs SET concluded_at = COALESCE(judged_at, now()) WHERE status <> 'pending';
-- The solver whose result was proven wrong, once one was.
ALTER TABLE redundant_runs ADD COLUMN wrong_solver_id text REFERENCES accounts (account_id);
CREATE INDEX redundant_runs_wrong_idx ON redundant_runs (wrong_solver_id, created_at) WHERE wrong_solver_id IS NOT NULL;

-- Verified outcomes per solver and task type (none decays): what sets its verification rate, and the
-- log-likelihood ratio of the sequential test that quarantines it.
ALTER TABLE solver_reputation ADD COLUMN verified_passes integer NOT NULL DEFAULT 0;
ALTER TABLE solver_reputation ADD COLUMN verified_failures integer NOT NULL DEFAULT 0;
ALTER TABLE solver_reputation ADD COLUMN sprt_llr double precision NOT NULL DEFAULT 0;
