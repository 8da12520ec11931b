-- The event log without its json_valid CHECKs (issue #43 a): agentd writes every payload and refs
-- itself, as canonical JSON it has just encoded and hashed (agentd/store/base.py _append_event), and
-- `agentd evidence verify` rebuilds each hash of the chain from its row, so a row whose JSON were broken would fail
-- the chain anyway; SQLite parsing each value again on every insert was a share of ingest's cost.
-- SQLite cannot drop a CHECK in place: the table is rebuilt (its documented procedure). Nothing
-- refers to events by a foreign key. UNIQUE(event_id) and both indexes stay; sequences never
-- repeat: the AUTOINCREMENT high-water mark moves to the new table with the rows.

CREATE TABLE events_new (
    sequence        INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        TEXT NOT NULL UNIQUE,
    type            TEXT NOT NULL,
    timestamp       TEXT NOT NULL,
    schema_version  INTEGER NOT NULL,
    task_id         INTEGER,
    attempt_id      TEXT,
    workflow_id     INTEGER,
    schedule_id     TEXT,
    sensor_id       TEXT,
    payload         TEXT NOT NULL,
    refs            TEXT NOT NULL DEFAULT '{}',
    prev_hash       TEXT NOT NULL,
    hash            TEXT NOT NULL
);
INSERT INTO events_new (sequence, event_id, type, timestamp, schema_version, task_id, attempt_id, workflow_id,
    schedule_id, sensor_id, payload, refs, prev_hash, hash)
SELECT sequence, event_id, type, timestamp, schema_version, task_id, attempt_id, workflow_id,
    schedule_id, sensor_id, payload, refs, prev_hash, hash
FROM events ORDER BY sequence;
DELETE FROM sqlite_sequence WHERE name = 'events_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'events_new', seq FROM sqlite_sequence WHERE name = 'events';
DROP TABLE events;
ALTER TABLE events_new RENAME TO events;
CREATE INDEX events_task ON events (task_id, sequence) WHERE task_id IS NOT NULL;
CREATE INDEX events_workflow ON events (workflow_id, sequence) WHERE workflow_id IS NOT NULL;
