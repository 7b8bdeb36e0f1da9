-- The strict order a client asked matching for (provider.sort; NULL: work shared among equal offers).
-- The task keeps it for its later attempts, and its queue row for the slot handed to it.
ALTER TABLE tasks ADD COLUMN routing_sort text CHECK (routing_sort IN ('price', 'latency', 'throughput'));
ALTER TABLE task_queue ADD COLUMN routing_sort text CHECK (routing_sort IN ('price', 'latency', 'throughput'));

-- The work-share gauges read the attempts of the last minutes; attempts are written in time order, so a
-- block range index finds them at almost no cost to the inserts.
CREATE INDEX task_attempts_started_brin ON task_attempts USING brin (started_at);
