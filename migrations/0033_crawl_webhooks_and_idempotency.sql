-- A crawl's or batch scrape's webhook (Firecrawl's `webhook` option: url, headers, metadata, events).
ALTER TABLE crawls ADD COLUMN webhook jsonb;

-- A job's events go through the same outbox as a task's: the delivery names its job, and carries the body
-- the event had when it happened (a page's document, the job's end), written with the state that causes it.
-- Its task_id is the subject of the event: the page's task for a page, the job for the job's own events.
ALTER TABLE webhook_deliveries ADD COLUMN crawl_id text REFERENCES crawls (crawl_id);
ALTER TABLE webhook_deliveries ADD COLUMN payload jsonb;

-- A job started with an Idempotency-Key: the same key with the same request names the first job.
ALTER TABLE crawls ADD COLUMN idempotency_key text;
ALTER TABLE crawls ADD COLUMN request_fingerprint text;
CREATE UNIQUE INDEX crawls_idempotency_idx ON crawls (account_id, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- How many tasks a page was given: a page whose task failed for want of a solver (its solver's node lost,
-- none other online) gets another, with an idempotency key of the page and this count.
ALTER TABLE crawl_pages ADD COLUMN task_attempts integer NOT NULL DEFAULT 0;
