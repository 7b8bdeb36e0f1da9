-- Results are kept for RESULT_RETENTION_SECONDS after their task ends; then `result` becomes NULL and
-- this says when it was removed (the task's state, prices, times, attempts and ledger entries stay).
ALTER TABLE tasks ADD COLUMN result_expired_at timestamptz;
-- The purge takes the oldest results first, a small batch at a time.
CREATE INDEX tasks_result_retention_idx ON tasks (completed_at) WHERE result IS NOT NULL;
-- Idempotency keys are released 24 hours after their task was created, oldest first.
CREATE INDEX tasks_idempotency_age_idx ON tasks (created_at) WHERE idempotency_key IS NOT NULL;
