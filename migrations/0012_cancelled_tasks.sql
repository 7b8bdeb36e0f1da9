-- A task's client may cancel it: `cancelled` is a terminal state (src/tasks/lifecycle.ts).
ALTER TABLE tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_status_check
  CHECK (status IN ('queued', 'assigned', 'completed', 'failed', 'timed_out', 'cancelled'));
