-- Each agent's event chain head, witnessed (docs/backup-and-archive.md, "Witnessed head"): one row per head an
-- agent published, never updated, so `agentd evidence verify --against-fleet` can tell a local chain rolled back
-- (shorter than, or forking from, a head the fleet saw) from one that only moved on.
CREATE TABLE fleet_witnessed_heads (
    agent        TEXT NOT NULL CHECK (length(agent) BETWEEN 1 AND 128),
    sequence     BIGINT NOT NULL CHECK (sequence >= 1),
    hash         TEXT NOT NULL CHECK (hash ~ '^[0-9a-f]{64}$'),
    witnessed_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (agent, sequence)
);
