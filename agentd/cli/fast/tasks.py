"""`agentd task list` and `agentd task show` without pydantic: each row only if its record would hold it
exactly as stored, else the whole command is the full path's (agentd/cli/fast/commands.py says how the
fast paths hand over)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from datetime import datetime
from typing import Any, get_args

from agentd import frozen_value
from agentd.cli.common import wants_json
from agentd.cli.fast.commands import plain_reader
from agentd.cli.fast.events import plain_event, stored_object
from agentd.clock import SystemClock, parse_ts, stored_ts
from agentd.edge import Refused, check_json_size, check_value
from agentd.outlook.states import TaskState, read_facts, task_state
from agentd.schema_check import compile_check
from agentd.store.base import parse_optional_ts
from agentd.usage import USAGE_KEYS, stored_usage
from agentd.vocabulary import TASK_STATUSES, ExitStatus, RetryClass, SideEffects

# --- agentd task list -----------------------------------------------------------------------------


@frozen_value
class PlainOutcome:
    """The fields of a TaskOutcome that `agentd task show` prints."""

    status: str
    machine_status: str
    operator_summary: str
    artifact_paths: list[str] | None = None
    file_changes: list[str] | None = None
    workflow_signal: str | None = None
    follow_up_tasks: list[Any] | None = None
    external_messages: list[Any] | None = None


@frozen_value
class PlainWorkflowRef:
    workflow_id: int
    state_id: str
    instance_key: str


@frozen_value
class PlainTask:
    """The fields of a TaskRecord that `agentd task list` and `task show` print as text."""

    task_id: int
    status: str
    awaiting_approval: bool
    priority: int
    task_type: str
    attempt_count: int
    max_attempts: int
    available_at: datetime
    subject: str | None
    description: str | None
    source: str
    parent_task_id: int | None
    delegation_depth: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    free_attempt_count: int
    requested_profile_id: str
    requested_adapter_id: str | None
    requested_model: str | None
    skill_ids: list[str]
    workflow_ref: PlainWorkflowRef | None
    workflow_iteration: int | None
    schedule_id: str | None
    cancel_requested_at: datetime | None
    payload: dict[str, Any]
    last_error: str | None
    outcome: PlainOutcome | None


def task_list(args: argparse.Namespace) -> list[tuple[PlainTask, TaskState]] | None:
    """The tasks `agentd task list` prints as text, each in its state (agentd/outlook/states.py, the full path's
    rule), when every row is one a TaskRecord reads exactly as stored; None with --json, with a budget (its hold
    is the full path's), or for any row only pydantic can judge (a poisoned one)."""
    from agentd.store.plain import last_attempt_rows, one_read, task_rows

    with text_reader(args) as opened:
        if opened is None or opened[0]["budget_capped"]:
            return None
        view, store = opened
        now = SystemClock().now()
        with one_read(store):
            rows = task_rows(store, tuple(args.status), args.limit)
            ids = [row["id"] for row in rows]
            attempts = last_attempt_rows(store, ids)
            facts = read_facts(store.tx, now, ids, {})
    checks = record_checks(view)
    if checks is None or not all(sure_task(row, checks) for row in rows) or not all(map(sure_attempt, attempts)):
        return None
    last = {row["task_id"]: _plain_attempt(row) for row in attempts}
    tasks = [_plain_task(row) for row in rows]
    return [(t, task_state(t, [last[t.task_id]] if t.task_id in last else [], facts)) for t in tasks]


@contextmanager
def text_reader(args: argparse.Namespace) -> Iterator[tuple[dict[str, Any], Any] | None]:
    """agentd/cli/fast/commands.py `plain_reader` for a command that prints text: None with --json too (a record's
    JSON is what pydantic serializes: the full path's)."""
    if wants_json(args):
        yield None
        return
    with plain_reader(args) as opened:
        yield opened


def record_checks(view: dict[str, Any]) -> dict[str, Any] | None:
    """The compiled checks of the record schemas the view keeps; None if one does not compile."""
    checks = {name: compile_check(schema) for name, schema in view["record_schemas"].items()}
    return None if any(check is None for check in checks.values()) else checks


def _plain_task(row: Any) -> PlainTask:
    """A row sure_task passed, as agentd/store/rows.py `task_from_row` reads it."""
    import json

    optional_time = {name: parse_optional_ts(row[name]) for name in _OPTIONAL_TIMES}
    ref = None
    if row["workflow_id"] is not None:
        ref = PlainWorkflowRef(row["workflow_id"], row["workflow_state"], row["workflow_instance_key"])
    outcome = json.loads(row["outcome"]) if row["outcome"] is not None else None
    known = {field.name for field in fields(PlainOutcome)}
    return PlainTask(
        task_id=row["id"],
        status=row["status"],
        awaiting_approval=bool(row["awaiting_approval"]),
        priority=row["priority"],
        task_type=row["task_type"],
        attempt_count=row["attempt_count"],
        max_attempts=row["max_attempts"],
        available_at=stored_ts(row["available_at"]),
        subject=row["subject"],
        description=row["description"],
        source=row["source"],
        parent_task_id=row["parent_task_id"],
        delegation_depth=row["delegation_depth"],
        created_at=stored_ts(row["created_at"]),
        free_attempt_count=row["free_attempt_count"],
        requested_profile_id=row["requested_profile_id"],
        requested_adapter_id=row["requested_adapter_id"],
        requested_model=row["requested_model"],
        skill_ids=json.loads(row["skill_ids"]),
        workflow_ref=ref,
        workflow_iteration=row["workflow_iteration"],
        schedule_id=row["schedule_id"],
        payload=json.loads(row["payload"]),
        last_error=row["last_error"],
        outcome=PlainOutcome(**{k: v for k, v in outcome.items() if k in known}) if outcome is not None else None,
        started_at=optional_time["started_at"],
        finished_at=optional_time["finished_at"],
        cancel_requested_at=optional_time["cancel_requested_at"],
    )


_INTS = ("id", "priority", "max_attempts", "attempt_count", "free_attempt_count", "rate_limit_count", "crash_count")
_TEXTS_OF_TASK = ("task_type", "source", "requested_profile_id")
_OPTIONAL = {
    "subject": str,
    "description": str,
    "requested_adapter_id": str,
    "requested_model": str,
    "last_error": str,
    "workflow_iteration": int,
    "schedule_id": str,
    "parent_task_id": int,
    "root_task_id": int,
}
_TIMES = ("available_at", "created_at", "updated_at")
_OPTIONAL_TIMES = ("started_at", "finished_at", "cancel_requested_at")


def sure_task(row: Any, checks: dict[str, Any]) -> bool:
    """Whether agentd/store/rows.py `task_from_row` reads this row exactly as stored (no coercion, no
    refusal): every column of its type, every stored JSON what its record's schema and edge checks take."""
    if any(type(row[name]) is not int for name in (*_INTS, "delegation_depth")) or row["delegation_depth"] < 0:
        return False
    if any(type(row[name]) is not str for name in (*_TEXTS_OF_TASK, *_TIMES)):
        return False
    if any(row[name] is not None and type(row[name]) is not kind for name, kind in _OPTIONAL.items()):
        return False
    if row["status"] not in TASK_STATUSES or not 1 <= row["priority"] <= 10:
        return False
    if not _times_read(row) or not _workflow_ref_reads(row) or stored_object(row["payload"]) is None:
        return False
    return _stored_json_reads(row, checks)


def _times_read(row: Any) -> bool:
    times = [row[name] for name in _TIMES] + [row[name] for name in _OPTIONAL_TIMES if row[name] is not None]
    try:
        return all(type(text) is str and parse_ts(text) for text in times)
    except ValueError:
        return False


def _workflow_ref_reads(row: Any) -> bool:
    if row["workflow_id"] is None:
        return True
    return type(row["workflow_id"]) is int and all(
        type(row[name]) is str for name in ("workflow_state", "workflow_instance_key")
    )


def _stored_json_reads(row: Any, checks: dict[str, Any]) -> bool:
    import json

    try:
        skills, caps = _loads(row["skill_ids"]), _loads(row["delegation_caps"])
        outcome, evidence = _loads(row["outcome"]), _loads(row["evidence_requirements"])
        for value in (skills, caps, outcome, evidence):
            check_value(value, "value")  # what no record holds as it is: NaN, huge integers, deep nesting
    except (ValueError, RecursionError, Refused, json.JSONDecodeError):
        return False
    if type(skills) is not list or not all(type(skill) is str for skill in skills):
        return False
    if caps is not None and not (type(caps) is dict and all(type(v) is int for v in caps.values())):
        return False
    if evidence and not (type(evidence) is dict and checks["evidence_requirements"](evidence)):
        return False
    return outcome is None or (type(outcome) is dict and checks["outcome"](outcome) and _follow_ups_read(outcome))


def _loads(text: Any) -> Any:
    import json

    if text is not None and type(text) is not str:
        raise ValueError("not JSON text")
    return None if text is None else json.loads(text)


def _follow_ups_read(outcome: dict[str, Any]) -> bool:
    """A follow-up's time and payload size, which TaskIntent checks beyond its schema."""
    for intent in outcome.get("follow_up_tasks") or ():
        try:
            check_json_size(intent["payload"], "payload")
            if intent.get("available_at") is not None:
                parse_ts(intent["available_at"])
        except (Refused, ValueError):
            return False
    return True


# --- agentd task show -----------------------------------------------------------------------------


@frozen_value
class PlainAttempt:
    """The fields of a TaskAttempt that `agentd task show` prints."""

    attempt_number: int
    attempt_id: str
    adapter_id: str
    adapter_kind: str
    pid: int | None
    bundle_hash: str | None
    model: str | None
    exit_status: str | None
    termination_reason: str | None
    started_at: datetime
    ended_at: datetime | None
    evidence_dir: str | None
    evidence_pruned_at: datetime | None
    usage: dict[str, Any] | None  # as agentd/store/rows.py reads it: believed numbers only


def task_shown(args: argparse.Namespace) -> dict[str, Any] | None:
    """What `agentd task show` prints as text (agentd/cli/queue.py `_task_shown`), when the task, the
    tasks it was delegated from, its attempts and its events are each one its record reads exactly as
    stored; None with --json, with a budget (its hold is the full path's), for a task that is not there, a
    fleet's task, a task with links, a pause or follow-ups, or any row only pydantic can judge."""
    from agentd.store.plain import attempt_rows, event_rows, has_fleet_lease, has_graph, one_read, task_row

    with text_reader(args) as opened:
        if opened is None or opened[0]["budget_capped"]:
            return None
        view, store = opened
        now = SystemClock().now()
        with one_read(store):
            row = task_row(store, args.task_id)
            if row is None or has_fleet_lease(store, args.task_id) or has_graph(store, args.task_id):
                return None
            rows = [row]

            def parent_of(task_id: int) -> int | None:
                found = task_row(store, task_id)
                rows.extend([found] if found is not None else [])
                return found["parent_task_id"] if found is not None else None

            chain = delegation_chain(row["parent_task_id"], parent_of)
            attempts = attempt_rows(store, args.task_id)
            found = event_rows(store, after=0, task_id=args.task_id, types=(), since=None, limit=100_000, last=False)
            facts = read_facts(store.tx, now, [args.task_id], {})
    checks = record_checks(view)
    if checks is None or not all(sure_task(r, checks) for r in rows) or not all(map(sure_attempt, attempts)):
        return None
    events = [plain_event(event) for event in found]
    if any(event is None for event in events):
        return None
    shown = [_plain_attempt(attempt) for attempt in attempts]
    task = _plain_task(row)
    return {
        "task": task,
        "attempts": shown,
        "events": events,
        "delegation_chain": chain,
        "state": task_state(task, shown, facts).as_json(),
        "now": now,
    }


def delegation_chain(parent: int | None, parent_of: Callable[[int], int | None]) -> list[int]:
    """The task ids whose outcomes led to a task, nearest first (dispatch context, seed 003), from its
    parent; `parent_of` gives a task's parent (None for none, or for a task not there)."""
    chain: list[int] = []
    while parent is not None and parent not in chain and len(chain) < 1000:
        chain.append(parent)
        parent = parent_of(parent)
    return chain


_ATTEMPT_TEXTS = ("attempt_id", "adapter_id", "adapter_kind", "runner_id")
_ATTEMPT_OPTIONAL_TEXTS = (
    "model",
    "termination_reason",
    "bundle_hash",
    "evidence_dir",
    "prompt_path",
    "stdout_path",
    "stderr_path",
    "result_path",
    "last_message_path",
)
_ATTEMPT_WORDS = {  # each may be null too
    "exit_status": (None, *get_args(ExitStatus)),
    "retry_class": (None, *get_args(RetryClass)),
    "side_effects": (None, *get_args(SideEffects)),
}


def sure_attempt(row: Any) -> bool:
    """Whether agentd/store/rows.py `attempt_from_row` reads this row exactly as stored. Its usage and
    diagnostics are read whatever they hold (never a failure); `task show` prints the usage as it reads it."""
    if any(type(row[name]) is not str for name in _ATTEMPT_TEXTS) or type(row["started_at"]) is not str:
        return False
    if type(row["task_id"]) is not int or type(row["attempt_number"]) is not int:
        return False
    if row["pid"] is not None and type(row["pid"]) is not int:
        return False
    if any(row[name] is not None and type(row[name]) is not str for name in _ATTEMPT_OPTIONAL_TEXTS):
        return False
    if any(row[name] not in words for name, words in _ATTEMPT_WORDS.items()):
        return False
    times = [row["started_at"]] + [row[name] for name in ("ended_at", "evidence_pruned_at") if row[name] is not None]
    try:
        return all(type(text) is str and parse_ts(text) for text in times)
    except ValueError:
        return False


def _plain_attempt(row: Any) -> PlainAttempt:
    return PlainAttempt(
        row["attempt_number"],
        row["attempt_id"],
        row["adapter_id"],
        row["adapter_kind"],
        row["pid"],
        row["bundle_hash"],
        row["model"],
        row["exit_status"],
        row["termination_reason"],
        stored_ts(row["started_at"]),
        parse_optional_ts(row["ended_at"]),
        row["evidence_dir"],
        parse_optional_ts(row["evidence_pruned_at"]),
        stored_usage({name: row[name] for name in USAGE_KEYS}, row["cost_estimated"]),
    )
