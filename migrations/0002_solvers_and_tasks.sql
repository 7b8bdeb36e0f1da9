-- Solvers (capabilities, connections, statistics), API nodes, tasks and their attempts.

CREATE TABLE solver_capabilities (
  solver_id text NOT NULL REFERENCES accounts (account_id),
  task_type text NOT NULL CHECK (task_type IN ('web_search', 'proxy_fetch', 'screenshot', 'page_snapshot', 'chat_completion')),
  tier text NOT NULL CHECK (tier IN ('strong', 'standard', 'basic')),
  billing_type text NOT NULL CHECK (billing_type IN ('per_request', 'per_token')),
  fulfillment_path text NOT NULL CHECK (fulfillment_path IN ('http', 'browser', 'search_api', 'local_model', 'provider_api')),
  provider_name text NOT NULL,
  model_name text NOT NULL,
  marginal_cost numeric NOT NULL CHECK (marginal_cost >= 0),
  min_price_points numeric NOT NULL CHECK (min_price_points >= 0),
  max_concurrent integer NOT NULL CHECK (max_concurrent > 0),
  -- Attempts currently running on this capability; reserved and released by guarded UPDATEs so that
  -- concurrent matchers can never exceed max_concurrent.
  active_attempts integer NOT NULL DEFAULT 0 CHECK (active_attempts >= 0),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (solver_id, task_type, model_name)
);
CREATE INDEX solver_capabilities_match_idx ON solver_capabilities (task_type, min_price_points);

-- Every API node heartbeats here; a node not seen for a while is dead and its sockets do not count.
CREATE TABLE api_nodes (
  node_id text PRIMARY KEY,
  started_at timestamptz NOT NULL DEFAULT now(),
  last_seen_at timestamptz NOT NULL DEFAULT now()
);

-- The node that holds each solver's socket: dispatch goes to that node's task queue.
CREATE TABLE solver_connections (
  solver_id text PRIMARY KEY REFERENCES accounts (account_id),
  connection_id text NOT NULL,
  node_id text NOT NULL REFERENCES api_nodes (node_id) ON DELETE CASCADE,
  connected_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX solver_connections_node_idx ON solver_connections (node_id);

CREATE TABLE solver_stats (
  solver_id text PRIMARY KEY REFERENCES accounts (account_id),
  attempts integer NOT NULL DEFAULT 0,
  completed integer NOT NULL DEFAULT 0,
  failed integer NOT NULL DEFAULT 0,
  total_latency_ms bigint NOT NULL DEFAULT 0
);

CREATE TABLE tasks (
  task_id text PRIMARY KEY,
  account_id text NOT NULL REFERENCES accounts (account_id),
  task_type text NOT NULL,
  status text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'assigned', 'completed', 'failed', 'timed_out')),
  payload jsonb NOT NULL,
  max_price_points numeric NOT NULL CHECK (max_price_points >= 0),
  price_points numeric,
  timeout_seconds integer NOT NULL CHECK (timeout_seconds > 0),
  solver_id text,
  result jsonb,
  error jsonb,
  workflow_id text NOT NULL,
  workflow_started_at timestamptz,
  idempotency_key text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  completed_at timestamptz
);
CREATE INDEX tasks_account_idx ON tasks (account_id, created_at DESC);
CREATE UNIQUE INDEX tasks_idempotency_idx ON tasks (account_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
-- Tasks whose workflow start was never confirmed (a node died in between); the worker sweeps these.
CREATE INDEX tasks_unstarted_idx ON tasks (created_at) WHERE workflow_started_at IS NULL;

CREATE TABLE task_attempts (
  attempt_id text PRIMARY KEY,
  task_id text NOT NULL REFERENCES tasks (task_id),
  attempt_number integer NOT NULL,
  solver_id text NOT NULL REFERENCES accounts (account_id),
  task_type text NOT NULL,
  model_name text NOT NULL,
  node_id text NOT NULL,
  price_points numeric NOT NULL,
  outcome text NOT NULL DEFAULT 'pending',
  error jsonb,
  result jsonb,
  started_at timestamptz NOT NULL DEFAULT now(),
  accepted_at timestamptz,
  ended_at timestamptz,
  UNIQUE (task_id, attempt_number)
);
CREATE INDEX task_attempts_task_idx ON task_attempts (task_id, attempt_number);
CREATE INDEX task_attempts_open_idx ON task_attempts (solver_id) WHERE ended_at IS NULL;
