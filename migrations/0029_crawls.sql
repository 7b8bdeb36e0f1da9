-- Crawls and batch scrapes (docs/crawl.md): one row per job, one per page. A page's URL is unique within
-- its job, so a URL found again (by another page, after a restart, by a retried activity) is never a
-- second page; each page is an ordinary web task, created with an idempotency key derived from the page.
CREATE TABLE crawls (
  crawl_id text PRIMARY KEY,
  account_id text NOT NULL REFERENCES accounts (account_id),
  key_id text,
  kind text NOT NULL CHECK (kind IN ('crawl', 'batch_scrape')),
  url text,
  options jsonb NOT NULL,
  status text NOT NULL DEFAULT 'scraping' CHECK (status IN ('scraping', 'completed', 'failed', 'cancelled')),
  error text,
  robots_blocked text[] NOT NULL DEFAULT '{}',
  workflow_id text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  finished_at timestamptz,
  expires_at timestamptz NOT NULL
);
CREATE INDEX crawls_active_idx ON crawls (account_id, created_at) WHERE status = 'scraping';

CREATE TABLE crawl_pages (
  page_id bigserial PRIMARY KEY,
  crawl_id text NOT NULL REFERENCES crawls (crawl_id),
  url text NOT NULL,
  depth integer NOT NULL CHECK (depth >= 0),
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
  task_id text,
  document jsonb,
  error jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  finished_at timestamptz,
  UNIQUE (crawl_id, url)
);
CREATE INDEX crawl_pages_status_idx ON crawl_pages (crawl_id, status, page_id);
