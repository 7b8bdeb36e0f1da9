-- A canary page is served at a host name and path of its own (docs/trust.md, "Canary pages"): the
-- host and path, looked up by the request's Host header and path. NULL for chat and search canaries.
ALTER TABLE canaries ADD COLUMN page text;
CREATE UNIQUE INDEX canaries_page_idx ON canaries (page) WHERE page IS NOT NULL;
