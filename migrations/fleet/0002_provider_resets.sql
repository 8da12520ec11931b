-- A provider's rate limit until its reset, as one agent of the fleet heard it (docs/gateway.md, "Quotas and
-- resets"): the other agents whose adapters use the same credential claim nothing on it until then. The
-- credential is a digest of the provider's origin and its key (never the key); the latest reset wins.
CREATE TABLE fleet_provider_resets (
    credential  TEXT PRIMARY KEY CHECK (length(credential) BETWEEN 1 AND 200),
    until       TIMESTAMPTZ NOT NULL,
    reason      TEXT NOT NULL CHECK (length(reason) <= 2000),
    agent       TEXT NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
