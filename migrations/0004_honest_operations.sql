-- Honest operations (issue "metrics and status that never lie … bounded growth"):
-- * a service's status row carries the identity of its process (pid start time, host, boot id), so
--   `agentd status` calls it live only while that very process runs, never from a stale row;
-- * retention: a pruned event range leaves a checkpoint (the hash of the last event removed and how
--   many were removed) that the chain verifier continues from; an attempt whose evidence directory
--   was pruned says when.
ALTER TABLE service_status ADD COLUMN pid_started INTEGER;
ALTER TABLE service_status ADD COLUMN host TEXT;
ALTER TABLE service_status ADD COLUMN boot_id TEXT;

CREATE TABLE event_checkpoints (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    through_sequence INTEGER NOT NULL,   -- the last sequence removed
    through_hash     TEXT NOT NULL,      -- its hash: the next remaining event's prev_hash
    removed          INTEGER NOT NULL,   -- how many events this pruning removed
    pruned_at        TEXT NOT NULL
);

ALTER TABLE task_attempts ADD COLUMN evidence_pruned_at TEXT;
CREATE INDEX tasks_finished ON tasks (finished_at) WHERE finished_at IS NOT NULL;
