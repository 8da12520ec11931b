"""Seed 003's AgentSession and AgentDispatchContext, as agentd means a session (agentd/outlook/correlation.py):
the agent itself, the durable work container every task it takes belongs to. `agentd status --format
agent-runtime` carries it as `agentSession`; each task there carries where it came from (`dispatchContext`)."""

from __future__ import annotations

from typing import Any

from agentd.records import TaskRecord

PRODUCT_ID = "agentd"
# a task's source's first word → (originSurface, dispatchMode): seed 003 §7's closed values
ORIGIN = {
    "web": ("web", "interactive"),
    "operator": ("desktop", "interactive"),
    "schedule": ("product-api", "scheduled"),
    "fleet": ("product-api", "remote"),
}


def agent_session(status: dict[str, Any], tasks: list[TaskRecord], started_at: str, updated_at: str) -> dict[str, Any]:
    """The agent's session: paused while its dispatch is paused, waiting on an approval when nothing runs and a
    task waits for one, or when every running task waits for a person to decide a tool call (issue 52), else
    active (a session of a queue does not complete: it stays resumable)."""
    running = status.get("running") or []
    waiting = [t for t in tasks if t.awaiting_approval and t.status in ("pending", "retryable_failure")]
    calls = status.get("held_calls") or []
    held = bool(running) and all((r.get("state") or {}).get("status") == "waiting_permission" for r in running)
    if status.get("paused"):
        state = "paused"
    elif (not running and waiting) or held:
        state = "waiting-approval"
    else:
        state = "active"
    return {
        "sessionId": status["agent_id"],
        "productId": PRODUCT_ID,
        "userId": status["agent_id"],
        "status": state,
        "startedAt": started_at,
        "updatedAt": updated_at,
        "resumable": True,  # the queue is durable: a stopped service resumes from the database
        "currentTaskId": str(running[0]["task_id"]) if running else None,
        "memoryRefs": [],  # agentd keeps no memory of its own between tasks
        "artifactRefs": [],
        "approvalRefs": [f"approval:task/{t.task_id}" for t in waiting]
        + [f"approval:call/{call['call_id']}" for call in calls],
        "dispatchContext": None,  # the session was not dispatched: each task says where it came from
    }


def dispatch_context(task: TaskRecord, created_at: str) -> dict[str, Any]:
    """Where a task came from (seed 003 AgentDispatchContext): a sensor, a schedule, a workflow, a follow-up, an
    operator, the console or a fleet, named in originProductId (`agentd:<source>`)."""
    head = task.source.split(":", 1)[0]
    surface, mode = ORIGIN.get(head, ("product-api", "queued"))
    return {
        "originSurface": surface,
        "originProductId": f"{PRODUCT_ID}:{task.source}",
        "dispatchMode": mode,
        "initiatedAt": created_at,
    }
