"""Rows to records: every SELECT the store runs comes back through one of these.

A reader never fails on a stored row with a traceback: a JSON column an older agentd (or an edit) left
holding what no record may (a number json reads as Infinity or beyond int64, nesting deeper than agentd
stores) is read as what a record can hold (`holdable`), and usage numbers only where they are believable
(agentd/usage.py). A row that still fits no record (an edit gave a column another shape, or a time that
is not one) is UnreadableRow: one line naming the row and the column. The event chain still names the
edit (`agentd evidence verify`).
"""

from __future__ import annotations

import functools
import json
import math
import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError

from agentd.clock import parse_ts
from agentd.edge import INT64_MAX, INT64_MIN, MAX_DEPTH, cut, quoted
from agentd.errors import UnreadableRow
from agentd.records import (
    EvidenceRequirements,
    LockHolder,
    RecurringScheduleRecord,
    RuntimeEvent,
    TaskAttempt,
    TaskIntent,
    TaskOutcome,
    TaskRecord,
    WorkflowRecord,
    WorkflowRef,
)
from agentd.store.base import loads
from agentd.usage import stored_usage

READ_FAILURES = (ValueError, TypeError, RecursionError)  # pydantic's ValidationError is a ValueError
R = TypeVar("R")


def unreadable(kind: str, key: str, row: sqlite3.Row, exc: BaseException) -> UnreadableRow:
    """The one line for a row of `kind` (named by its `key` column) that no record can be made of."""
    what = first_error(exc) if isinstance(exc, ValidationError) else cut(str(exc) or type(exc).__name__, 200)
    return UnreadableRow(f"{kind} {quoted(row[key], 40)} in the database is not a row agentd wrote ({what})")


def reads(kind: str, key: str) -> Callable[[Callable[[sqlite3.Row], R]], Callable[[sqlite3.Row], R]]:
    """A row reader of `kind` (rows named by their `key` column) that never fails with a traceback: a row no
    record can be made of is UnreadableRow, one line naming it."""

    def wrap(build: Callable[[sqlite3.Row], R]) -> Callable[[sqlite3.Row], R]:
        @functools.wraps(build)
        def read(row: sqlite3.Row) -> R:
            try:
                return build(row)
            except READ_FAILURES as exc:
                raise unreadable(kind, key, row, exc) from None

        return read

    return wrap


def first_error(exc: ValidationError, column: str = "") -> str:
    """`column.field: what, found value` for the first of a ValidationError's errors."""
    first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": str(exc)}
    where = ".".join([column, *(str(part) for part in first["loc"])] if column else [str(p) for p in first["loc"]])
    message = str(first["msg"])
    found = f", found {quoted(first['input'], 60)}" if "input" in first else ""
    return f"{where or 'row'}: {message[:1].lower()}{message[1:]}{found}"


def _ts(row: sqlite3.Row, column: str, *, optional: bool = False) -> Any:
    """A time column as a datetime (None where `optional` and empty); ValueError naming the column."""
    text = row[column]
    if text is None and optional:
        return None
    try:
        return parse_ts(text)
    except (ValueError, TypeError):
        raise ValueError(f"{column}: expected a time like 2026-11-22T10:00:00Z, found {quoted(text, 60)}") from None


