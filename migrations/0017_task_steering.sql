-- Steering one task (issue 41; docs/operate.md, "Steer one task"):
-- * a paused task: one row while it is paused (who, since when, why). The claim passes it by
--   (store/budget.py CLAIMABLE); an attempt already running finishes, and nothing more is claimed.
-- * a task link: `agentd task link A --after B`. A is claimed only once B has completed; a link that
--   would close a cycle is refused when it is asked for (store/steering.py).
-- * the newest dispatch_boundary_waived event (a dispatcher started in the advisory mode on purpose:
--   docs/install-and-deploy.md, "The advisory mode"), read by every `agentd status` without a scan.
-- * an attempt's exit_status is one of seed 000 §8's three: what the boot sweep wrote as `unknown` (the
--   runtime died, the exit was never seen) is `error`, and its diagnostics say the exit was not seen.
CREATE TABLE task_pauses (
    task_id    INTEGER PRIMARY KEY REFERENCES tasks (id),
    paused_at  TEXT NOT NULL,
    paused_by  TEXT NOT NULL,
    reason     TEXT
);

CREATE TABLE task_links (
    after_id    INTEGER NOT NULL REFERENCES tasks (id),
    before_id   INTEGER NOT NULL REFERENCES tasks (id),
    created_at  TEXT NOT NULL,
    created_by  TEXT NOT NULL,
    PRIMARY KEY (after_id, before_id),
    CHECK (after_id != before_id)
) WITHOUT ROWID;
CREATE INDEX task_links_before ON task_links (before_id);

CREATE INDEX events_boundary_waived ON events (sequence) WHERE type = 'dispatch_boundary_waived';

UPDATE task_attempts
SET exit_status = 'error',
    diagnostics = json_set(COALESCE(diagnostics, '{}'), '$.exit_seen', json('false'))
WHERE exit_status = 'unknown';
