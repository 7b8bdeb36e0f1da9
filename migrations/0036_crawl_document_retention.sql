-- A crawl's or batch scrape's page documents and the webhook bodies that carry them are kept for
-- RESULT_RETENTION_SECONDS after the page ended, as a task's result is; then the document becomes NULL,
-- the delivery's `data` becomes [], and the job says when its documents began to go (it answers 404 from then on).
ALTER TABLE crawls ADD COLUMN documents_expired_at timestamptz;
-- The purge takes the oldest documents first, a small batch at a time.
CREATE INDEX crawl_pages_document_retention_idx ON crawl_pages (finished_at) WHERE document IS NOT NULL;
CREATE INDEX webhook_deliveries_payload_retention_idx ON webhook_deliveries (created_at) WHERE payload->'data' <> '[]'::jsonb;
