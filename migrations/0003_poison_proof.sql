-- agentd: foreign_keys off
-- Poison-proofing (issue "no input crashes a service"):
-- * an attempt reclaimed by the boot sweep has an unknown exit status, and says whether its
--   adapter ran far enough for side effects to have happened;
-- * a task counts the boot sweeps in a row that reclaimed it, so one that keeps taking the runtime
--   down ends crashed_runtime instead of restart-looping the service;
-- * a sensor run in flight is recorded, so a restarted sensor service can sweep what a dead one left.
-- Widening a CHECK constraint means rebuilding task_attempts (SQLite's documented procedure, with
-- foreign keys off for the migration and checked before it commits).

CREATE TABLE task_attempts_new (
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
    exit_status        TEXT CHECK (exit_status IN ('ok', 'error', 'timeout', 'unknown')),
    retry_class        TEXT CHECK (retry_class IN ('none', 'retryable', 'permanent')),
    termination_reason TEXT,
    side_effects       TEXT CHECK (side_effects IN ('none', 'possible')),
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
INSERT INTO task_attempts_new (attempt_id, task_id, attempt_number, adapter_id, adapter_kind, model, runner_id,
    pid, process_group, started_at, ended_at, exit_status, retry_class, termination_reason, side_effects,
    bundle_hash, evidence_dir, prompt_path, stdout_path, stderr_path, result_path, last_message_path, diagnostics,
    cost_usd, cost_estimated, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens)
SELECT attempt_id, task_id, attempt_number, adapter_id, adapter_kind, model, runner_id,
    pid, process_group, started_at, ended_at, exit_status, retry_class, termination_reason,
    CASE WHEN ended_at IS NULL THEN NULL WHEN pid IS NULL THEN 'none' ELSE 'possible' END,
    bundle_hash, evidence_dir, prompt_path, stdout_path, stderr_path, result_path, last_message_path, diagnostics,
    cost_usd, cost_estimated, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens
FROM task_attempts;
DROP TABLE task_attempts;
ALTER TABLE task_attempts_new RENAME TO task_attempts;
CREATE INDEX task_attempts_open ON task_attempts (task_id) WHERE ended_at IS NULL;
CREATE INDEX task_attempts_ended ON task_attempts (ended_at) WHERE ended_at IS NOT NULL;

ALTER TABLE tasks ADD COLUMN crash_count INTEGER NOT NULL DEFAULT 0;

ALTER TABLE sensor_state ADD COLUMN run_id TEXT;
ALTER TABLE sensor_state ADD COLUMN run_owner TEXT;
ALTER TABLE sensor_state ADD COLUMN run_started_at TEXT;
