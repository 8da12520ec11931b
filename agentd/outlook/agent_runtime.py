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

from agentd import frozen_value
from agentd.clock import format_ts
from agentd.config import Config
from agentd.outlook.agent_session import agent_session, dispatch_context
from agentd.outlook.correlation import correlation
from agentd.outlook.taskstate import StateFacts, state_facts, task_state
from agentd.records import TERMINAL_STATUSES, RuntimeEvent, TaskAttempt, TaskRecord
from agentd.store import Store, TaskLink

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
    "context_compacted": "context.compaction.completed",  # claude's compact_boundary (docs/live.md)
    "harness_session_resumed": "session.updated",  # an interrupted attempt's session, resumed (docs/reliability.md)
    "harness_session_discarded": "runtime.warning",  # a kept session not resumed: it changed once sealed
    "web_token_added": GENERIC,
    "web_token_revoked": GENERIC,
    "approval_handed_off": "hook.completed",  # an approval request sent to the [web] approval_handler
    "approval_handoff_failed": "runtime.error",
    "approval_handoff_retrying": "runtime.warning",
    "approval_handoff_withdrawn": GENERIC,  # resolved before it was sent: nothing sent
    "permission_requested": "permission.requested",  # a tool call held for a person (docs/policy.md)
    "tool_call_allowed": "permission.resolved",  # by a rule, the default, or a person: the payload says
    "tool_call_denied": "permission.resolved",
    "tool_call_refused": "permission.evaluated",  # a request not from the harness's tool loop, refused unjudged
    "tool_calls_suppressed": "runtime.warning",  # decisions past [policy] max_recorded_decisions, counted
    "tool_call_undecided": "runtime.error",  # a call ran without the policy's decision: a policy violation
    "model_call_finished": "model.completed",  # one call through the model gateway, as the provider answered it
    "egress_connection": GENERIC,  # a connection through the attempt's egress proxy, allowed or refused
    "task_paused": "task.paused",
    "task_resumed": "task.resumed",
    "task_edited": "task.updated",
    "task_linked": "task.dependency.updated",
    "task_unlinked": "task.dependency.updated",
    "dispatch_boundary_waived": "policy.changed",  # attempts run without the run user's boundary (--no-boundary)
}
# Event types announced by work not merged yet, mapped before they land so the table is whole on arrival
# (none now: issue 45's have landed).
ANNOUNCED_EVENT_TYPES: tuple[str, ...] = ()
# agentd event types deliberately left out of the export, each with why ("because …"). None is today: the
# table in docs/evidence.md says so for any that is, and a test holds both to EVENT_TYPES.
NOT_EXPORTED: dict[str, str] = {}
FINISHED = {
    "completed": "task.completed",
    "permanent_failure": "task.failed",
    "blocked": "task.blocked",
    "operator_canceled": "task.cancelled",
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
    permission (an approval before the first claim), waiting for a resource (the budget's quota), or queued again
    once approved; None for every other event (its `type` says what happened)."""
    payload = event.payload
    if event.type == "task_enqueued":
        return "waiting_permission" if payload.get("awaiting_approval") else None
    if event.type == "approval_requested" and payload.get("scope", "claim") == "claim":
        return "waiting_permission"
    if event.type == "approval_resolved" and payload.get("scope", "claim") == "claim":
        return "queued" if payload.get("decision") == "approved" else None  # a denial: task_finished says it
    return "waiting_resource" if event.type == "budget_held" else None


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
    and the 50 newest others, with their attempts, their states (agentd/outlook/taskstate.py), their graph
    and their messages' delivery, and the environment attempts run in."""
    with store.snapshot():
        live = store.list_tasks(statuses=("pending", "running", "retryable_failure"), limit=1_000_000)
        recent = store.list_tasks(statuses=TERMINAL_STATUSES, limit=50)
        tasks = sorted(live + recent, key=lambda t: t.task_id)
        ids = [t.task_id for t in tasks]
        facts = state_facts(store, config, now, ids)
        graph = TaskGraph(store.follow_ups_of(ids), store.links_of(ids), store.deliveries_of(ids))
        found = runtime_snapshot(shown, tasks, store.attempts_by_task(ids), facts, graph)
        first = store.read_events(limit=1)
    started = format_ts(first[0].timestamp) if first else format_ts(now)
    session = agent_session(shown, tasks, started, format_ts(now))
    return found | {"executionEnvironment": environment(config, shown), "agentSession": session}


@frozen_value
class TaskGraph:
    """The edges around the snapshot's tasks: follow-ups by parent, links (after → before), and each
    task's external messages by delivery status."""

    follow_ups: Mapping[int, list[int]]
    links: list[TaskLink]
    deliveries: Mapping[int, Mapping[str, int]]


def runtime_snapshot(
    status: dict[str, Any],
    tasks: list[TaskRecord],
    attempts: dict[int, list[TaskAttempt]],
    facts: StateFacts,
    graph: TaskGraph | None = None,
) -> dict[str, Any]:
    """`agentd status` as the seed-002 session snapshot: one thread per service, honest about
    liveness (a service whose process is gone is `unknown`, a silent one `stale`), and each task in the
    state every view shows (agentd/outlook/taskstate.py: a running task whose dispatcher is not live is
    `lost`, never `running`; a held one `waiting_permission`, `paused` or `waiting_resource`, never `queued`)."""
    graph = graph or TaskGraph({}, [], {})
    return {
        "schemaVersion": SCHEMA_VERSION,
        "sessionId": status["agent_id"],
        "runtimeId": status["agent_id"],
        "updatedAt": format_ts(facts.now),
        "threads": [_thread(s, status["running"]) for s in status["services"]],
        "tasks": [_task(t, attempts.get(t.task_id, []), facts, graph) for t in tasks],
        "taskSummary": {**status["counts"], **status["waiting"]},
        "taskGraph": {"edges": _edges(tasks, graph)},
        "blockedTasks": [
            {"taskId": str(t.task_id), "reason": state.reason}
            for t in tasks
            if (state := task_state(t, attempts.get(t.task_id, []), facts)).status == "blocked"
        ],
    }


THREAD_STATUS = {"stale": "stale", "down": "unknown", "unknown": "unknown", "stopped": "idle"}


def _thread(service: dict[str, Any], running: list[dict[str, Any]]) -> dict[str, Any]:
    busy = service["service"] == "dispatch" and bool(running)
    status = THREAD_STATUS.get(service["liveness"], "running" if busy else "idle")
    return {"threadId": service["service"], "status": status, "nativeStatus": service["liveness"]}


def _edges(tasks: list[TaskRecord], graph: TaskGraph) -> list[dict[str, str]]:
    """Follow-up edges (parent → child) and dependency edges (after → before), each once."""
    edges = [
        {"kind": "followUp", "from": str(t.parent_task_id), "to": str(t.task_id)}
        for t in tasks
        if t.parent_task_id is not None
    ]
    edges += [{"kind": "dependsOn", "from": str(x.after_id), "to": str(x.before_id)} for x in graph.links]
    return edges


def _task(task: TaskRecord, attempts: list[TaskAttempt], facts: StateFacts, graph: TaskGraph) -> dict[str, Any]:
    state = task_state(task, attempts, facts)
    shown: dict[str, Any] = {
        "taskId": str(task.task_id),
        "title": task.subject or task.task_type,
        "taskKind": task.task_type,
        "status": state.status,
        "nativeStatus": task.status,
        "priority": str(task.priority),
        "createdAt": format_ts(task.created_at),
        "updatedAt": format_ts(task.updated_at),
        "attempts": [_attempt(a) for a in attempts],
        "relationships": _relationships(task, graph),
        "dispatchContext": dispatch_context(task, format_ts(task.created_at)),
    }
    optional = {
        "parentTaskId": task.parent_task_id,
        "rootTaskId": task.root_task_id,
        "startedAt": task.started_at and format_ts(task.started_at),
        "endedAt": task.finished_at and format_ts(task.finished_at),
        "statusReason": state.reason,
        "currentRunId": attempts[-1].attempt_id if attempts and attempts[-1].ended_at is None else None,
    }
    shown |= {key: str(value) for key, value in optional.items() if value is not None}
    if task.workflow_ref is not None:
        ref = task.workflow_ref
        shown["scope"] = {
            "workflowId": str(ref.workflow_id),
            "workflowStep": ref.state_id,
            "iteration": task.workflow_iteration,
        }
    if task.last_error:
        shown["lastError"] = {"message": task.last_error}
    if task.task_id in graph.deliveries:
        shown["deliveryState"] = {"messages": dict(graph.deliveries[task.task_id])}
    return shown


def _relationships(task: TaskRecord, graph: TaskGraph) -> list[dict[str, str]]:
    """seed 002's taskRelationship: its parent, its follow-ups, what it waits for and what waits for it."""
    found = [{"kind": "parent", "targetId": str(task.parent_task_id)}] if task.parent_task_id is not None else []
    found += [{"kind": "followUp", "targetId": str(child)} for child in graph.follow_ups.get(task.task_id, [])]
    for link in graph.links:
        if link.after_id == task.task_id:
            found.append({"kind": "dependsOn", "targetId": str(link.before_id), "status": link.before_status})
        elif link.before_id == task.task_id:
            found.append({"kind": "blocks", "targetId": str(link.after_id)})
    return found


def environment(config: Config, shown: dict[str, Any]) -> dict[str, Any]:
    """seed 002's execution_environment_snapshot: where attempts run (workspace, run user), what bounds them
    (limits, timeouts), and the policy they run under (the boundary, each adapter's sandbox and autonomy)."""
    return {
        "cwd": str(config.paths.workspace),
        "workspaceRoots": [str(config.paths.workspace)],
        "stateDir": str(config.paths.state_dir),
        "runUser": config.dispatch.run_as,
        "sensorsRunUser": config.sensors.run_as,
        "limits": {
            "maxPids": config.dispatch.max_pids,
            "maxMemoryMb": config.dispatch.max_memory_mb,
            "held": shown["limits"]["held"],
            "line": shown["limits"]["line"],
        },
        "policy": {
            "boundary": shown["boundary"],
            "adapters": [_adapter_policy(adapter) for adapter in config.adapters.values()],
        },
        "activeProcesses": [{"taskId": str(r["task_id"]), "attemptId": r["attempt_id"]} for r in shown["running"]],
    }


def _adapter_policy(adapter: Any) -> dict[str, Any]:
    autonomy = getattr(adapter, "autonomy", None)
    return {
        "adapterId": adapter.adapter_id,
        "kind": adapter.kind,
        "timeoutMs": adapter.timeout_ms,
        "sandbox": getattr(adapter, "sandbox", None),
        "autonomy": autonomy.profile if autonomy is not None else None,
    }


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
