-- The country a solver fetches from, as it declares it per capability (ISO 3166-1 alpha-2; NULL: not
-- declared), and the country a task must be fetched from (Firecrawl's location.country; NULL: any).
-- Matching reads the task's from its row, for every attempt and for a slot handed to it from the queue.
ALTER TABLE solver_capabilities ADD COLUMN country text CHECK (country ~ '^[A-Z]{2}$');
ALTER TABLE tasks ADD COLUMN country text CHECK (country ~ '^[A-Z]{2}$');
