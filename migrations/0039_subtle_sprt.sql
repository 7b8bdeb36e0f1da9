-- The second sequential test on verified outcomes (SUBTLE_SPRT, src/trust/sprt.ts), for cheats that make
-- up a few answers in a hundred, and how many verified outcomes followed the last one proven wrong (NULL:
-- none was), which keeps a suspected solver's verification rate up for a while.
ALTER TABLE solver_reputation ADD COLUMN sprt_subtle_llr double precision NOT NULL DEFAULT 0;
ALTER TABLE solver_reputation ADD COLUMN verified_since_failure integer;
