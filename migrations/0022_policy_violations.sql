-- `agentd status` names the attempts of the last day that ended as a policy violation (a tool call ran without
-- the tool policy's decision: docs/policy.md, "Every call accounted for"). Only those rows are in the index,
-- so the read is exact and costs nothing however many attempts are kept.
CREATE INDEX task_attempts_violations ON task_attempts (ended_at) WHERE termination_reason = 'policy_violation';
