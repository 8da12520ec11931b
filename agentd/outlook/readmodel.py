"""The queue rebuilt from the event log alone: every state change appends its event in the same
transaction, so the log is enough to say what each task is now. An auditor with an export (or a
pruned log's remaining suffix) can check the database's story against it."""

from __future__ import annotations

from collections.abc import Iterable

from agentd.records import RuntimeEvent

# event type → the status it leaves the task in (task_finished says which in its payload)
MOVES = {
    "task_enqueued": "pending",
    "task_requeued": "pending",
    "task_claimed": "running",
    "task_retry_scheduled": "retryable_failure",
}


def task_statuses(events: Iterable[RuntimeEvent]) -> dict[int, str]:
    """Each task's status after these events, in sequence order; tasks a `tasks_pruned` event
    removed are dropped."""
    statuses: dict[int, str] = {}
    for event in events:
        if event.type == "tasks_pruned":
            for task_id in event.payload.get("task_ids", []):
                statuses.pop(task_id, None)
        if event.task_id is None:
            continue
        if event.type in MOVES:
            statuses[event.task_id] = MOVES[event.type]
        elif event.type == "task_finished":
            statuses[event.task_id] = str(event.payload["status"])
    return statuses
