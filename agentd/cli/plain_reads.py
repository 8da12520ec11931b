"""The fast paths that print rows (`agentd events`, `agentd task list`) without pydantic: each row only if
its record would hold it exactly as stored, else the whole command is the full path's (agentd/cli/quick.py
says how the fast paths hand over)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentd.cli.common import option, wants_json
from agentd.cli.quick import plain_reader
from agentd.clock import parse_ts
from agentd.edge import Refused, check_json_size, check_value
from agentd.schema_check import compile_check
from agentd.vocabulary import TASK_STATUSES

# --- agentd events --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlainEvent:
    """The fields of a RuntimeEvent that `agentd events` prints as text."""

    sequence: int
    timestamp: datetime
    type: str
    task_id: int | None
    attempt_id: str | None
    workflow_id: int | None
    schedule_id: str | None
    sensor_id: str | None
    payload: dict[str, Any]


def events(args: argparse.Namespace) -> list[PlainEvent] | None:
    """The events `agentd events` prints as text, each one a RuntimeEvent would hold exactly as stored;
    None for --follow, another format, or any row the record would read otherwise (a poisoned one)."""
    if option(args, "follow") or option(args, "format") not in (None, "text") or wants_json(args):
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
        timestamp = parse_ts(row["timestamp"])
    except ValueError:
        return None
    ids = {name: row[name] for name, _ in _OPTIONAL_IDS}
    return PlainEvent(row["sequence"], timestamp, row["type"], payload=payload, **ids)


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


@dataclass(frozen=True)
class PlainTask:
    """The fields of a TaskRecord that `agentd task list` prints as text."""

    task_id: int
    status: str
    awaiting_approval: bool
    priority: int
    task_type: str
    attempt_count: int
    max_attempts: int
    available_at: datetime
    subject: str | None


def task_list(args: argparse.Namespace) -> list[PlainTask] | None:
    """The tasks `agentd task list` prints as text, when every row is one a TaskRecord reads exactly as
    stored; None with --json, or for any row only pydantic can judge (a poisoned one)."""
    if wants_json(args):
        return None
    from agentd.store.plain import task_rows

    with plain_reader(args) as opened:
        if opened is None:
            return None
        view, store = opened
        rows = task_rows(store, tuple(args.status), args.limit)
    checks = {name: compile_check(schema) for name, schema in view["record_schemas"].items()}
    if any(check is None for check in checks.values()) or not all(sure_task(row, checks) for row in rows):
        return None
    return [_plain_task(row) for row in rows]


def _plain_task(row: Any) -> PlainTask:
    return PlainTask(
        row["id"], row["status"], bool(row["awaiting_approval"]), row["priority"], row["task_type"],
        row["attempt_count"], row["max_attempts"], parse_ts(row["available_at"]), row["subject"],
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
