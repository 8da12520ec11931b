-- The engine records of seed 000: tasks and their attempts, artifacts, workflows, schedules,
-- sensor intake, the hash-chained event log, the outbox, the dispatch lock and approvals.
-- Timestamps are TEXT in agentd's fixed-width UTC form, so text order is time order.

CREATE TABLE workflows (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow_type   TEXT NOT NULL,
    instance_key    TEXT NOT NULL,
    current_state   TEXT NOT NULL,
    context         TEXT CHECK (context IS NULL OR json_valid(context)),
    status          TEXT NOT NULL DEFAULT 'active'
                    CHECK (status IN ('active', 'completed', 'blocked')),
    iteration       INTEGER NOT NULL DEFAULT 1,
    state_entries   TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(state_entries)),
    blocked_reason  TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    completed_at    TEXT,
    UNIQUE (workflow_type, instance_key)
);
CREATE INDEX workflows_live ON workflows (status, workflow_type) WHERE status = 'active';

CREATE TABLE schedules (
    schedule_id       TEXT PRIMARY KEY,
    name              TEXT NOT NULL,
    enabled           INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    interval_seconds  INTEGER NOT NULL CHECK (interval_seconds >= 1),
    next_run_at       TEXT NOT NULL,
    last_run_at       TEXT,
    task              TEXT NOT NULL CHECK (json_valid(task)),
    origin            TEXT NOT NULL CHECK (origin IN ('config', 'operator')),
    created_at        TEXT NOT NULL,
    updated_at        TEXT NOT NULL
);
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE enabled = 1;

CREATE TABLE tasks (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    task_type             TEXT NOT NULL,
    source                TEXT NOT NULL,
    subject               TEXT,
    description           TEXT,
    priority              INTEGER NOT NULL DEFAULT 5 CHECK (priority BETWEEN 1 AND 10),
    payload               TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(payload)),
    requested_profile_id  TEXT NOT NULL,
    requested_adapter_id  TEXT,
    requested_model       TEXT,
    skill_ids             TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(skill_ids)),
    evidence_requirements TEXT CHECK (evidence_requirements IS NULL OR json_valid(evidence_requirements)),
    workflow_id           INTEGER REFERENCES workflows (id),
    workflow_state        TEXT,
    workflow_iteration    INTEGER,
    schedule_id           TEXT REFERENCES schedules (schedule_id) ON DELETE SET NULL,
    status                TEXT NOT NULL DEFAULT 'pending' CHECK (status IN (
                              'pending', 'running', 'completed', 'retryable_failure',
                              'permanent_failure', 'blocked', 'operator_canceled')),
    max_attempts          INTEGER NOT NULL CHECK (max_attempts >= 1),
    attempt_count         INTEGER NOT NULL DEFAULT 0,  -- every attempt made
    free_attempt_count    INTEGER NOT NULL DEFAULT 0,  -- of those, rate-limited or interrupted by a stop
    rate_limit_count      INTEGER NOT NULL DEFAULT 0,
    awaiting_approval     INTEGER NOT NULL DEFAULT 0 CHECK (awaiting_approval IN (0, 1)),
    available_at          TEXT NOT NULL,
    created_at            TEXT NOT NULL,
    updated_at            TEXT NOT NULL,
    started_at            TEXT,
    finished_at           TEXT,
    outcome               TEXT CHECK (outcome IS NULL OR json_valid(outcome)),
    last_error            TEXT,
    cancel_requested_at   TEXT,
    -- A task waiting for a retry always has an attempt left (free attempts do not spend one):
    -- exhausted means permanent_failure, never a retryable task nobody claims.
    CHECK (status != 'retryable_failure' OR attempt_count - free_attempt_count < max_attempts)
);
-- The claim seeks this index once per priority (store.CLAIM_SQL): its cost does not grow
-- with the queue, and no ANALYZE can make the planner prefer another index.
CREATE INDEX tasks_claim ON tasks (priority, available_at, id)
    WHERE status IN ('pending', 'retryable_failure') AND awaiting_approval = 0;
CREATE INDEX tasks_status ON tasks (status, available_at);
CREATE UNIQUE INDEX tasks_workflow_step ON tasks (workflow_id, workflow_state, workflow_iteration)
    WHERE workflow_id IS NOT NULL;
CREATE INDEX tasks_schedule ON tasks (schedule_id, status) WHERE schedule_id IS NOT NULL;

