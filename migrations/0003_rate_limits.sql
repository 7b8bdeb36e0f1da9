-- Per-account request counters, shared by every API node: one fixed window per account, advanced by a
-- single upsert per request, so concurrent requests on any node count exactly once.
CREATE TABLE rate_limits (
  account_id text PRIMARY KEY REFERENCES accounts (account_id) ON DELETE CASCADE,
  window_start timestamptz NOT NULL,
  window_count integer NOT NULL CHECK (window_count >= 0),
  -- Every request ever counted since the last reset; the simulation is expressed against it.
  total_count bigint NOT NULL DEFAULT 0 CHECK (total_count >= 0),
  -- Set by simulate-rate-limit: the request whose total_count reaches this value, and every later one,
  -- is refused until a reset. NULL when no simulation is armed.
  refuse_from_total bigint
);
