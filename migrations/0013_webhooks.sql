-- Webhooks: a task's subscription, one delivery per task and event (written with the terminal state
-- that causes it), each HTTP attempt of a delivery, and each account's signing secret.

CREATE TABLE webhook_secrets (
  account_id text PRIMARY KEY REFERENCES accounts (account_id),
  secret text NOT NULL,
  rotated_at timestamptz NOT NULL DEFAULT now()
);

-- Written before its task (the task id is chosen first), so no task exists without its subscription.
CREATE TABLE task_webhooks (
  task_id text PRIMARY KEY,
  account_id text NOT NULL REFERENCES accounts (account_id),
  url text NOT NULL,
  events text[] NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE webhook_deliveries (
  delivery_id text PRIMARY KEY,
  task_id text NOT NULL,
  event text NOT NULL,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
  created_at timestamptz NOT NULL DEFAULT now(),
  workflow_started_at timestamptz,
  finished_at timestamptz,
  UNIQUE (task_id, event)
);
-- Deliveries whose workflow start is not recorded yet; the worker's sweep starts them.
CREATE INDEX webhook_deliveries_unstarted_idx ON webhook_deliveries (created_at) WHERE workflow_started_at IS NULL;

CREATE TABLE webhook_attempts (
  delivery_id text NOT NULL REFERENCES webhook_deliveries (delivery_id),
  attempt integer NOT NULL,
  started_at timestamptz NOT NULL DEFAULT now(),
  duration_ms integer NOT NULL,
  status_code integer,
  error text,
  PRIMARY KEY (delivery_id, attempt)
);
