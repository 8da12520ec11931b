-- The operator's control plane (issue "the operator's control plane"):
-- * a paused dispatcher: one row while paused (who, since when, why); a restart stays paused;
-- * bounded delegation (seed 004): a follow-up task names the task whose outcome asked for it and
--   how deep the chain is, so `task show` can show where a task came from and caps can be held;
-- * pending approvals listed oldest first without a scan.
CREATE TABLE dispatch_control (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    paused_at  TEXT NOT NULL,
    paused_by  TEXT NOT NULL,
    reason     TEXT
);

ALTER TABLE tasks ADD COLUMN parent_task_id INTEGER REFERENCES tasks (id);
ALTER TABLE tasks ADD COLUMN delegation_depth INTEGER NOT NULL DEFAULT 0 CHECK (delegation_depth >= 0);
CREATE INDEX approvals_pending ON approvals (requested_at) WHERE status = 'pending';
