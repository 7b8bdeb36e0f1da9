-- A solver's result is written once, with the task it completes (tasks.result): screenshots are large,
-- and the copy on the attempt was never read after completion.
ALTER TABLE task_attempts DROP COLUMN result;
