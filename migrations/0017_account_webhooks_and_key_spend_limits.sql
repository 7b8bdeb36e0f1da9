-- An account's default webhook: copied into task_webhooks by the statement that creates each of the
-- account's tasks that names no webhook of its own.
CREATE TABLE account_webhooks (
  account_id text PRIMARY KEY REFERENCES accounts (account_id),
  url text NOT NULL,
  events text[] NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- A key's optional spend limit, per UTC day or in total.
ALTER TABLE api_keys ADD COLUMN spend_limit_points numeric CHECK (spend_limit_points >= 0);
ALTER TABLE api_keys ADD COLUMN spend_limit_period text CHECK (spend_limit_period IN ('day', 'total'));
ALTER TABLE api_keys ADD CONSTRAINT api_keys_spend_limit_whole CHECK ((spend_limit_points IS NULL) = (spend_limit_period IS NULL));

-- What the tasks of a key with a limit hold and were charged, per period (the UTC day, or -infinity for
-- a limit in total): a task's hold is added as it is created, in its creating statement, and what its
-- settlement gives back is taken off. The limit is copied with each addition, so the CHECK refuses the
-- statement that would overshoot it, as the balances' CHECK refuses an overdraft.
CREATE TABLE key_spend (
  key_id text NOT NULL REFERENCES api_keys (key_id),
  period_start date NOT NULL,
  spent_points numeric NOT NULL CHECK (spent_points >= 0),
  limit_points numeric NOT NULL,
  CONSTRAINT key_spend_within_limit CHECK (spent_points <= limit_points),
  PRIMARY KEY (key_id, period_start)
);

-- The key that created the task, and the period of its key's spend its hold counts in (null: no limit).
ALTER TABLE tasks ADD COLUMN key_id text;
ALTER TABLE tasks ADD COLUMN key_spend_period date;