def _column(model: Any, value: Any, column: str) -> Any:
    """A JSON column's record; ValueError naming the column if the value fits none."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise ValueError(first_error(exc, column)) from None


@reads("task", "id")
def task_from_row(row: sqlite3.Row) -> TaskRecord:
    outcome = loads(row["outcome"])
    evidence = loads(row["evidence_requirements"])
    workflow_ref = None
    if row["workflow_id"] is not None:
        workflow_ref = WorkflowRef(
            workflow_id=row["workflow_id"],
            state_id=row["workflow_state"],
            instance_key=row["workflow_instance_key"],
        )
    return TaskRecord(
        task_id=row["id"],
        task_type=row["task_type"],
        source=row["source"],
        subject=row["subject"],
        description=row["description"],
        priority=row["priority"],
        payload=loads(row["payload"]),
        requested_profile_id=row["requested_profile_id"],
        requested_adapter_id=row["requested_adapter_id"],
        requested_model=row["requested_model"],
        status=row["status"],
        max_attempts=row["max_attempts"],
        attempt_count=row["attempt_count"],
        available_at=_ts(row, "available_at"),
        created_at=_ts(row, "created_at"),
        updated_at=_ts(row, "updated_at"),
        started_at=_ts(row, "started_at", optional=True),
        finished_at=_ts(row, "finished_at", optional=True),
        outcome=_column(TaskOutcome, outcome, "outcome") if outcome is not None else None,
        last_error=row["last_error"],
        skill_ids=loads(row["skill_ids"]),
        evidence_requirements=_column(EvidenceRequirements, evidence, "evidence_requirements") if evidence else None,
        workflow_ref=workflow_ref,
        workflow_iteration=row["workflow_iteration"],
        schedule_id=row["schedule_id"],
        free_attempt_count=row["free_attempt_count"],
        rate_limit_count=row["rate_limit_count"],
        crash_count=row["crash_count"],
        cancel_requested_at=_ts(row, "cancel_requested_at", optional=True),
        awaiting_approval=bool(row["awaiting_approval"]),
        parent_task_id=row["parent_task_id"],
        delegation_depth=row["delegation_depth"],
        root_task_id=row["root_task_id"],
        delegation_caps=loads(row["delegation_caps"]),
    )


@reads("attempt", "attempt_id")
def attempt_from_row(row: sqlite3.Row) -> TaskAttempt:
    try:
        return _attempt(row, loads(row["diagnostics"]))
    except (ValueError, RecursionError):  # pydantic's ValidationError is a ValueError
        return _attempt(row, holdable(row["diagnostics"]))


def _attempt(row: sqlite3.Row, diagnostics: Any) -> TaskAttempt:
    return TaskAttempt(
        attempt_id=row["attempt_id"],
        task_id=row["task_id"],
        attempt_number=row["attempt_number"],
        adapter_id=row["adapter_id"],
        adapter_kind=row["adapter_kind"],
        model=row["model"],
        runner_id=row["runner_id"],
        started_at=_ts(row, "started_at"),
        ended_at=_ts(row, "ended_at", optional=True),
        exit_status=row["exit_status"],
        retry_class=row["retry_class"],
        termination_reason=row["termination_reason"],
        side_effects=row["side_effects"],
        pid=row["pid"],
        bundle_hash=row["bundle_hash"],
        evidence_dir=row["evidence_dir"],
        prompt_path=row["prompt_path"],
        stdout_path=row["stdout_path"],
        stderr_path=row["stderr_path"],
        result_path=row["result_path"],
        last_message_path=row["last_message_path"],
        diagnostics=diagnostics,
        usage=stored_usage({name: row[name] for name in USAGE_COLUMNS}, row["cost_estimated"]),
        evidence_pruned_at=_ts(row, "evidence_pruned_at", optional=True),
    )


USAGE_COLUMNS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd")


@reads("workflow", "id")
def workflow_from_row(row: sqlite3.Row) -> WorkflowRecord:
    return WorkflowRecord(
        workflow_id=row["id"],
        workflow_type=row["workflow_type"],
        instance_key=row["instance_key"],
        current_state=row["current_state"],
        context=loads(row["context"]),
        status=row["status"],
        created_at=_ts(row, "created_at"),
        updated_at=_ts(row, "updated_at"),
        completed_at=_ts(row, "completed_at", optional=True),
        iteration=row["iteration"],
        blocked_reason=row["blocked_reason"],
    )


@reads("schedule", "schedule_id")
def schedule_from_row(row: sqlite3.Row) -> RecurringScheduleRecord:
    return RecurringScheduleRecord(
        schedule_id=row["schedule_id"],
        name=row["name"],
        enabled=bool(row["enabled"]),
        interval_seconds=row["interval_seconds"],
        next_run_at=_ts(row, "next_run_at"),
        last_run_at=_ts(row, "last_run_at", optional=True),
        task=_column(TaskIntent, loads(row["task"]), "task"),
        created_at=_ts(row, "created_at"),
        updated_at=_ts(row, "updated_at"),
        skipped_for_task_id=row["skipped_for_task_id"],
        skipped_slots=row["skipped_slots"],
        skipped_slots_total=row["skipped_slots_total"],
    )


EVENT_BODY_FIELDS = (
    "event_id",
    "type",
    "timestamp",
    "sequence",
    "schema_version",
    "task_id",
    "attempt_id",
    "workflow_id",
    "schedule_id",
    "sensor_id",
)


@reads("event", "sequence")
def event_from_row(row: sqlite3.Row) -> RuntimeEvent:
    try:
        return _event(row, loads(row["payload"]), loads(row["refs"]))
    except (ValueError, RecursionError):  # pydantic's ValidationError is a ValueError
        return _event(row, holdable(row["payload"]), holdable(row["refs"]))


def _event(row: sqlite3.Row, payload: Any, refs: Any) -> RuntimeEvent:
    return RuntimeEvent(
        event_id=row["event_id"],
        type=row["type"],
        timestamp=_ts(row, "timestamp"),
        sequence=row["sequence"],
        schema_version=row["schema_version"],
        task_id=row["task_id"],
        attempt_id=row["attempt_id"],
        workflow_id=row["workflow_id"],
        schedule_id=row["schedule_id"],
        sensor_id=row["sensor_id"],
        payload=payload,
        refs=refs,
        prev_hash=row["prev_hash"],
        hash=row["hash"],
    )


@reads("dispatch lock holder", "holder_id")
def holder_from_row(row: sqlite3.Row) -> LockHolder:
    return LockHolder(
        holder_id=row["holder_id"],
        pid=row["pid"],
        pid_started=row["pid_started"],
        host=row["host"],
        boot_id=row["boot_id"],
        acquired_at=_ts(row, "acquired_at"),
        heartbeat_at=_ts(row, "heartbeat_at"),
    )


UNREADABLE = "unreadable"  # the one key of a stored object that could not be read at all


def holdable(text: str | None) -> dict[str, Any] | None:
    """A stored JSON object as a record can hold it: numbers json reads as Infinity become None, integers
    beyond int64 text, nesting deeper than MAX_DEPTH a placeholder; what is no JSON object at all is
    `{"unreadable": why}`. For rows only an older agentd or an edit can have left like that."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return {UNREADABLE: f"not JSON agentd can read ({type(exc).__name__})"}
    if not isinstance(value, dict):
        return {UNREADABLE: f"expected a JSON object, found {type(value).__name__}"}
    held = _held(value, 0)
    assert isinstance(held, dict)
    return held


def _held(value: Any, depth: int) -> Any:
    """Recursive, but never deeper than MAX_DEPTH: deeper is a placeholder at once."""
    if isinstance(value, dict | list) and depth >= MAX_DEPTH:
        return f"<nested deeper than {MAX_DEPTH} levels>"
    if isinstance(value, dict):
        return {_text(key): _held(child, depth + 1) for key, child in value.items()}
    if isinstance(value, list):
        return [_held(child, depth + 1) for child in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        return str(value)  # json reads no integer longer than str() writes
    return _text(value) if isinstance(value, str) else value


def _text(text: str) -> str:
    """Text without lone surrogates (JSON may escape them; nothing may store them)."""
    return text.encode("utf-8", "replace").decode("utf-8")
