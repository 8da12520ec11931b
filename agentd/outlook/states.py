"""A task's state by one rule over plain values, so every view says the same thing (issue 52): `agentd status`,
`task list` and `task show` (which run without pydantic: nothing here loads a record), the API, the console
and the Agent Runtime export. The rule itself is docs/operate.md, "A task's state"; the facts are read by
`read_facts`, with the budget's hold from agentd/outlook/taskstate.py where the budget is capped."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from agentd import frozen_value
from agentd.clock import format_ts, relative
from agentd.outlook.liveness import lost_reason, service_health
from agentd.process import procs
from agentd.store import CallWait, ResetWait, TaskLink, TaskPause
from agentd.store.facts import activity_times, calls_held, links_of, pauses_of, resets_waited, service_rows

STREAMING_S = 30.0  # a harness that reported within this long is streaming (docs/live.md)
QUIET_KINDS = ("script",)  # adapters whose activity is a progress line, never a stream of a model's turns

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


class TaskLike(Protocol):
    """What the rule reads of a task: a TaskRecord, or the fast path's PlainTask."""

    @property
    def task_id(self) -> int: ...
    @property
    def status(self) -> str: ...
    @property
    def awaiting_approval(self) -> bool: ...
    @property
    def cancel_requested_at(self) -> datetime | None: ...


class AttemptLike(Protocol):
    """What the rule reads of an attempt: a TaskAttempt, or the fast path's PlainAttempt."""

    @property
    def attempt_id(self) -> str: ...
    @property
    def adapter_kind(self) -> str: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def bundle_hash(self) -> str | None: ...
    @property
    def ended_at(self) -> datetime | None: ...
    @property
    def termination_reason(self) -> str | None: ...


@frozen_value
class TaskState:
    status: str  # seed 002's taskStatusValue
    reason: str | None  # why, where agentd's own status does not say it

    def as_json(self) -> dict[str, str | None]:
        return {"status": self.status, "reason": self.reason}


@frozen_value
class StateFacts:
    """What the runtime knows now beside the tasks' own rows, read once for many tasks (`read_facts`). `now` is
    the view's one clock: every age a state's reason says is taken from it."""

    now: datetime
    lost: str | None  # why a running task is lost (liveness.lost_reason), None under a live dispatcher
    budget_held: Mapping[int, str]  # task id → why the budget holds it
    pauses: Mapping[int, TaskPause]
    links: Mapping[int, list[TaskLink]]  # task id → the links it waits on
    activity_at: Mapping[str, datetime]  # an open attempt's id → its newest live activity
    calls: Mapping[str, CallWait]  # an open attempt's id → the tool call it holds for a person
    resets: Mapping[int, ResetWait]  # a waiting task's id → the provider's reset it waits for


def read_facts(tx: object, now: datetime, task_ids: list[int], budget_held: Mapping[int, str]) -> StateFacts:
    """The facts of these tasks, in the caller's read (a snapshot keeps them one state of the database);
    `budget_held` is the full path's to judge (the fast paths hand a capped budget over)."""
    here = procs.this_process()
    services = [service_health(row, now, here) for row in service_rows(tx)]
    links: dict[int, list[TaskLink]] = {}
    for link in links_of(tx, task_ids):
        links.setdefault(link.after_id, []).append(link)
    return StateFacts(
        now,
        lost_reason(services),
        budget_held,
        pauses_of(tx, task_ids),
        links,
        activity_times(tx, task_ids),
        calls_held(tx, task_ids),
        resets_waited(tx, task_ids, now),
    )


def task_state(task: TaskLike, attempts: Sequence[AttemptLike], facts: StateFacts) -> TaskState:
    """The task's state now (seed 002's taskStatusValue) and why, from its row, its attempts and `facts`."""
    last = attempts[-1] if attempts else None
    if task.status == "running":
        return _running(task, last, facts)
    if task.status in ("pending", "retryable_failure"):
        return _waiting(task, facts)
    if task.status == "permanent_failure" and last is not None and last.termination_reason == "timeout":
        return TaskState("timed_out", "its last attempt ran out of time (the adapter's timeout_ms)")
    return TaskState(NATIVE[task.status], None)


def _running(task: TaskLike, attempt: AttemptLike | None, facts: StateFacts) -> TaskState:
    if facts.lost is not None:
        return TaskState("lost", facts.lost)
    if task.cancel_requested_at is not None:
        return TaskState("cancelling", f"cancel requested at {format_ts(task.cancel_requested_at)}")
    if attempt is None or attempt.ended_at is not None or not _started(attempt):
        return TaskState("preparing", "claimed: its bundle is being compiled, its adapter not yet started")
    if (call := facts.calls.get(attempt.attempt_id)) is not None:
        return TaskState("waiting_permission", _call_words(call, facts.now))
    seen = facts.activity_at.get(attempt.attempt_id)
    if seen is None or (facts.now - seen).total_seconds() > STREAMING_S:
        return TaskState("running", None)
    if attempt.adapter_kind in QUIET_KINDS:  # a script's progress line: it runs, it does not stream
        return TaskState("running", f"its script reported progress {relative(seen, facts.now)}")
    return TaskState("streaming", f"its harness reported {relative(seen, facts.now)}")


def _call_words(call: CallWait, now: datetime) -> str:
    return (
        f"waiting for a person to decide tool call {call.call_id} ({call.summary}), asked "
        f"{relative(call.requested_at, now)} (`agentd approve --call {call.call_id}` or `agentd deny --call "
        f"{call.call_id} --reason R`)"
    )


def _started(attempt: AttemptLike) -> bool:
    """Its adapter runs: the start recorded a process group, or (ollama speaks HTTP and runs none) the bundle
    it was started with, which only the start records while the attempt is open."""
    return attempt.pid is not None or attempt.bundle_hash is not None


def _waiting(task: TaskLike, facts: StateFacts) -> TaskState:
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
    if (reset := facts.resets.get(task.task_id)) is not None:
        return TaskState(
            "waiting_resource",
            f"waiting for the provider's reset at {format_ts(reset.until)} ({relative(reset.until, facts.now)}): "
            f"{reset.reason}",
        )
    return TaskState(NATIVE[task.status], None)
