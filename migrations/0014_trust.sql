-- Trust in the supply (docs/trust.md): reputation per solver and task type, quarantines, canary tasks,
-- and each API node's own address (a canary page is served there to the solvers it holds).

-- Decayed evidence, updated by the statement that ends each attempt (and by a canary's verdict).
CREATE TABLE solver_reputation (
  solver_id text NOT NULL REFERENCES accounts (account_id),
  task_type text NOT NULL,
  -- Exponentially decayed counts (half-life TRUST_HALF_LIFE_HOURS), as of decayed_at.
  successes double precision NOT NULL DEFAULT 0,
  failures double precision NOT NULL DEFAULT 0,
  -- Moving average of completed attempts' latency.
  latency_ms double precision,
  canary_passes integer NOT NULL DEFAULT 0,
  canary_failures integer NOT NULL DEFAULT 0,
  -- Attempts ended since the last canary was sent, and the (random) count at which the next is due
  -- (NULL: none is due by count).
  since_canary integer NOT NULL DEFAULT 0,
  canary_due_after integer,
  decayed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (solver_id, task_type)
);

CREATE TABLE solver_quarantines (
  quarantine_id bigserial PRIMARY KEY,
  solver_id text NOT NULL REFERENCES accounts (account_id),
  task_type text NOT NULL,
  reason text NOT NULL,
  evidence jsonb NOT NULL,
  started_at timestamptz NOT NULL DEFAULT now(),
  cleared_at timestamptz,
  cleared_note text
);
-- At most one open quarantine per solver; matching probes this index.
CREATE UNIQUE INDEX solver_quarantines_open_idx ON solver_quarantines (solver_id) WHERE cleared_at IS NULL;

-- A canary: a platform task whose page (GET /canary/{canary_id}) carries a fresh token.
CREATE TABLE canaries (
  task_id text PRIMARY KEY,
  canary_id text NOT NULL UNIQUE,
  solver_id text NOT NULL REFERENCES accounts (account_id),
  task_type text NOT NULL,
  token text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  -- unanswered: the task ended without a result (counted as an ordinary failure, not a canary's).
  verdict text CHECK (verdict IN ('passed', 'failed', 'unanswered')),
  judged_at timestamptz
);
-- One canary at a time per solver and task type.
CREATE UNIQUE INDEX canaries_open_idx ON canaries (solver_id, task_type) WHERE verdict IS NULL;

ALTER TABLE api_nodes ADD COLUMN base_url text;
