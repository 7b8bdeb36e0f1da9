-- Accounts, hashed API keys and the points ledger.
-- Points are NUMERIC (exact decimals). ledger_entries is append-only; balances is the running
-- total of those entries, updated in the same transaction as each entry is written.

CREATE TABLE accounts (
  account_id text PRIMARY KEY,
  kind text NOT NULL DEFAULT 'user' CHECK (kind IN ('user', 'platform')),
  prompt_safety_scan boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
  key_id text PRIMARY KEY,
  account_id text NOT NULL REFERENCES accounts (account_id),
  key_hash bytea NOT NULL UNIQUE,
  key_prefix text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz
);
CREATE INDEX api_keys_account_idx ON api_keys (account_id);

CREATE TABLE balances (
  account_id text PRIMARY KEY REFERENCES accounts (account_id),
  available numeric NOT NULL DEFAULT 0 CHECK (available >= 0),
  held numeric NOT NULL DEFAULT 0 CHECK (held >= 0),
  lifetime_deposited numeric NOT NULL DEFAULT 0 CHECK (lifetime_deposited >= 0),
  lifetime_earned numeric NOT NULL DEFAULT 0 CHECK (lifetime_earned >= 0),
  lifetime_spent numeric NOT NULL DEFAULT 0 CHECK (lifetime_spent >= 0),
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE holds (
  hold_id text PRIMARY KEY,
  account_id text NOT NULL REFERENCES accounts (account_id),
  amount numeric NOT NULL CHECK (amount >= 0),
  remaining numeric NOT NULL CHECK (remaining >= 0 AND remaining <= amount),
  status text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'settled', 'released')),
  created_at timestamptz NOT NULL DEFAULT now(),
  closed_at timestamptz
);
CREATE INDEX holds_open_idx ON holds (account_id) WHERE status = 'open';

CREATE TABLE ledger_entries (
  entry_id bigserial PRIMARY KEY,
  account_id text NOT NULL REFERENCES accounts (account_id),
  kind text NOT NULL CHECK (kind IN ('deposit', 'hold', 'capture', 'release', 'payout', 'fee')),
  amount numeric NOT NULL CHECK (amount >= 0),
  hold_id text REFERENCES holds (hold_id),
  idempotency_key text NOT NULL UNIQUE,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ledger_entries_account_idx ON ledger_entries (account_id, entry_id);

CREATE FUNCTION ledger_entries_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ledger_entries is append-only';
END;
$$;
CREATE TRIGGER ledger_entries_append_only
  BEFORE UPDATE OR DELETE ON ledger_entries
  FOR EACH ROW EXECUTE FUNCTION ledger_entries_append_only();

-- The platform account collects the platform fee on every settled task.
INSERT INTO accounts (account_id, kind) VALUES ('platform', 'platform');
INSERT INTO balances (account_id) VALUES ('platform');
