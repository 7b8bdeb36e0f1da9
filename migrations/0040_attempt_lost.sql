-- An attempt lost to a fault of the platform (its node died or shut down, its activity failed) ends
-- `lost`: counted against nobody (src/contract/lifecycle.ts, docs/decisions.md "Platform faults").
ALTER TABLE task_attempts DROP CONSTRAINT task_attempts_outcome_check;
ALTER TABLE task_attempts ADD CONSTRAINT task_attempts_outcome_check
  CHECK (outcome IN ('pending', 'completed', 'error', 'rejected', 'timeout', 'disconnected', 'invalid_result', 'cancelled', 'lost'));
