-- The fleet's queue on PostgreSQL (README, "A fleet"): tasks submitted once, claimed by whichever agent
-- whose labels and task types fit, under a lease with a fencing token that grows on every claim. Every
-- write an agent makes is guarded by its token and the task's state, so a rescuer's claim and a slow
-- agent's late completion can never both count. Each agent's SQLite stays the record of its attempts.
CREATE TABLE fleet_tasks (
    id               BIGSERIAL PRIMARY KEY,
    idempotency_key  TEXT UNIQUE,                       -- a repeated submit with the key is the same task
    task_type        TEXT NOT NULL,
    subject          TEXT,
    payload          JSONB NOT NULL,
    labels           TEXT[] NOT NULL DEFAULT '{}',     -- an agent claims it only if it has all of them
    priority         SMALLINT NOT NULL DEFAULT 5 CHECK (priority BETWEEN 1 AND 10),
    origin           JSONB NOT NULL,                    -- who submitted it, and seed 003's dispatch context
    status           TEXT NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'leased', 'completed', 'failed', 'canceled')),
    lease_agent      TEXT,                              -- who holds (or last held) the lease: for people;
                                                        -- every write keys on the token
    lease_token      BIGINT,                            -- the fencing token of the current lease; once the
                                                        -- task ends, the one that ended it (NULL if queued)
    lease_expires_at TIMESTAMPTZ,                       -- judged by this server's clock, never an agent's
    claims           INTEGER NOT NULL DEFAULT 0,
    result           JSONB,                             -- what the agent reported back: status, summary, evidence
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at      TIMESTAMPTZ,
    CHECK ((status = 'leased') = (lease_expires_at IS NOT NULL)),
    CHECK (status <> 'leased' OR lease_token IS NOT NULL),
    CHECK (status <> 'queued' OR lease_token IS NULL)
);
CREATE SEQUENCE fleet_lease_tokens;
CREATE INDEX fleet_tasks_queued ON fleet_tasks (priority, created_at, id) WHERE status = 'queued';
CREATE INDEX fleet_tasks_leases ON fleet_tasks (lease_expires_at) WHERE status = 'leased';

-- What happened to each task, in order: submitted, claimed, lease_expired, requeued, completed, failed,
-- canceled, refused (a write whose token was no longer current).
CREATE TABLE fleet_events (
    id         BIGSERIAL PRIMARY KEY,
    task_id    BIGINT NOT NULL REFERENCES fleet_tasks (id),
    type       TEXT NOT NULL,
    agent      TEXT,
    token      BIGINT,
    detail     JSONB NOT NULL DEFAULT '{}',
    at         TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX fleet_events_task ON fleet_events (task_id, id);
