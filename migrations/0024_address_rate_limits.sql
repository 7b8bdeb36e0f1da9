-- Request counters per client address and scope (registration, failed authentication, solver socket
-- upgrades), shared by every API node: one fixed window per address and scope, advanced by a single
-- upsert per request. An IPv6 client is counted by its /64, the least a host is usually given.
-- Unlogged: a crash that empties the counters costs nothing but a fresh window.
CREATE UNLOGGED TABLE address_rate_limits (
  scope text NOT NULL,
  address cidr NOT NULL,
  window_start timestamptz NOT NULL,
  window_count integer NOT NULL CHECK (window_count >= 0),
  PRIMARY KEY (scope, address)
);
-- The workers' sweep deletes the counters whose window ended long ago.
CREATE INDEX address_rate_limits_window_start ON address_rate_limits (window_start);
