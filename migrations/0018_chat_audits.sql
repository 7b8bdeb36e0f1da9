-- Chat audits (docs/trust.md): a canary of task type chat_completion carries what its answer must be
-- (the prompt's kind and expected value, the offered function and its schema), and, once judged, the
-- problems the judge found. NULL for the web types, whose page token is the whole expectation.
ALTER TABLE canaries ADD COLUMN audit jsonb;
