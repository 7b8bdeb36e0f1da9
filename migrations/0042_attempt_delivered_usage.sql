-- What a chat attempt had delivered when it was stopped (its billed usage: the prompt and the deltas the
-- service relayed, as it counted them). A chat its client cancelled or left after content arrived is
-- billed for it (docs/queue.md, "What a chat pays"); NULL: nothing was delivered, or the attempt ended
-- otherwise.
ALTER TABLE task_attempts ADD COLUMN delivered_usage jsonb;
