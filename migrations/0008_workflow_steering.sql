-- agentd: foreign_keys off
-- Workflows an operator can steer (issue #12): `agentd workflow cancel` ends a workflow 'canceled'.
-- Widening the status CHECK means rebuilding workflows (SQLite's documented procedure, with foreign
-- keys off for the migration and checked before it commits: tasks and sensor_events refer to it).
-- Ids are never reused: the AUTOINCREMENT high-water mark moves to the new table with the rows.

CREATE TABLE workflows_new (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow_type   TEXT NOT NULL,
    instance_key    TEXT NOT NULL,
    current_state   TEXT NOT NULL,
    context         TEXT CHECK (context IS NULL OR json_valid(context)),
    status          TEXT NOT NULL DEFAULT 'active'
                    CHECK (status IN ('active', 'completed', 'blocked', 'canceled')),
    iteration       INTEGER NOT NULL DEFAULT 1,
    state_entries   TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(state_entries)),
    blocked_reason  TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    completed_at    TEXT,
    UNIQUE (workflow_type, instance_key)
);
INSERT INTO workflows_new (id, workflow_type, instance_key, current_state, context, status, iteration,
    state_entries, blocked_reason, created_at, updated_at, completed_at)
SELECT id, workflow_type, instance_key, current_state, context, status, iteration,
    state_entries, blocked_reason, created_at, updated_at, completed_at
FROM workflows;
DELETE FROM sqlite_sequence WHERE name = 'workflows_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'workflows_new', seq FROM sqlite_sequence WHERE name = 'workflows';
DROP TABLE workflows;
ALTER TABLE workflows_new RENAME TO workflows;
CREATE INDEX workflows_live ON workflows (status, workflow_type) WHERE status = 'active';
