-- A fleet task this agent took from the fleet's queue on PostgreSQL (README, "A fleet"): its local task,
-- the fleet's id for it, the fencing token of the claim and the dispatch context it came with (seed 003
-- §7). `held` while the task waits or runs here (intake renews the lease); `reported` once its result
-- was written back with the token; `lost` when the fleet refused the token (the lease expired and the
-- task went to another agent, or an operator canceled it): the local record stays, its result does not
-- count in the fleet.
CREATE TABLE fleet_leases (
    task_id      INTEGER PRIMARY KEY REFERENCES tasks (id),
    fleet_id     INTEGER NOT NULL,
    token        INTEGER NOT NULL,
    origin       TEXT NOT NULL,                 -- JSON: who submitted it, surface, product, dispatch mode
    state        TEXT NOT NULL DEFAULT 'held' CHECK (state IN ('held', 'reported', 'lost')),
    claimed_at   TEXT NOT NULL,
    confirmed_at TEXT,                          -- the last time the fleet confirmed the token before an attempt
    ended_at     TEXT,                          -- reported or lost
    lost_reason  TEXT,
    UNIQUE (fleet_id, token)
);
CREATE INDEX fleet_leases_held ON fleet_leases (state) WHERE state = 'held';
