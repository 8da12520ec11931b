-- Side effects held for an operator (issue "the operator's control plane"): a profile's
-- result_policy.require_approval_for_side_effects holds a completed outcome's follow-up tasks and
-- external messages in the outbox until `agentd approve` (or `agentd deny`). An approval is now of
-- one of two scopes: 'claim' (held before its first claim, as before) or 'side_effects' (held after
-- its outcome). At most one approval of a task waits at a time.
ALTER TABLE approvals ADD COLUMN scope TEXT NOT NULL DEFAULT 'claim' CHECK (scope IN ('claim', 'side_effects'));
