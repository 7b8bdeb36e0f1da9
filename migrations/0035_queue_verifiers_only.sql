-- A waiting task that only a verifier may take (a client task's run meant for verifiers,
-- docs/trust.md "Verified client tasks"): checked when a slot is handed, so a solver that comes online
-- while the run waits cannot take it.
ALTER TABLE task_queue ADD COLUMN verifiers_only boolean NOT NULL DEFAULT false;
