-- Chat audits copy the shape of one of the latest client chats (src/trust/canaries.ts): the newest chat tasks, by creation.
CREATE INDEX tasks_chat_recent_idx ON tasks (created_at DESC) WHERE task_type = 'chat_completion';