CREATE TABLE task_attempts (
    attempt_id         TEXT PRIMARY KEY,
    task_id            INTEGER NOT NULL REFERENCES tasks (id),
    attempt_number     INTEGER NOT NULL,
    adapter_id         TEXT NOT NULL,
    adapter_kind       TEXT NOT NULL,
    model              TEXT,
    runner_id          TEXT NOT NULL,
    pid                INTEGER,
    process_group      INTEGER,
    started_at         TEXT NOT NULL,
    ended_at           TEXT,
    exit_status        TEXT CHECK (exit_status IN ('ok', 'error', 'timeout')),
    retry_class        TEXT CHECK (retry_class IN ('none', 'retryable', 'permanent')),
    termination_reason TEXT,
    bundle_hash        TEXT,
    evidence_dir       TEXT,
    prompt_path        TEXT,
    stdout_path        TEXT,
    stderr_path        TEXT,
    result_path        TEXT,
    last_message_path  TEXT,
    diagnostics        TEXT CHECK (diagnostics IS NULL OR json_valid(diagnostics)),
    cost_usd           REAL,
    cost_estimated     INTEGER CHECK (cost_estimated IN (0, 1)),
    input_tokens       INTEGER,
    output_tokens      INTEGER,
    cache_read_tokens  INTEGER,
    cache_write_tokens INTEGER,
    UNIQUE (task_id, attempt_number)
);
CREATE INDEX task_attempts_open ON task_attempts (task_id) WHERE ended_at IS NULL;

CREATE TABLE artifacts (
    artifact_id    TEXT PRIMARY KEY,
    task_id        INTEGER NOT NULL REFERENCES tasks (id),
    attempt_id     TEXT REFERENCES task_attempts (attempt_id),
    role           TEXT NOT NULL CHECK (role IN (
                       'plan', 'execute-report', 'verify-report', 'output', 'snapshot',
                       'adapter-audit')),
    relative_path  TEXT NOT NULL,
    content_type   TEXT,
    sha256         TEXT,
    created_at     TEXT NOT NULL,
    verified_at    TEXT
);
CREATE INDEX artifacts_task ON artifacts (task_id);

CREATE TABLE sensor_events (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    sensor_id           TEXT NOT NULL,
    dedupe_key          TEXT NOT NULL,
    event_id            TEXT NOT NULL,
    observed_at         TEXT NOT NULL,
    source_ref          TEXT NOT NULL,
    freshness_deadline  TEXT,
    payload             TEXT NOT NULL CHECK (json_valid(payload)),
    result              TEXT NOT NULL CHECK (result IN ('created', 'recorded', 'stale', 'rejected')),
    reason              TEXT,
    task_id             INTEGER REFERENCES tasks (id),
    workflow_id         INTEGER REFERENCES workflows (id),
    recorded_at         TEXT NOT NULL,
    UNIQUE (sensor_id, dedupe_key)
);

CREATE TABLE sensor_state (
    sensor_id       TEXT PRIMARY KEY,
    last_run_at     TEXT,
    next_run_at     TEXT,
    last_result     TEXT,
    last_error      TEXT,
    runs            INTEGER NOT NULL DEFAULT 0,
    updated_at      TEXT NOT NULL
);

-- The audit log: every state change appends one row in the transaction that made it.
-- hash = sha256(prev_hash || canonical event), so removing or editing a row breaks the chain.
CREATE TABLE events (
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
    payload         TEXT NOT NULL CHECK (json_valid(payload)),
    refs            TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(refs)),
    prev_hash       TEXT NOT NULL,
    hash            TEXT NOT NULL
);
CREATE INDEX events_task ON events (task_id, sequence) WHERE task_id IS NOT NULL;
CREATE INDEX events_workflow ON events (workflow_id, sequence) WHERE workflow_id IS NOT NULL;

-- Side effects an outcome asked for, written with the outcome and applied after it, once.
CREATE TABLE outbox (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id          INTEGER NOT NULL REFERENCES tasks (id),
    attempt_id       TEXT NOT NULL REFERENCES task_attempts (attempt_id),
    kind             TEXT NOT NULL CHECK (kind IN ('follow_up_task', 'external_message', 'workflow_signal')),
    idempotency_key  TEXT NOT NULL UNIQUE,
    payload          TEXT NOT NULL CHECK (json_valid(payload)),
    status           TEXT NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'applied', 'refused', 'awaiting_handler')),
    result           TEXT CHECK (result IS NULL OR json_valid(result)),
    created_at       TEXT NOT NULL,
    applied_at       TEXT
);
CREATE INDEX outbox_pending ON outbox (id) WHERE status = 'pending';

-- At most one row: the live dispatcher. Created with INSERT, so two cannot both take it.
-- A holder is alive only if its pid runs on this host and boot *and* started when recorded
-- (pid_started), so a reused pid never looks like the old holder.
CREATE TABLE dispatch_lock (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    holder_id     TEXT NOT NULL,
    pid           INTEGER NOT NULL,
    pid_started   INTEGER NOT NULL,
    host          TEXT NOT NULL,
    boot_id       TEXT NOT NULL,
    acquired_at   TEXT NOT NULL,
    heartbeat_at  TEXT NOT NULL
);

CREATE TABLE approvals (
    approval_id   TEXT PRIMARY KEY,
    task_id       INTEGER NOT NULL REFERENCES tasks (id),
    status        TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'rejected')),
    reason        TEXT,
    requested_at  TEXT NOT NULL,
    decided_at    TEXT,
    decided_by    TEXT
);
CREATE INDEX approvals_task ON approvals (task_id);
