"""SQL that both the store's verbs and the CLI's plain readers (agentd/store/plain.py) run, here without
the records so that both run the very same: the columns a task row is read with (in the order
agentd/store/rows.py `task_from_row` takes them), what makes a task claimable, and how a read of the events
is filtered."""

TASK_COLUMNS = """t.id, t.task_type, t.source, t.subject, t.description, t.priority, t.payload,
    t.requested_profile_id, t.requested_adapter_id, t.requested_model, t.skill_ids,
    t.evidence_requirements, t.workflow_id, t.workflow_state, t.workflow_iteration, t.schedule_id,
    t.status, t.max_attempts, t.attempt_count, t.free_attempt_count, t.rate_limit_count, t.crash_count,
    t.available_at, t.created_at, t.updated_at, t.started_at, t.finished_at, t.outcome, t.last_error,
    t.cancel_requested_at, t.awaiting_approval, t.parent_task_id, t.delegation_depth, t.root_task_id,
    t.delegation_caps,
    w.instance_key AS workflow_instance_key"""
TASK_FROM = "tasks t LEFT JOIN workflows w ON w.id = t.workflow_id"

# A task the operator steers out of the claim's way (docs/operate.md, "Steer one task"): paused, or linked
# after a task that has not completed. Each is one lookup by the task's id (a primary key), made only for
# the claim's first candidates of each priority.
UNSTEERED = """NOT EXISTS (SELECT 1 FROM task_pauses p WHERE p.task_id = tasks.id)
    AND NOT EXISTS (SELECT 1 FROM task_links l JOIN tasks b ON b.id = l.before_id
                    WHERE l.after_id = tasks.id AND b.status != 'completed')"""
# A task the dispatcher may claim now (its priority and the budget aside).
CLAIMABLE = (
    "status IN ('pending', 'retryable_failure') AND awaiting_approval = 0 AND available_at <= :now AND " + UNSTEERED
)

# The reset `r` (a provider_resets row) holds back this task: it would run on an adapter using r's credential, the
# one it asked for, else its type's default, else its profile's (as the budget's hold names them:
# store/budget.py ON_HELD_ADAPTER; docs/gateway.md, "Quotas and resets").
RESTS_ON = """COALESCE(tasks.requested_adapter_id IN (SELECT value FROM json_each(r.adapters)), 0)
    OR (tasks.requested_adapter_id IS NULL AND tasks.task_type IN (SELECT value FROM json_each(r.task_types)))
    OR (tasks.requested_adapter_id IS NULL AND tasks.task_type IN (SELECT value FROM json_each(r.open_task_types))
        AND tasks.requested_profile_id IN (SELECT value FROM json_each(r.profiles)))"""


def event_filter(
    *,
    after: int | None = None,
    before: int | None = None,
    task_id: int | None = None,
    workflow_id: int | None = None,
    attempt_id: str | None = None,
    types: tuple[str, ...] = (),
    since: str | None = None,
    until: str | None = None,
) -> tuple[str, list[object]]:
    """The WHERE of a read of the events, and its parameters: after and before a sequence, of one task,
    workflow or attempt, of some types, at or after `since` and before `until` (stored timestamps' text)."""
    clauses, params = ["1"], list[object]()
    for clause, value in (
        ("sequence > ?", after),
        ("sequence < ?", before),
        ("task_id = ?", task_id),
        ("workflow_id = ?", workflow_id),
        ("attempt_id = ?", attempt_id),
        ("timestamp >= ?", since),
        ("timestamp < ?", until),
    ):
        if value is not None:
            clauses.append(clause)
            params.append(value)
    if types:
        clauses.append(f"type IN ({', '.join('?' * len(types))})")
        params += types
    return " AND ".join(clauses), params
