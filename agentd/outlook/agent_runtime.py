"""agentd's records in other projects' formats: the Agent Runtime (seed 002) public-core event
envelope and session snapshot, so tools written for that spec can read what agentd leaves.

The mapping from agentd's event names to the spec's closed `type` enum is the table below (docs/evidence.md,
"The Agent Runtime envelope"); the agentd name always travels along as `nativeStatus` and in `refs.agentd`, with the
event's place in the hash chain, so nothing is lost in translation and the chain stays checkable.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agentd.clock import format_ts
from agentd.config import Config
from agentd.outlook.agent_session import agent_session, dispatch_context
from agentd.outlook.correlation import correlation
from agentd.outlook.status import budget_outlook
from agentd.records import RuntimeEvent, TaskAttempt, TaskRecord
from agentd.store import Store

SCHEMA_VERSION = "agentd-events/v1"
GENERIC = "run.status"  # agentd events with no family in the spec: the generic status class

# agentd event → Agent Runtime type. Types that depend on the outcome are decided in `runtime_type`.
EVENT_MAP: dict[str, str] = {
    "task_enqueued": "task.queued",
    "task_claimed": "task.attempt.started",
    "bundle_compiled": "context.resolved",
    "task_started": "process.started",
    "task_attempt_finished": "task.attempt.completed",  # or task.attempt.failed
    "task_retry_scheduled": "task.retrying",
    "task_finished": "task.completed",  # or failed / blocked / cancelled / updated
    "task_cancel_requested": "task.cancel_requested",
    "task_requeued": "task.queued",
    "outcome_downgraded": "runtime.warning",
    "artifact_recorded": "artifact.changed",
    "boot_sweep_reclaimed": "task.lost",
    "schedule_upserted": "job.created",
    "schedule_task_created": "task.created",
    "schedule_task_refused": "runtime.warning",
    "schedule_slot_skipped": "job.progress",  # once per open task; the rest counted in `schedule list`
    "schedule_removed": "job.cancelled",
    "sensor_event_recorded": "channel.message",
    "sensor_event_deduped": "channel.message",
    "sensor_event_stale": "channel.message",
    "sensor_event_rejected": "runtime.warning",
    "sensor_task_created": "task.created",
    "sensor_workflow_created": "task.created",
    "sensor_workflow_deduped": "channel.message",
    "sensor_run_finished": "job.completed",  # or job.failed
    "sensor_run_reclaimed": "job.failed",
    "workflow_started": "task.created",
    "workflow_task_created": "task.created",
    "workflow_transitioned": "task.dependency.updated",
    "workflow_completed": "task.completed",
    "workflow_blocked": "task.blocked",
    "outbox_applied": GENERIC,
    "outbox_refused": "runtime.warning",
    "message_delivery_started": "hook.started",
    "message_delivery_attempted": "hook.failed",  # an attempt that did not deliver; another follows
    "message_delivered": "hook.completed",
    "message_delivery_failed": "runtime.error",
    "message_retry_requested": "queue.changed",
    "approval_requested": "permission.requested",
    "approval_resolved": "permission.resolved",
    "dispatch_paused": "queue.changed",
    "budget_held": "quota.blocked",
    "dispatch_resumed": "queue.changed",
    "policy_denied": "permission.evaluated",
    "workflow_signaled": "task.dependency.updated",
    "fleet_task_deferred": "queue.changed",
    "fleet_result_reported": GENERIC,
    "fleet_lease_lost": "task.lost",
    "workflow_unblocked": "task.dependency.updated",
    "workflow_canceled": "task.cancelled",
    "dispatch_started": GENERIC,
    "dispatch_stopped": GENERIC,
    "dispatch_idle": "queue.changed",
    "dispatch_locked": "runtime.warning",
    "dispatch_lock_stale_cleared": "runtime.warning",
    "migration_applied": GENERIC,
    "evidence_pruned": "output.expired",
    "events_pruned": "output.expired",
    "tasks_pruned": "output.expired",
    "sensor_logs_pruned": "output.expired",
    "retention_failed": "runtime.error",
    "constitution_proposed": "action.required",  # the operator reviews it: `agentd constitution show`
    "constitution_accepted": "action.resolved",
    "constitution_rejected": "action.resolved",
    "rollback_accepted": "runtime.warning",  # the operator went on from a database older than the evidence
    "tool_started": "tool.started",
    "tool_finished": "tool.result",  # or tool.failed
    "model_turn_completed": "model.completed",
    "todos_updated": "task.updated",
    "attempt_progress": "task.progress",
    "activity_capped": "run.status",
    "web_token_added": GENERIC,
    "web_token_revoked": GENERIC,
    "approval_handed_off": "hook.completed",  # an approval request sent to the [web] approval_handler
    "approval_handoff_failed": "runtime.error",
    "approval_handoff_retrying": "runtime.warning",
    "approval_handoff_withdrawn": GENERIC,  # resolved before it was sent: nothing sent
    # The governance events of issue 45 (a tool call held for, or decided by, the attempt's policy). Seed 002
    # has no granted/denied types of its own: a decision on a tool call is permission.resolved, its verdict in
    # `permissionDecision`.
    "permission_requested": "permission.requested",
    "tool_call_allowed": "permission.resolved",
    "tool_call_denied": "permission.resolved",
}
# Event types announced by work not merged yet (issue 45): mapped already, so the table is whole on arrival.
ANNOUNCED_EVENT_TYPES = ("permission_requested", "tool_call_allowed", "tool_call_denied")
# agentd event types deliberately left out of the export, each with why ("because …"). None is today: the
# table in docs/evidence.md says so for any that is, and a test holds both to EVENT_TYPES.
NOT_EXPORTED: dict[str, str] = {}
FINISHED = {
    "completed": "task.completed",
    "permanent_failure": "task.failed",
    "blocked": "task.blocked",
    "operator_canceled": "task.cancelled",
}
# agentd task status → the spec's taskStatusValue
TASK_STATUS = {
    "pending": "queued",
    "running": "running",
    "retryable_failure": "retrying",
    "completed": "completed",
    "permanent_failure": "failed",
    "blocked": "blocked",
    "operator_canceled": "cancelled",
}


def runtime_type(event: RuntimeEvent) -> str:
    payload = event.payload
    if event.type == "task_enqueued" and payload.get("awaiting_approval"):
        return "task.waiting"  # held for an operator before its first claim: not queued
    if event.type == "task_attempt_finished" and payload.get("outcome") != "completed":
        return "task.attempt.failed"
    if event.type == "task_finished":
        return FINISHED.get(str(payload.get("status")), "task.updated")
    if event.type == "sensor_run_finished" and payload.get("result") not in (None, "ok"):
        return "job.failed"
    if event.type == "tool_finished" and payload.get("ok") is False:
        return "tool.failed"
    return EVENT_MAP.get(event.type, GENERIC)


def held_status(event: RuntimeEvent) -> str | None:
    """The spec's task status an event of a hold leaves (taskStatusValue): waiting for a person's
    permission (an approval before the first claim), blocked on a quota (the budget), or queued again
    once approved; None for every other event (its `type` says what happened)."""
    payload = event.payload
    if event.type == "task_enqueued":
        return "waiting_permission" if payload.get("awaiting_approval") else None
    if event.type == "approval_requested" and payload.get("scope", "claim") == "claim":
        return "waiting_permission"
    if event.type == "approval_resolved" and payload.get("scope", "claim") == "claim":
        return "queued" if payload.get("decision") == "approved" else None  # a denial: task_finished says it
    return "blocked" if event.type == "budget_held" else None


def runtime_event(event: RuntimeEvent, agent_id: str) -> dict[str, Any]:
    """One event as the seed-002 public-core envelope."""
    envelope: dict[str, Any] = {
        "type": runtime_type(event),
        "eventId": event.event_id,
        "timestamp": format_ts(event.timestamp),
        "sequence": event.sequence,
        "schemaVersion": SCHEMA_VERSION,
        "runtimeId": agent_id,
        **correlation(event.type, event.payload, agent_id, event.task_id, event.attempt_id),
        "nativeStatus": event.type,
        "payload": _payload(event, agent_id),
        "refs": {
            **event.refs,
            "agentd": {
                "type": event.type,
                "schemaVersion": event.schema_version,
                "prevHash": event.prev_hash,
                "hash": event.hash,
                **{k: v for k, v in _ids(event).items() if v is not None},
            },
        },
    }
    if (status := held_status(event)) is not None:
        envelope["status"] = status
    if event.task_id is not None:
        envelope["taskId"] = str(event.task_id)
    if event.attempt_id is not None:
        envelope["runId"] = envelope["attemptId"] = event.attempt_id
    return envelope


def _payload(event: RuntimeEvent, agent_id: str) -> dict[str, Any]:
    """The payload as agentd wrote it; a todo list's AgentTodo records (seed 003) get the one session id
    (agentd/outlook/correlation.py): their attempt is the run they were seen in."""
    todos = event.payload.get("todos") if event.type == "todos_updated" else None
    if not isinstance(todos, list):
        return event.payload
    shown = [{**t, "sessionId": agent_id} if isinstance(t, dict) else t for t in todos]
    return {**event.payload, "todos": shown}


def _ids(event: RuntimeEvent) -> dict[str, Any]:
    return {"workflowId": event.workflow_id, "scheduleId": event.schedule_id, "sensorId": event.sensor_id}


def session_snapshot(config: Config, store: Store, shown: dict[str, Any], now: datetime) -> dict[str, Any]:
    """`agentd status --format agent-runtime` from `shown` (agentd/outlook/status.py snapshot): every live task
    and the 50 newest others, with their attempts and the tasks the budget holds back now."""
    live = store.list_tasks(statuses=("pending", "running", "retryable_failure"), limit=1_000_000)
    recent = store.list_tasks(statuses=("completed", "permanent_failure", "blocked", "operator_canceled"), limit=50)
    tasks = sorted(live + recent, key=lambda t: t.task_id)
    outlook = budget_outlook(store, config, now)
    held = {}
    if outlook is not None and outlook.hold is not None:
        why = f"held by the budget until {format_ts(outlook.hold.until)}: {outlook.hold.reason}"
        held = dict.fromkeys(store.budget_held_ids(now, outlook.hold), why)
    found = runtime_snapshot(shown, tasks, store.attempts_by_task([t.task_id for t in tasks]), now, held)
    first = store.read_events(limit=1)
    started = format_ts(first[0].timestamp) if first else format_ts(now)
    return {**found, "agentSession": agent_session(shown, tasks, started, format_ts(now))}


def runtime_snapshot(
    status: dict[str, Any],
    tasks: list[TaskRecord],
    attempts: dict[int, list[TaskAttempt]],
    now: datetime,
    budget_held: Mapping[int, str] | None = None,
) -> dict[str, Any]:
    """`agentd status` as the seed-002 session snapshot: one thread per service, honest about
    liveness (a service whose process is gone is `unknown`, a silent one `stale`), a running task
    whose dispatcher is not live `lost`, never `running`, and a task held for an approval or by the
    budget (`budget_held`: its id and why) `waiting_permission` or `blocked`, never `queued`."""
    dispatcher_live = any(s["service"] == "dispatch" and s["liveness"] == "live" for s in status["services"])
    held = budget_held or {}
    return {
        "schemaVersion": SCHEMA_VERSION,
        "sessionId": status["agent_id"],
        "runtimeId": status["agent_id"],
        "updatedAt": format_ts(now),
        "threads": [_thread(s, status["running"]) for s in status["services"]],
        "tasks": [_task(t, attempts.get(t.task_id, []), dispatcher_live, held.get(t.task_id)) for t in tasks],
        "taskSummary": {**status["counts"], **status["waiting"]},
    }


THREAD_STATUS = {"stale": "stale", "down": "unknown", "unknown": "unknown", "stopped": "idle"}


def _thread(service: dict[str, Any], running: list[dict[str, Any]]) -> dict[str, Any]:
    busy = service["service"] == "dispatch" and bool(running)
    status = THREAD_STATUS.get(service["liveness"], "running" if busy else "idle")
    return {"threadId": service["service"], "status": status, "nativeStatus": service["liveness"]}


def task_status(task: TaskRecord, dispatcher_live: bool, budget_held: str | None) -> tuple[str, str | None]:
    """The spec's status of a task, and why when agentd's own status does not say it."""
    if task.status == "running" and not dispatcher_live:
        return "lost", "its dispatcher is not live"
    if task.status in ("pending", "retryable_failure") and task.awaiting_approval:
        return "waiting_permission", f"waiting for an operator: `agentd approve {task.task_id}` or `agentd deny`"
    if budget_held is not None:
        return "blocked", budget_held
    return TASK_STATUS[task.status], None


def _task(
    task: TaskRecord, attempts: list[TaskAttempt], dispatcher_live: bool, budget_held: str | None
) -> dict[str, Any]:
    status, reason = task_status(task, dispatcher_live, budget_held)
    shown: dict[str, Any] = {
        "taskId": str(task.task_id),
        "title": task.subject or task.task_type,
        "taskKind": task.task_type,
        "status": status,
        "nativeStatus": task.status,
        "priority": str(task.priority),
        "createdAt": format_ts(task.created_at),
        "updatedAt": format_ts(task.updated_at),
        "attempts": [_attempt(a) for a in attempts],
        "dispatchContext": dispatch_context(task, format_ts(task.created_at)),
    }
    if task.started_at:
        shown["startedAt"] = format_ts(task.started_at)
    if task.finished_at:
        shown["endedAt"] = format_ts(task.finished_at)
    if reason is not None:
        shown["statusReason"] = reason
    if task.last_error:
        shown["lastError"] = {"message": task.last_error}
    return shown


def _attempt(attempt: TaskAttempt) -> dict[str, Any]:
    if attempt.ended_at is None:
        status = "running"
    elif attempt.termination_reason == "operator_canceled":
        status = "cancelled"
    else:
        status = "completed" if attempt.retry_class == "none" else "failed"
    shown: dict[str, Any] = {
        "runId": attempt.attempt_id,
        "attemptId": attempt.attempt_id,
        "status": status,
        "startedAt": format_ts(attempt.started_at),
        "attemptCount": attempt.attempt_number,
    }
    if attempt.ended_at:
        shown["endedAt"] = format_ts(attempt.ended_at)
    return shown
