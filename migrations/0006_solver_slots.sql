-- A capability's concurrency as one row per slot instead of a counter on the capability's row. Every
-- reservation and every attempt's end used to update that one row and hold its lock until commit, so
-- under load the tasks of one busy solver queued behind each other. A reservation now takes a free
-- slot and skips those another reservation is taking; an attempt's end frees its own slot.
CREATE TABLE solver_slots (
  solver_id text NOT NULL,
  task_type text NOT NULL,
  model_name text NOT NULL,
  slot integer NOT NULL CHECK (slot > 0),
  -- The attempt running in this slot; NULL when free.
  attempt_id text,
  PRIMARY KEY (solver_id, task_type, model_name, slot),
  FOREIGN KEY (solver_id, task_type, model_name) REFERENCES solver_capabilities ON DELETE CASCADE
-- No index on attempt_id: taking and freeing a slot then rewrite the row in place (a HOT update).
) WITH (fillfactor = 70);

-- The slot an attempt runs in, for its end to free.
ALTER TABLE task_attempts ADD COLUMN slot integer;

-- Slots 1..max_concurrent for every capability, the running attempts in the lowest (more slots where a
-- capability runs more than its limit, as after a lowered max_concurrent: matching never offers those).
WITH running AS (
  SELECT solver_id, task_type, model_name, attempt_id,
         row_number() OVER (PARTITION BY solver_id, task_type, model_name ORDER BY started_at, attempt_id)::int AS slot
  FROM task_attempts WHERE ended_at IS NULL
)
INSERT INTO solver_slots (solver_id, task_type, model_name, slot, attempt_id)
SELECT c.solver_id, c.task_type, c.model_name, n.slot, r.attempt_id
FROM solver_capabilities c
CROSS JOIN LATERAL generate_series(
  1, GREATEST(c.max_concurrent, (SELECT count(*)::int FROM running r WHERE (r.solver_id, r.task_type, r.model_name) = (c.solver_id, c.task_type, c.model_name)))
) AS n(slot)
LEFT JOIN running r ON (r.solver_id, r.task_type, r.model_name, r.slot) = (c.solver_id, c.task_type, c.model_name, n.slot);

UPDATE task_attempts a SET slot = s.slot FROM solver_slots s WHERE s.attempt_id = a.attempt_id;

ALTER TABLE solver_capabilities DROP COLUMN active_attempts;

-- Attempts are now counted in a solver's record when they end, not when they are reserved (its row was
-- the other lock every reservation took): the running ones come off until then.
UPDATE solver_stats s SET attempts = s.attempts - r.running
FROM (SELECT solver_id, count(*)::int AS running FROM task_attempts WHERE ended_at IS NULL GROUP BY solver_id) r
WHERE s.solver_id = r.solver_id;
