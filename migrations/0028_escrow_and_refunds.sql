-- Escrowed earnings and refunds (docs/trust.md, "Escrow and refunds"): a solver's pay for a task is held
-- as `held:<task id>` until it vests; a confirmed quarantine forfeits what has not vested and refunds
-- the clients of those tasks.
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_kind_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_kind_check
  CHECK (kind IN ('deposit', 'hold', 'capture', 'release', 'payout', 'fee', 'forfeit', 'fee_return', 'refund'));

-- An admin's confirmation that a quarantine was deserved: the solver stays quarantined, and its
-- unvested earnings are forfeited (each confirmation forfeits what is held at that moment).
ALTER TABLE solver_quarantines ADD COLUMN confirmed_at timestamptz;
ALTER TABLE solver_quarantines ADD COLUMN confirmed_note text;

-- The vesting sweep reads open earnings holds, oldest first.
CREATE INDEX holds_open_earnings_idx ON holds (created_at) WHERE status = 'open' AND hold_id LIKE 'held:%';
-- Pay vests early once the solver has passed enough checks since: its passed checks, by time.
CREATE INDEX canaries_passed_idx ON canaries (solver_id, judged_at) WHERE verdict = 'passed';
CREATE INDEX redundant_runs_first_agreed_idx ON redundant_runs (first_solver_id, judged_at) WHERE status = 'agreed';
CREATE INDEX redundant_runs_second_agreed_idx ON redundant_runs (second_solver_id, judged_at) WHERE status = 'agreed';
