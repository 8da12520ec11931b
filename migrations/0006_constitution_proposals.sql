-- agentd: foreign_keys off
-- Constitution proposals (seed 000 §1b): an outcome may propose a revision of SOUL.md or PURPOSE.md;
-- the operator accepts or rejects it. The proposal reaches the store through the outbox (a new kind,
-- `constitution_proposal`), so it is recorded exactly once, after the outcome commit.
-- * constitution_proposals: the text proposed and what it was proposed against; the decision, who
--   made it and when. task_id and attempt_id name where it came from without a foreign key: the
--   constitution's history outlives retention's pruning of old tasks.
-- * outbox: widening the kind CHECK means rebuilding the table (SQLite's documented procedure, with
--   foreign keys off for the migration and checked before it commits); its AUTOINCREMENT counter is
--   carried over so an id is never handed out twice.

CREATE TABLE constitution_proposals (
    proposal_id      TEXT PRIMARY KEY,                  -- a ULID
    document         TEXT NOT NULL CHECK (document IN ('soul', 'purpose')),
    proposed_text    TEXT NOT NULL,
    proposed_sha256  TEXT NOT NULL,
    base_sha256      TEXT NOT NULL,                     -- the document's hash in the proposing bundle
    reason           TEXT NOT NULL,
    task_id          INTEGER NOT NULL,
    attempt_id       TEXT NOT NULL,
    outbox_key       TEXT NOT NULL UNIQUE,              -- the outbox entry it came from: once, ever
    status           TEXT NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'accepted', 'rejected', 'superseded')),
    created_at       TEXT NOT NULL,
    decided_at       TEXT,
    decided_by       TEXT,
    decision_note    TEXT,
    version_before   TEXT,                              -- accepted: the [constitution] version replaced
    version_after    TEXT                               -- accepted: the version it set
);
CREATE INDEX constitution_proposals_pending ON constitution_proposals (created_at) WHERE status = 'pending';

CREATE TABLE outbox_new (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id          INTEGER NOT NULL REFERENCES tasks (id),
    attempt_id       TEXT NOT NULL REFERENCES task_attempts (attempt_id),
    kind             TEXT NOT NULL
                     CHECK (kind IN ('follow_up_task', 'external_message', 'workflow_signal', 'constitution_proposal')),
    idempotency_key  TEXT NOT NULL UNIQUE,
    payload          TEXT NOT NULL CHECK (json_valid(payload)),
    status           TEXT NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'applied', 'refused', 'awaiting_handler')),
    result           TEXT CHECK (result IS NULL OR json_valid(result)),
    created_at       TEXT NOT NULL,
    applied_at       TEXT
);
INSERT INTO outbox_new (id, task_id, attempt_id, kind, idempotency_key, payload, status, result, created_at,
    applied_at)
SELECT id, task_id, attempt_id, kind, idempotency_key, payload, status, result, created_at, applied_at
FROM outbox;
DELETE FROM sqlite_sequence WHERE name = 'outbox_new';
UPDATE sqlite_sequence SET name = 'outbox_new' WHERE name = 'outbox';
DROP TABLE outbox;
ALTER TABLE outbox_new RENAME TO outbox;
CREATE INDEX outbox_pending ON outbox (id) WHERE status = 'pending';
