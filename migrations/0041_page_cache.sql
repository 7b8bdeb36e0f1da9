-- The page cache's index (docs/crawl.md, "Page cache"): a page a scrape or a crawl fetched, by its
-- normalised URL, the way it was obtained (`variant`: fetched, fetched and rendered when needed, or
-- rendered with given options) and who may be served it (`scope`: 'shared' for a public page fetched
-- with nothing of the client's, else the account's id). The page itself is the task's stored result
-- (its body in the artifact store when large), so the cache keeps nothing the result retention does
-- not: an entry goes with its task's result.
CREATE TABLE page_cache (
  url text NOT NULL,
  variant text NOT NULL,
  scope text NOT NULL,
  task_id text NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
  cached_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (url, variant, scope)
);
CREATE INDEX page_cache_task_idx ON page_cache (task_id);
