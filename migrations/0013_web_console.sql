-- `agentd web` (docs/web.md): the operators' bearer tokens and the approval requests handed off to an
-- external app.
--
-- A token is `<token_id>.<secret>`: the row is found by its id, and only the secret's SHA-256 is kept,
-- compared in constant time. A name has at most one live token (revoked ones stay, for the audit: the
-- events name the operator, this table says which token it was).
CREATE TABLE web_tokens (
    token_id       TEXT PRIMARY KEY,
    name           TEXT NOT NULL,
    secret_sha256  TEXT NOT NULL,
    created_at     TEXT NOT NULL,
    created_by     TEXT NOT NULL,
    revoked_at     TEXT,
    revoked_by     TEXT,
    last_used_at   TEXT
);
CREATE UNIQUE INDEX web_tokens_live_name ON web_tokens (name) WHERE revoked_at IS NULL;

-- One row per approval request sent to the `[web] approval_handler`: the run context it carried (task,
-- attempt, dispatch context; what a resolution must bring back), and how its delivery went.
CREATE TABLE approval_handoffs (
    approval_id      TEXT PRIMARY KEY,
    task_id          INTEGER NOT NULL,
    handler_id       TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  TEXT NOT NULL,
    last_error       TEXT,
    context          TEXT NOT NULL,
    created_at       TEXT NOT NULL,
    sent_at          TEXT
);
CREATE INDEX approval_handoffs_due ON approval_handoffs (next_attempt_at) WHERE status = 'pending';
