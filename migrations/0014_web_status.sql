-- `agentd web` says what it is doing in service_status too (docs/web.md), so `agentd status`, the
-- console's overview and agentd_service_live see it as they see dispatch and sensors. SQLite cannot
-- change a CHECK in place: the table is rebuilt with the same columns and rows.
CREATE TABLE service_status_new (
    service      TEXT PRIMARY KEY CHECK (service IN ('dispatch', 'sensors', 'web')),
    pid          INTEGER NOT NULL,
    status       TEXT NOT NULL,
    metrics_url  TEXT,
    started_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    pid_started  INTEGER,
    host         TEXT,
    boot_id      TEXT
);
INSERT INTO service_status_new (service, pid, status, metrics_url, started_at, updated_at, pid_started, host, boot_id)
    SELECT service, pid, status, metrics_url, started_at, updated_at, pid_started, host, boot_id FROM service_status;
DROP TABLE service_status;
ALTER TABLE service_status_new RENAME TO service_status;
