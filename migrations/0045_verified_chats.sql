-- Verified client chats (docs/trust.md, "Verified client chats"). A sampled chat keeps the answer its
-- client was streamed (assembled as it went by; a chat that is not sampled keeps none) and the model of
-- the capability that served it, which its verifier must run.
ALTER TABLE redundant_runs ADD COLUMN client_answer jsonb;
ALTER TABLE redundant_runs ADD COLUMN model_name text;
-- compared: a chat's first check is compared with the client's answer; the verifier's second decides.
ALTER TABLE redundant_runs DROP CONSTRAINT redundant_runs_status_check;
ALTER TABLE redundant_runs ADD CONSTRAINT redundant_runs_status_check
  CHECK (status IN ('pending', 'compared', 'agreed', 'disagreed', 'incomparable', 'unanswered', 'skipped', 'refuted', 'upheld'));
-- The metrics read the chat verifications concluded in the last day at every scrape
-- (src/db/redundant.ts, recentChatVerifications).
CREATE INDEX redundant_runs_chat_concluded_idx ON redundant_runs (concluded_at) WHERE task_type = 'chat_completion';
