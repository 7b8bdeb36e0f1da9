-- What a task is for (docs/trust.md): a client's own, a canary testing one solver, or a verification
-- run of a client's task (a redundant run, second or third). Platform tasks run as the task workflow
-- with the options their purpose gives them; before this column they were told apart by the canaries
-- and redundant_runs rows that name them.
ALTER TABLE tasks ADD COLUMN purpose text NOT NULL DEFAULT 'client'
  CHECK (purpose IN ('client', 'canary', 'verification'));
UPDATE tasks t SET purpose = 'canary' FROM canaries k WHERE k.task_id = t.task_id;
UPDATE tasks t SET purpose = 'verification' FROM redundant_runs r WHERE t.task_id IN (r.run_task_id, r.third_run_task_id);
