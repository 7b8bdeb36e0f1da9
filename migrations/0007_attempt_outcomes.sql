-- An attempt's outcome is one of the lifecycle's (src/tasks/lifecycle.ts), like a task's state.
ALTER TABLE task_attempts ADD CONSTRAINT task_attempts_outcome_check
  CHECK (outcome IN ('pending', 'completed', 'error', 'rejected', 'timeout', 'disconnected', 'invalid_result', 'cancelled'));
