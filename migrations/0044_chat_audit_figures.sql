-- The metrics read the chat audits judged in the last day at every scrape (src/db/canaries.ts,
-- recentChatAuditVerdicts): found by their judging time, whatever the size of the table.
CREATE INDEX canaries_chat_judged_idx ON canaries (judged_at) WHERE task_type = 'chat_completion' AND verdict IN ('passed', 'failed');
