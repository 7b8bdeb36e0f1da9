-- Canaries started as they become due and handed their solver's slot by signal (docs/trust.md).

-- A canary waits in the queue like any task, for its one solver's slot (NULL: a client task, any
-- solver that fits). Whoever frees or adds a slot of that solver hands it to the canary first.
ALTER TABLE task_queue ADD COLUMN canary_for text;
CREATE INDEX task_queue_canary_idx ON task_queue (task_type, arrival, task_id) WHERE canary_for IS NOT NULL;

-- A canary's workflow id numbers the solver's canaries of a task type (the count of those sent before
-- it): every process that starts the same due canary names the same workflow.
CREATE INDEX canaries_solver_idx ON canaries (solver_id, task_type);
