-- A per-token offer's rates for the two kinds of token, in points per 1,000 tokens (marginal_cost is the
-- shorthand for both): an offer's estimated price for a chat is its base + prompt rate × the prompt's
-- counted tokens + completion rate × the completion's budget (docs/queue.md, "What a chat pays").
ALTER TABLE solver_capabilities ADD COLUMN prompt_cost numeric CHECK (prompt_cost >= 0);
ALTER TABLE solver_capabilities ADD COLUMN completion_cost numeric CHECK (completion_cost >= 0);
UPDATE solver_capabilities SET prompt_cost = marginal_cost, completion_cost = marginal_cost;
ALTER TABLE solver_capabilities ALTER COLUMN prompt_cost SET NOT NULL, ALTER COLUMN completion_cost SET NOT NULL;

-- An attempt keeps the rates it is billed at and its offer's estimated price for the request. Attempts
-- from before have none: they are billed at marginal_cost, as they were matched.
ALTER TABLE task_attempts ADD COLUMN prompt_cost numeric;
ALTER TABLE task_attempts ADD COLUMN completion_cost numeric;
ALTER TABLE task_attempts ADD COLUMN estimated_price_points numeric;

-- What a chat's offers are priced and limited by, kept for its later attempts and its queue row: the
-- prompt's counted tokens, the completion's token budget, and the client's provider.max_price (points per
-- million tokens for prompt and completion, points per request). NULL: none (web tasks, canaries).
ALTER TABLE tasks ADD COLUMN estimate_prompt_tokens int, ADD COLUMN estimate_completion_tokens int,
  ADD COLUMN max_price_prompt numeric, ADD COLUMN max_price_completion numeric, ADD COLUMN max_price_request numeric;
-- A chat's maximum price, which its hold (max_price_points: the estimate of the offer matched) may be
-- raised to when a later attempt falls back to a dearer offer.
ALTER TABLE tasks ADD COLUMN price_cap_points numeric;
ALTER TABLE task_queue ADD COLUMN estimate_prompt_tokens int, ADD COLUMN estimate_completion_tokens int,
  ADD COLUMN max_price_prompt numeric, ADD COLUMN max_price_completion numeric, ADD COLUMN max_price_request numeric;
