"""The fast paths that print rows (`agentd events`, `agentd task list`, `agentd task show`) without
pydantic: each row only if its record would hold it exactly as stored, else the whole command is the full
path's (agentd/cli/quick.py says how the fast paths hand over)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from datetime import datetime
from typing import Any, get_args

from agentd import frozen_value
from agentd.cli.common import option, wants_json
from agentd.cli.quick import plain_reader
from agentd.clock import format_ts, parse_ts, stored_ts
from agentd.edge import Refused, check_json_size, check_value
from agentd.schema_check import compile_check
from agentd.store.base import parse_optional_ts
from agentd.vocabulary import TASK_STATUSES, ExitStatus, RetryClass, SideEffects

# --- agentd events --------------------------------------------------------------------------------


@frozen_value
class PlainEvent:
    """The fields of a RuntimeEvent, as `agentd events` prints them."""

    sequence: int
    timestamp: datetime
    type: str
    task_id: int | None
    attempt_id: str | None
    workflow_id: int | None
    schedule_id: str | None
    sensor_id: str | None
    payload: dict[str, Any]
    event_id: str
    schema_version: int
    refs: dict[str, Any]
    prev_hash: str
    hash: str

    def json(self) -> str | None:
        """`RuntimeEvent.model_dump_json()` of this event: its fields in the record's order, compact, the
        timestamp as the record writes it. pydantic-core writes what json.dumps writes for these values
        (tests/test_fast_cli.py compares both paths), except a float Python would write with an exponent
        (`1e+16` where pydantic-core writes `1e16`): None for an event holding one (the full path prints it)."""
        import json

        if _has_exponent(self.payload) or _has_exponent(self.refs):
            return None
        record = {
            "event_id": self.event_id, "type": self.type, "timestamp": format_ts(self.timestamp),
            "sequence": self.sequence, "schema_version": self.schema_version, "task_id": self.task_id,
            "attempt_id": self.attempt_id, "workflow_id": self.workflow_id, "schedule_id": self.schedule_id,
            "sensor_id": self.sensor_id, "payload": self.payload, "refs": self.refs, "prev_hash": self.prev_hash,
            "hash": self.hash,
        }  # fmt: skip
        return json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def json_lines(events: list[PlainEvent]) -> list[str] | None:
    """Each event's JSON line, or None if one of them is the full path's to write."""
    lines = [event.json() for event in events]
    return None if None in lines else lines  # type: ignore[return-value]


def _has_exponent(value: Any) -> bool:
    if type(value) is float:
        return "e" in repr(value)
    if type(value) is dict:
        return any(_has_exponent(item) for item in value.values())
    if type(value) is list:
        return any(_has_exponent(item) for item in value)
    return False


def events(args: argparse.Namespace) -> list[PlainEvent] | None:
    """The events `agentd events` prints as text or JSON, each one a RuntimeEvent would hold exactly as
    stored; None for --follow, the agent-runtime format, or any row the record would read otherwise (a
    poisoned one)."""
    if option(args, "follow") or option(args, "format") not in (None, "text", "json"):
        return None
    from agentd.store.plain import event_rows, task_exists

    with plain_reader(args) as opened:
        if opened is None:
            return None
        store = opened[1]
        if args.task is not None and not task_exists(store, args.task):
            return None  # the full path says there is no such task
        limit = args.last if args.last is not None else args.limit
        found = event_rows(
            store, after=args.after or 0, task_id=args.task, types=tuple(args.types), since=args.since, limit=limit,
            last=args.last is not None,
        )  # fmt: skip
    plain = [plain_event(row) for row in found]
    return None if any(event is None for event in plain) else plain  # type: ignore[return-value]


_TEXTS = ("event_id", "prev_hash", "hash")
_OPTIONAL_IDS = (("task_id", int), ("attempt_id", str), ("workflow_id", int), ("schedule_id", str), ("sensor_id", str))


def plain_event(row: Any) -> PlainEvent | None:
    """The row as a RuntimeEvent would hold it, when it would hold it exactly as stored; else None."""
    from agentd.records.event_names import EVENT_TYPES

    if row["type"] not in EVENT_TYPES or any(type(row[name]) is not str for name in _TEXTS):
        return None
    if type(row["sequence"]) is not int or type(row["schema_version"]) is not int:
        return None
    if any(row[name] is not None and type(row[name]) is not kind for name, kind in _OPTIONAL_IDS):
        return None
    payload, refs = _stored_object(row["payload"]), _stored_object(row["refs"])
    if payload is None or refs is None or type(row["timestamp"]) is not str:
        return None
    try:
        timestamp = stored_ts(row["timestamp"])
    except ValueError:
        return None
    ids = {name: row[name] for name, _ in _OPTIONAL_IDS}
    hashes = {"event_id": row["event_id"], "prev_hash": row["prev_hash"], "hash": row["hash"]}
    return PlainEvent(
        row["sequence"], timestamp, row["type"], payload=payload, schema_version=row["schema_version"], refs=refs,
        **ids, **hashes,
    )  # fmt: skip


def _stored_object(text: Any) -> dict[str, Any] | None:
    """A stored JSON object a record holds as it is (agentd/records/base.py JsonObject), or None."""
    import json

    try:
        value = json.loads(text) if type(text) is str else None
        if type(value) is not dict:
            return None
        check_value(value, "value")
    except (ValueError, RecursionError, Refused):
        return None
    return value


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


def task_list(args: argparse.Namespace) -> list[PlainTask] | None:
    """The tasks `agentd task list` prints as text, when every row is one a TaskRecord reads exactly as
    stored; None with --json, or for any row only pydantic can judge (a poisoned one)."""
    from agentd.store.plain import task_rows

    with text_reader(args) as opened:
        if opened is None:
            return None
        view, store = opened
        rows = task_rows(store, tuple(args.status), args.limit)
    checks = record_checks(view)
    if checks is None or not all(sure_task(row, checks) for row in rows):
        return None
    return [_plain_task(row) for row in rows]


@contextmanager
def text_reader(args: argparse.Namespace) -> Iterator[tuple[dict[str, Any], Any] | None]:
    """agentd/cli/quick.py `plain_reader` for a command that prints text: None with --json too (a record's
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
        task_id=row["id"], status=row["status"], awaiting_approval=bool(row["awaiting_approval"]),
        priority=row["priority"], task_type=row["task_type"], attempt_count=row["attempt_count"],
        max_attempts=row["max_attempts"], available_at=stored_ts(row["available_at"]), subject=row["subject"],
        description=row["description"], source=row["source"], parent_task_id=row["parent_task_id"],
        delegation_depth=row["delegation_depth"], created_at=stored_ts(row["created_at"]),
        free_attempt_count=row["free_attempt_count"], requested_profile_id=row["requested_profile_id"],
        requested_adapter_id=row["requested_adapter_id"], requested_model=row["requested_model"],
        skill_ids=json.loads(row["skill_ids"]), workflow_ref=ref, workflow_iteration=row["workflow_iteration"],
        schedule_id=row["schedule_id"], payload=json.loads(row["payload"]), last_error=row["last_error"],
        outcome=PlainOutcome(**{k: v for k, v in outcome.items() if k in known}) if outcome is not None else None,
        started_at=optional_time["started_at"], finished_at=optional_time["finished_at"],
        cancel_requested_at=optional_time["cancel_requested_at"],
    )  # fmt: skip


