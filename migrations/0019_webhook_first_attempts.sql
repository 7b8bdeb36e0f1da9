-- A delivery's first attempt is made by the process whose transaction wrote it (the outbox row), which
-- claims the row first; only a delivery whose first attempt failed, or whose claimer died, gets a
-- workflow. Most deliveries therefore never have workflow_started_at set.
ALTER TABLE webhook_deliveries ADD COLUMN claimed_at timestamptz;
ALTER TABLE webhook_deliveries ADD COLUMN claimed_by text;

-- The recovery sweep reads pending deliveries without a workflow: the few in flight and the stranded.
-- The old index also held every delivery that was sent without a workflow, which is nearly all of them.
DROP INDEX webhook_deliveries_unstarted_idx;
CREATE INDEX webhook_deliveries_outstanding_idx ON webhook_deliveries (created_at)
  WHERE status = 'pending' AND workflow_started_at IS NULL;
