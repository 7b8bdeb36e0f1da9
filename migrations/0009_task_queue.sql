-- Tasks waiting for a slot, per task type, served in arrival order (docs/queue.md). A row exists while
-- its task is queued and not yet handed a slot; it is deleted in the statement that hands it one, or
-- that finishes the task.
CREATE TABLE task_queue (
  task_id text PRIMARY KEY REFERENCES tasks (task_id) ON DELETE CASCADE,
  task_type text NOT NULL,
  -- The task's creation: a task queued again after a failed attempt keeps its place.
  arrival timestamptz NOT NULL,
  -- The attempt a handed slot becomes (its id is the task's and this number).
  attempt_number integer NOT NULL CHECK (attempt_number > 0),
  max_price_points numeric NOT NULL,
  -- Chat: the strong-tier models allowed; NULL for web tasks.
  strong_models text[],
  excluded_solver_ids text[] NOT NULL DEFAULT '{}',
  last_resort_solver_ids text[] NOT NULL DEFAULT '{}',
  workflow_id text NOT NULL,
  timeout_seconds integer NOT NULL
);
CREATE INDEX task_queue_order_idx ON task_queue (task_type, arrival, task_id);

-- Handoffs not yet told to their workflow: written with the handoff, deleted once the workflow has been
-- signalled. Rows left behind by a process that died are sent by a worker's sweep.
CREATE TABLE slot_handoffs (
  attempt_id text PRIMARY KEY,
  task_id text NOT NULL,
  workflow_id text NOT NULL,
  attempt_number integer NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX slot_handoffs_created_idx ON slot_handoffs (created_at);