_INTS = ("id", "priority", "max_attempts", "attempt_count", "free_attempt_count", "rate_limit_count", "crash_count")
_TEXTS_OF_TASK = ("task_type", "source", "requested_profile_id")
_OPTIONAL = {
    "subject": str, "description": str, "requested_adapter_id": str, "requested_model": str, "last_error": str,
    "workflow_iteration": int, "schedule_id": str, "parent_task_id": int, "root_task_id": int,
}  # fmt: skip
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
    if not _times_read(row) or not _workflow_ref_reads(row) or _stored_object(row["payload"]) is None:
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
    model: str | None
    exit_status: str | None
    termination_reason: str | None
    started_at: datetime
    ended_at: datetime | None
    evidence_dir: str | None
    evidence_pruned_at: datetime | None


def task_shown(args: argparse.Namespace) -> dict[str, Any] | None:
    """What `agentd task show` prints as text (agentd/cli/queue.py `_task_shown`), when the task, the
    tasks it was delegated from, its attempts and its events are each one its record reads exactly as
    stored; None with --json, for a task that is not there, a fleet's task, or any row only pydantic can
    judge."""
    from agentd.store.plain import attempt_rows, event_rows, has_fleet_lease, task_row

    with text_reader(args) as opened:
        if opened is None:
            return None
        view, store = opened
        row = task_row(store, args.task_id)
        if row is None or has_fleet_lease(store, args.task_id):
            return None
        rows = [row]

        def parent_of(task_id: int) -> int | None:
            found = task_row(store, task_id)
            rows.extend([found] if found is not None else [])
            return found["parent_task_id"] if found is not None else None

        chain = delegation_chain(row["parent_task_id"], parent_of)
        attempts = attempt_rows(store, args.task_id)
        found = event_rows(store, after=0, task_id=args.task_id, types=(), since=None, limit=100_000, last=False)
    checks = record_checks(view)
    if checks is None or not all(sure_task(r, checks) for r in rows) or not all(map(sure_attempt, attempts)):
        return None
    events = [plain_event(event) for event in found]
    if any(event is None for event in events):
        return None
    shown = [_plain_attempt(attempt) for attempt in attempts]
    return {"task": _plain_task(row), "attempts": shown, "events": events, "delegation_chain": chain}


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
    "model", "termination_reason", "bundle_hash", "evidence_dir", "prompt_path", "stdout_path", "stderr_path",
    "result_path", "last_message_path",
)  # fmt: skip
_ATTEMPT_WORDS = {  # each may be null too
    "exit_status": (None, *get_args(ExitStatus)),
    "retry_class": (None, *get_args(RetryClass)),
    "side_effects": (None, *get_args(SideEffects)),
}


def sure_attempt(row: Any) -> bool:
    """Whether agentd/store/rows.py `attempt_from_row` reads this row exactly as stored. Its usage and
    diagnostics are read whatever they hold (never a failure), and `task show` prints neither."""
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
        row["attempt_number"], row["attempt_id"], row["adapter_id"], row["model"], row["exit_status"],
        row["termination_reason"], stored_ts(row["started_at"]), parse_optional_ts(row["ended_at"]),
        row["evidence_dir"], parse_optional_ts(row["evidence_pruned_at"]),
    )  # fmt: skip
