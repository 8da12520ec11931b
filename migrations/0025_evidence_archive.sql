-- The evidence archive (docs/backup-and-archive.md, "Archive"): what is not yet uploaded to [archive]'s bucket,
-- and where the witnessing of the chain head stands.
--
-- archive_queue holds one row per sealed attempt folder not yet in the bucket. A trigger fills it in the same
-- transaction as the attempt's task_attempt_finished event (its outcome commit, after the seal): nothing runs on
-- the attempt's path for it, and a crash can never leave a sealed attempt both committed and unqueued. The
-- archiver (the sensor service) deletes a row once the folder's object is written; a row it could not upload
-- stays, with its tries and the earliest time of the next, so a restart loses nothing. Only while archiving is on
-- (archive_state.enabled, which the sensor service sets from the config at start): an agent without [archive]
-- queues nothing. A later migration that rebuilds `events` must create the trigger again.
CREATE TABLE archive_queue (
    attempt_id      TEXT PRIMARY KEY,
    task_id         INTEGER NOT NULL,
    sequence        INTEGER NOT NULL,   -- its task_attempt_finished event
    manifest_sha256 TEXT,               -- as that event recorded it (NULL: the seal failed)
    enqueued_at     TEXT NOT NULL,
    tries           INTEGER NOT NULL DEFAULT 0,
    next_try_at     TEXT,               -- NULL: now
    last_error      TEXT CHECK (last_error IS NULL OR length(last_error) <= 2000)
);
CREATE INDEX archive_queue_by_enqueued ON archive_queue (enqueued_at);

-- One row. events_through: the last event uploaded as part of a chain segment; head_*: the last head witnessed.
CREATE TABLE archive_state (
    id              INTEGER PRIMARY KEY CHECK (id = 1),
    enabled         INTEGER NOT NULL DEFAULT 0 CHECK (enabled IN (0, 1)),
    events_through  INTEGER NOT NULL DEFAULT 0,
    head_sequence   INTEGER,
    head_hash       TEXT,
    head_at         TEXT
);
INSERT INTO archive_state (id) VALUES (1);

CREATE TRIGGER archive_sealed_attempt AFTER INSERT ON events
WHEN NEW.type = 'task_attempt_finished' AND NEW.attempt_id IS NOT NULL
     AND (SELECT enabled FROM archive_state WHERE id = 1) = 1
BEGIN
    INSERT OR IGNORE INTO archive_queue (attempt_id, task_id, sequence, manifest_sha256, enqueued_at)
    VALUES (NEW.attempt_id, NEW.task_id, NEW.sequence,
            CASE WHEN json_valid(NEW.payload) THEN json_extract(NEW.payload, '$.manifest_sha256') END,
            NEW.timestamp);
END;
