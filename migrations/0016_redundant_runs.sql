-- Sampled redundant execution (docs/trust.md, "Redundant runs"): a client's web task run again by a
-- second solver, for the platform's account, and the two results compared.

-- One row per sampled client task, written in the transaction that settled it.
CREATE TABLE redundant_runs (
  -- The client's task, and the solver whose result the client got.
  task_id text PRIMARY KEY,
  task_type text NOT NULL,
  first_solver_id text NOT NULL REFERENCES accounts (account_id),
  -- The platform's task that runs it again, once created, and the solver that answered it.
  run_task_id text UNIQUE,
  second_solver_id text REFERENCES accounts (account_id),
  created_at timestamptz NOT NULL DEFAULT now(),
  workflow_started_at timestamptz,
  status text NOT NULL DEFAULT 'pending'
    CHECK (status IN ('pending', 'agreed', 'disagreed', 'incomparable', 'unanswered', 'skipped')),
  -- The type's measure, its value and the threshold below which the two disagree.
  measure text,
  similarity double precision,
  threshold double precision,
  evidence jsonb,
  judged_at timestamptz
);
-- Workers start the workflows of sampled runs: they probe this index every 2 s.
CREATE INDEX redundant_runs_unstarted_idx ON redundant_runs (created_at) WHERE workflow_started_at IS NULL;
-- An admin reads a solver's disagreements, on either side.
CREATE INDEX redundant_runs_first_idx ON redundant_runs (first_solver_id, created_at) WHERE status = 'disagreed';
CREATE INDEX redundant_runs_second_idx ON redundant_runs (second_solver_id, created_at) WHERE status = 'disagreed';

-- Redundant runs a solver took part in (either side) and those that disagreed; neither decays.
ALTER TABLE solver_reputation ADD COLUMN redundant_runs integer NOT NULL DEFAULT 0;
ALTER TABLE solver_reputation ADD COLUMN disagreements integer NOT NULL DEFAULT 0;
