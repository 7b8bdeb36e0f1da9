-- GET /v1/tasks pages an account's tasks by (created_at, task_id), newest first.
DROP INDEX tasks_account_idx;
CREATE INDEX tasks_account_listing_idx ON tasks (account_id, created_at DESC, task_id DESC);
