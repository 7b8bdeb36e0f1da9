-- An account's API keys have names and record when they were last used (at most once a minute).
ALTER TABLE api_keys ADD COLUMN name text NOT NULL DEFAULT 'default';
ALTER TABLE api_keys ADD COLUMN last_used_at timestamptz;
