"""Approval hand-off (docs/web.md, "Approval hand-off"): the run context an approval request carries to
an external app, and the check that a resolution brings back the context of the request still pending
(a stale or mismatched one is refused, nothing resolved)."""

from __future__ import annotations

from typing import Any

from agentd.store import Store
from agentd.web.inputs import BadInput

CONTEXT_KEYS = ("approval_id", "task_id", "attempt_id", "dispatch_context")


def run_context(store: Store, task_id: int) -> dict[str, Any]:
    """What a task's pending approval carries: the approval id, the task, its last attempt and the
    dispatch context it was submitted with (and, for a person reading it, the scope and reason)."""
    return store.approval_context(task_id)


def check_context(store: Store, task_id: int, given: Any) -> None:
    """The context a resolution brings must be the pending request's own, key by key: another approval
    of the same task (a stale hand-off), another attempt or another origin is a 409."""
    if not isinstance(given, dict):
        raise BadInput(422, f"a JSON {type(given).__name__}", "body.context", "the context the hand-off carried")
    current = run_context(store, task_id)
    for key in CONTEXT_KEYS:
        if given.get(key) != current[key]:
            what = f"{key} is {str(given.get(key))[:80]!r}; the pending request's is {str(current[key])[:80]!r}"
            raise BadInput(409, f"stale or mismatched context: {what}", f"body.context.{key}", "the pending request's")
