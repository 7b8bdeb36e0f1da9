-- Chat usage reports above the service's bound (docs/trust.md, "Usage inflation"): what the solver
-- reported, what the service counted of the prompt and the delivered deltas, the bound, and what was
-- billed. Written by the statement that settles the chat; evidence against the solver.
CREATE TABLE usage_inflations (
  task_id text PRIMARY KEY REFERENCES tasks (task_id),
  solver_id text NOT NULL REFERENCES accounts (account_id),
  task_type text NOT NULL,
  reported jsonb NOT NULL,
  counted jsonb NOT NULL,
  bound jsonb NOT NULL,
  billed jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
-- A solver's recent inflated reports are counted as each new one is recorded, and listed for admins.
CREATE INDEX usage_inflations_solver_idx ON usage_inflations (solver_id, created_at);
