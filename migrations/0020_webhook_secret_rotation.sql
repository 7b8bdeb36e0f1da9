-- Standard Webhooks libraries decode the part of a secret after `whsec_` as standard base64, and refuse
-- the URL-safe alphabet (or decode it to another key) in which secrets were made until now: the stored
-- ones are rewritten in standard base64, with its padding, so that each keeps its key bytes.
UPDATE webhook_secrets
SET secret = 'whsec_' || rpad(translate(substr(secret, 7), '-_', '+/'), ((length(secret) - 6 + 3) / 4) * 4, '=')
WHERE secret ~ '^whsec_[A-Za-z0-9_-]+$';

-- The secret a rotation replaced: deliveries are signed with it too while its overlap lasts (from rotated_at).
ALTER TABLE webhook_secrets ADD COLUMN previous_secret text;
