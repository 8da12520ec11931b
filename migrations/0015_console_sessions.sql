-- The console, round two (docs/web.md, "Approval hand-off"): a hand-off whose approval was resolved
-- before it was sent is `withdrawn`, never sent (a denied request was still POSTed, freshly signed).
-- SQLite cannot change a CHECK in place: the table is rebuilt with the same columns and rows.
CREATE TABLE approval_handoffs_new (
    approval_id      TEXT PRIMARY KEY,
    task_id          INTEGER NOT NULL,
    handler_id       TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed', 'withdrawn')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  TEXT NOT NULL,
    last_error       TEXT,
    context          TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    sent_at          TEXT
);
INSERT INTO approval_handoffs_new (approval_id, task_id, handler_id, status, attempts, next_attempt_at, last_error,
        context, created_at, sent_at)
    SELECT approval_id, task_id, handler_id, status, attempts, next_attempt_at, last_error, context, created_at,
        sent_at FROM approval_handoffs;
DROP TABLE approval_handoffs;
ALTER TABLE approval_handoffs_new RENAME TO approval_handoffs;
CREATE INDEX approval_handoffs_due ON approval_handoffs (next_attempt_at) WHERE status = 'pending';
