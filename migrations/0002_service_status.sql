-- What each running service says about itself (the line systemd shows as STATUS=), and where
-- its /metrics listens, so `agentd status` can show it; refreshed every few seconds. A row
-- not refreshed lately is reported as stale, never as live.
CREATE TABLE service_status (
    service      TEXT PRIMARY KEY CHECK (service IN ('dispatch', 'sensors')),
    pid          INTEGER NOT NULL,
    status       TEXT NOT NULL,
    metrics_url  TEXT,
    started_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
-- Counting attempts by end time (the metrics' last successful attempt) without a table scan.
CREATE INDEX task_attempts_ended ON task_attempts (ended_at) WHERE ended_at IS NOT NULL;
