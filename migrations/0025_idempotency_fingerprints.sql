-- The request an Idempotency-Key was first used with, as a digest of its operation and body: the same
-- key sent with another request is refused (422 idempotency_key_reused) instead of answered with the
-- first request's task. Tasks created before this column have none and are matched by key alone.
ALTER TABLE tasks ADD COLUMN request_fingerprint text;
