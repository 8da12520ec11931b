"""One task's state as every view shows it: `agentd status`, `task show`, the API, the console and the Agent
Runtime export all take it from `task_state`, so they never disagree (issue 41; seed 002, "Completion and
failure semantics"). agentd's own status says where a task is in the queue; the state adds what the
runtime knows now: a running task whose dispatcher is not live is lost, one claimed whose adapter has not
started is preparing, one whose harness reported within STREAMING_S is streaming; a waiting task is held
for a person (waiting_permission), paused, queued after another task (or blocked, when that one ended
without completing), or held by the budget (waiting_resource); a task that failed because its last attempt
ran out of time timed_out."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from agentd import frozen_value
from agentd.clock import age, format_ts
from agentd.config import Config
from agentd.config.budget import budget_hold, day_start
from agentd.outlook.liveness import lost_reason, service_health
from agentd.process import procs
from agentd.records import TaskAttempt, TaskRecord
from agentd.store import Store
from agentd.store.steering import TaskLink, TaskPause

STREAMING_S = 30.0  # a harness that reported within this long is streaming (docs/live.md)

# agentd task status → seed 002's taskStatusValue, before what the runtime knows now refines it
NATIVE = {
    "pending": "queued",
    "running": "running",
    "retryable_failure": "retrying",
    "completed": "completed",
    "permanent_failure": "failed",
    "blocked": "blocked",
    "operator_canceled": "cancelled",
}


@frozen_value
class TaskState:
    status: str  # seed 002's taskStatusValue
    reason: str | None  # why, where agentd's own status does not say it

    def as_json(self) -> dict[str, str | None]:
        return {"status": self.status, "reason": self.reason}


@frozen_value
class StateFacts:
    """What the runtime knows now beside the tasks' own rows, read once for many tasks (`state_facts`)."""

    now: datetime
    lost: str | None  # why a running task is lost (liveness.lost_reason), None under a live dispatcher
    budget_held: Mapping[int, str]  # task id → why the budget holds it
    pauses: Mapping[int, TaskPause]
    links: Mapping[int, list[TaskLink]]  # task id → the links it waits on
    activity_at: Mapping[str, datetime]  # an open attempt's id → its newest live activity


def state_facts(store: Store, config: Config, now: datetime, task_ids: list[int]) -> StateFacts:
    """The facts of these tasks, in the caller's read (a snapshot keeps them one state of the database)."""
    here = procs.this_process()
    services = [service_health(row, now, here) for row in store.service_statuses()]
    links: dict[int, list[TaskLink]] = {}
    for link in store.links_of(task_ids):
        links.setdefault(link.after_id, []).append(link)
    return StateFacts(
        now,
        lost_reason(services),
        _budget_held(store, config, now),
        store.pauses_of(task_ids),
        links,
        store.activity_times(task_ids),
    )


def _budget_held(store: Store, config: Config, now: datetime) -> dict[int, str]:
    if not config.budget.capped:
        return {}
    hold = budget_hold(config, store.spend_since(day_start(now)), now)
    if hold is None:
        return {}
    why = f"held by the budget until {format_ts(hold.until)}: {hold.reason}"
    return dict.fromkeys(store.budget_held_ids(now, hold), why)


def task_state(task: TaskRecord, attempts: list[TaskAttempt], facts: StateFacts) -> TaskState:
    """The task's state now (seed 002's taskStatusValue) and why, from its row, its attempts and `facts`."""
    if task.status == "running":
        return _running(task, attempts[-1] if attempts else None, facts)
    if task.status in ("pending", "retryable_failure"):
        return _waiting(task, facts)
    last = attempts[-1] if attempts else None
    if task.status == "permanent_failure" and last is not None and last.termination_reason == "timeout":
        return TaskState("timed_out", "its last attempt ran out of time (the adapter's timeout_ms)")
    return TaskState(NATIVE[task.status], None)


def _running(task: TaskRecord, attempt: TaskAttempt | None, facts: StateFacts) -> TaskState:
    if facts.lost is not None:
        return TaskState("lost", facts.lost)
    if task.cancel_requested_at is not None:
        return TaskState("cancelling", f"cancel requested at {format_ts(task.cancel_requested_at)}")
    if attempt is None or attempt.ended_at is not None or not _started(attempt):
        return TaskState("preparing", "claimed: its bundle is being compiled, its adapter not yet started")
    seen = facts.activity_at.get(attempt.attempt_id)
    if seen is not None and (facts.now - seen).total_seconds() <= STREAMING_S:
        return TaskState("streaming", f"its harness reported {age((facts.now - seen).total_seconds())} ago")
    return TaskState("running", None)


def _started(attempt: TaskAttempt) -> bool:
    """Its adapter runs: the start recorded a process group, or (ollama speaks HTTP and runs none) the bundle
    it was started with, which only the start records while the attempt is open."""
    return attempt.pid is not None or attempt.bundle_hash is not None


def _waiting(task: TaskRecord, facts: StateFacts) -> TaskState:
    if task.awaiting_approval:
        return TaskState(
            "waiting_permission", f"waiting for an operator: `agentd approve {task.task_id}` or `agentd deny`"
        )
    if (pause := facts.pauses.get(task.task_id)) is not None:
        return TaskState("paused", f"{pause.describe()} (`agentd task resume {task.task_id}`)")
    open_links = [link for link in facts.links.get(task.task_id, []) if link.before_status != "completed"]
    ended = [link for link in open_links if link.before_status not in ("pending", "running", "retryable_failure")]
    if ended:
        link = ended[0]
        return TaskState(
            "blocked",
            f"after task {link.before_id}, which ended {link.before_status} "
            f"(`agentd task unlink {task.task_id} --after {link.before_id}`)",
        )
    if open_links:
        return TaskState(NATIVE[task.status], f"after task {', '.join(str(link.before_id) for link in open_links)}")
    if (held := facts.budget_held.get(task.task_id)) is not None:
        return TaskState("waiting_resource", held)
    return TaskState(NATIVE[task.status], None)
