-- A provider's rate limit until its reset, as its 429 said (docs/gateway.md, "Quotas and resets"): no task that
-- would run on an adapter using the same credential is claimed before `until`. One row per credential (a
-- fingerprint of the upstream, the env_file and the key's variable: never the key); the latest reset wins.
-- The adapters, and the task types and profiles that run on them by default, are the claim's to leave out.
-- `fleet_credential` names the credential across agents (a digest of the provider's origin and its key).
CREATE TABLE provider_resets (
    credential TEXT PRIMARY KEY CHECK (length(credential) BETWEEN 1 AND 200),
    adapters TEXT NOT NULL CHECK (json_valid(adapters) AND json_type(adapters) = 'array'),
    task_types TEXT NOT NULL CHECK (json_valid(task_types) AND json_type(task_types) = 'array'),
    open_task_types TEXT NOT NULL CHECK (json_valid(open_task_types) AND json_type(open_task_types) = 'array'),
    profiles TEXT NOT NULL CHECK (json_valid(profiles) AND json_type(profiles) = 'array'),
    until TEXT NOT NULL,
    fleet_credential TEXT,  -- the provider's origin and key as a digest: what the fleet shares (NULL: not known)
    reason TEXT NOT NULL CHECK (length(reason) <= 2000),
    recorded_at TEXT NOT NULL
);
