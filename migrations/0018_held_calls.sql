-- Tool calls held for a person (docs/policy.md): a running attempt's harness asked for a call an `ask`
-- rule matches; its hook waits while the call is here, pending, until an operator approves or denies it
-- (`agentd approve --call`), or [policy] ask_timeout_s passes and it is denied. Every decision is also a
-- chained event (tool_call_allowed / tool_call_denied); this table is what waits, and who decided.
CREATE TABLE held_calls (
    call_id TEXT PRIMARY KEY,                 -- a ULID: the newest last
    task_id INTEGER NOT NULL REFERENCES tasks (id),
    attempt_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    summary TEXT NOT NULL,                    -- the call's input, redacted and cut: what a person judges
    rule TEXT NOT NULL,                       -- the rule that asked
    requested_at TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'allowed', 'denied')),
    decided_at TEXT,
    decided_by TEXT,                          -- the operator, or "timeout" / "attempt ended"
    reason TEXT
);
CREATE INDEX held_calls_pending ON held_calls (requested_at) WHERE status = 'pending';
CREATE INDEX held_calls_attempt ON held_calls (attempt_id);
