-- Sequential tests that ended accepting the solver, per solver and task type: pay for that type vests by
-- passed checks (EARNINGS_VESTING_CHECKS) only once one has; before, it vests by time only.
ALTER TABLE solver_reputation ADD COLUMN sprt_accepts integer NOT NULL DEFAULT 0;
