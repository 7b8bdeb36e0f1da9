-- A solver that sent `drain` keeps its connection (its running attempts finish on it) but matching
-- offers it nothing more. A new connection of the solver starts undrained.
ALTER TABLE solver_connections ADD COLUMN draining boolean NOT NULL DEFAULT false;
