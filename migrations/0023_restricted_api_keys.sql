-- A restricted key (created with a spend limit, or asked for as restricted) cannot create, list, change
-- or revoke keys, so a key handed out with a limit cannot lift it or take the account over.
ALTER TABLE api_keys ADD COLUMN restricted boolean NOT NULL DEFAULT false;

-- Keys that carry a limit today become restricted, except where that would leave their account without
-- a live unrestricted key to manage the others.
UPDATE api_keys k SET restricted = true
WHERE k.spend_limit_points IS NOT NULL
  AND EXISTS (SELECT 1 FROM api_keys o
              WHERE o.account_id = k.account_id AND o.key_id <> k.key_id AND o.revoked_at IS NULL AND o.spend_limit_points IS NULL);
