"""Rows to records: every SELECT the store runs comes back through one of these.

A reader never fails on a stored row with a traceback: a JSON column an older agentd (or an edit) left
holding what no record may (a number json reads as Infinity or beyond int64, nesting deeper than agentd
stores) is read as what a record can hold (`holdable`), and usage numbers only where they are believable
(agentd/usage.py). A row that still fits no record (an edit gave a column another shape, or a time that
is not one) is UnreadableRow: one line naming the row and the column. The event chain still names the
edit (`agentd evidence verify`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from agentd.clock import parse_ts
from agentd.edge import INT64_MAX, INT64_MIN, MAX_DEPTH, check_value, cut, quoted
from agentd.errors import UnreadableRow
from agentd.records.event_names import EVENT_TYPES
from agentd.records.stored import (
    EvidenceRequirementsRecord,
    RuntimeEvent,
    TaskAttempt,
    TaskOutcomeRecord,
    TaskRecord,
    WorkflowRefRecord,
)
from agentd.records.work import LockHolder
from agentd.vocabulary import (
    EXIT_STATUSES,
    MACHINE_STATUSES,
    OUTCOME_STATUSES,
    RETRY_CLASSES,
    SIDE_EFFECTS,
    TASK_STATUSES,
)

if TYPE_CHECKING:  # pydantic's, loaded only by the readers of workflows and schedules
    from pydantic import ValidationError

    from agentd.records import RecurringScheduleRecord, WorkflowRecord
from agentd.store.base import loads
from agentd.usage import stored_usage

READ_FAILURES = (ValueError, TypeError, RecursionError)  # pydantic's ValidationError is a ValueError
R = TypeVar("R")


def unreadable(kind: str, key: str, row: sqlite3.Row, exc: BaseException) -> UnreadableRow:
    """The one line for a row of `kind` (named by its `key` column) that no record can be made of."""
    pydantics = callable(getattr(exc, "errors", None))  # a ValidationError: a workflow's or a schedule's row
    what = first_error(cast("ValidationError", exc)) if pydantics else cut(str(exc) or type(exc).__name__, 200)
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


def first_error(exc: ValidationError, column: str = "") -> str:  # pydantic's: what the config and intents raise
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
    from pydantic import ValidationError

    try:
        return model.model_validate(value)
    except ValidationError as exc:
        raise ValueError(first_error(exc, column)) from None


# The checks a stored row's columns pass before a record is made of them: what no record may hold is a
# ValueError in pydantic's words (`column: input should be …, found …`), which `reads` makes one line.


def _bad(column: str, expected: str, value: Any) -> ValueError:
    return ValueError(f"{column}: input should be {expected}, found {quoted(value, 60)}")


def _int(value: Any, column: str, *, optional: bool = False) -> Any:
    if (value is None and optional) or (type(value) is int and INT64_MIN <= value <= INT64_MAX):
        return value
    raise _bad(column, "a valid integer", value)


def _bounded(value: Any, column: str, low: int, high: int) -> int:
    number: int = _int(value, column)
    if not low <= number <= high:
        raise _bad(column, f"between {low} and {high}", value)
    return number


def _str(value: Any, column: str, *, optional: bool = False) -> Any:
    if (value is None and optional) or type(value) is str:
        return value
    raise _bad(column, "a valid string", value)


def _word(value: Any, column: str, words: tuple[str, ...], *, optional: bool = False) -> Any:
    if (value is None and optional) or (type(value) is str and value in words):
        return value
    raise _bad(column, " or ".join(", ".join(repr(w) for w in words).rsplit(", ", 1)), value)


def _object(value: Any, column: str, *, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if type(value) is not dict:
        raise _bad(column, "a valid dictionary", value)
    check_value(value, column)
    return value


def _held_object(text: Any, column: str, *, optional: bool = False) -> Any:
    """A JSON object column read as a record can hold it, never failing: what is not one (or holds what no
    record may) is read as `holdable` makes it."""
    if text is None and optional:
        return None
    try:
        return _object(loads(text), column)
    except (ValueError, TypeError, RecursionError):
        return holdable(text if isinstance(text, str) else json.dumps(text))


def _texts(value: Any, column: str) -> list[str]:
    if type(value) is not list:
        raise _bad(column, "a valid list", value)
    for n, item in enumerate(value):
        _str(item, f"{column}.{n}")
    return value


def _caps(value: Any) -> dict[str, int] | None:
    if value is None:
        return None
    caps: dict[str, int] = _object(value, "delegation_caps")
    for key, number in caps.items():
        _int(number, f"delegation_caps.{key}")
    return caps


def _requirements(value: Any) -> EvidenceRequirementsRecord | None:
    if not value:  # stored as null, or as {} by an intent that asked for nothing
        return None
    fields = _fields(value, "evidence_requirements", EvidenceRequirementsRecord)
    if fields.get("required_artifacts") is not None:
        _texts(fields["required_artifacts"], "evidence_requirements.required_artifacts")
    for name in ("require_file_change_verification", "require_adapter_audit"):
        if fields.get(name) is not None and type(fields[name]) is not bool:
            raise _bad(f"evidence_requirements.{name}", "a valid boolean", fields[name])
    return EvidenceRequirementsRecord(**fields)


def _outcome(value: Any) -> TaskOutcomeRecord | None:
    """The outcome a task stores, as agentd wrote it (judged as a TaskOutcome when it was reported)."""
    if value is None:
        return None
    fields = _fields(value, "outcome", TaskOutcomeRecord)
    for name in ("status", "machine_status", "operator_summary"):
        if name not in fields:
            raise ValueError(f"outcome.{name}: field required")
    _word(fields["status"], "outcome.status", OUTCOME_STATUSES)
    _word(fields["machine_status"], "outcome.machine_status", MACHINE_STATUSES)
    for name in ("operator_summary", "raw_output", "workflow_signal"):
        _str(fields.get(name), f"outcome.{name}", optional=name != "operator_summary")
    for name in ("file_changes", "artifact_paths"):
        if fields.get(name) is not None:
            _texts(fields[name], f"outcome.{name}")
    for name in ("artifact_roles", "constitution_proposal"):
        _object(fields.get(name), f"outcome.{name}", optional=True)
    for name in ("follow_up_tasks", "external_messages"):
        if fields.get(name) is not None:
            if type(fields[name]) is not list:
                raise _bad(f"outcome.{name}", "a valid list", fields[name])
            for n, item in enumerate(fields[name]):
                _object(item, f"outcome.{name}.{n}")
    return TaskOutcomeRecord(**fields)


@functools.cache
def _field_names(record: type) -> frozenset[str]:
    """A record's field names, read once per class (every outcome a read makes asks)."""
    return frozenset(field.name for field in dataclasses.fields(record))


def _fields(value: Any, column: str, record: type) -> dict[str, Any]:
    """A JSON object column's keys, each one `record` has."""
    found: dict[str, Any] = _object(value, column)
    known = _field_names(record)
    for key in found:
        if key not in known:
            raise ValueError(f"{column}.{key}: extra inputs are not permitted")
    return found


@reads("task", "id")
def task_from_row(row: sqlite3.Row) -> TaskRecord:
    workflow_ref = None
    if row["workflow_id"] is not None:
        workflow_ref = WorkflowRefRecord(
            workflow_id=_int(row["workflow_id"], "workflow_id"),
            state_id=_str(row["workflow_state"], "workflow_state"),
            instance_key=_str(row["workflow_instance_key"], "workflow_instance_key"),
        )
    return TaskRecord(
        task_id=_int(row["id"], "id"),
        task_type=_str(row["task_type"], "task_type"),
        source=_str(row["source"], "source"),
        subject=_str(row["subject"], "subject", optional=True),
        description=_str(row["description"], "description", optional=True),
        priority=_bounded(row["priority"], "priority", 1, 10),
        payload=_object(loads(row["payload"]), "payload"),
        requested_profile_id=_str(row["requested_profile_id"], "requested_profile_id"),
        requested_adapter_id=_str(row["requested_adapter_id"], "requested_adapter_id", optional=True),
        requested_model=_str(row["requested_model"], "requested_model", optional=True),
        status=_word(row["status"], "status", TASK_STATUSES),
        max_attempts=_int(row["max_attempts"], "max_attempts"),
        attempt_count=_int(row["attempt_count"], "attempt_count"),
        available_at=_ts(row, "available_at"),
        created_at=_ts(row, "created_at"),
        updated_at=_ts(row, "updated_at"),
        started_at=_ts(row, "started_at", optional=True),
        finished_at=_ts(row, "finished_at", optional=True),
        outcome=_outcome(loads(row["outcome"])),
        last_error=_str(row["last_error"], "last_error", optional=True),
        skill_ids=_texts(loads(row["skill_ids"]), "skill_ids"),
        evidence_requirements=_requirements(loads(row["evidence_requirements"])),
        workflow_ref=workflow_ref,
        workflow_iteration=_int(row["workflow_iteration"], "workflow_iteration", optional=True),
        schedule_id=_str(row["schedule_id"], "schedule_id", optional=True),
        free_attempt_count=_int(row["free_attempt_count"], "free_attempt_count"),
        rate_limit_count=_int(row["rate_limit_count"], "rate_limit_count"),
        crash_count=_int(row["crash_count"], "crash_count"),
        cancel_requested_at=_ts(row, "cancel_requested_at", optional=True),
        awaiting_approval=bool(row["awaiting_approval"]),
        parent_task_id=_int(row["parent_task_id"], "parent_task_id", optional=True),
        delegation_depth=_bounded(row["delegation_depth"], "delegation_depth", 0, INT64_MAX),
        root_task_id=_int(row["root_task_id"], "root_task_id", optional=True),
        delegation_caps=_caps(loads(row["delegation_caps"])),
    )


@reads("attempt", "attempt_id")
def attempt_from_row(row: sqlite3.Row) -> TaskAttempt:
    return TaskAttempt(
        attempt_id=_str(row["attempt_id"], "attempt_id"),
        task_id=_int(row["task_id"], "task_id"),
        attempt_number=_int(row["attempt_number"], "attempt_number"),
        adapter_id=_str(row["adapter_id"], "adapter_id"),
        adapter_kind=_str(row["adapter_kind"], "adapter_kind"),
        model=_str(row["model"], "model", optional=True),
        runner_id=_str(row["runner_id"], "runner_id"),
        started_at=_ts(row, "started_at"),
        ended_at=_ts(row, "ended_at", optional=True),
        exit_status=_word(row["exit_status"], "exit_status", EXIT_STATUSES, optional=True),
        retry_class=_word(row["retry_class"], "retry_class", RETRY_CLASSES, optional=True),
        termination_reason=_str(row["termination_reason"], "termination_reason", optional=True),
        side_effects=_word(row["side_effects"], "side_effects", SIDE_EFFECTS, optional=True),
        pid=_int(row["pid"], "pid", optional=True),
        bundle_hash=_str(row["bundle_hash"], "bundle_hash", optional=True),
        evidence_dir=_str(row["evidence_dir"], "evidence_dir", optional=True),
        prompt_path=_str(row["prompt_path"], "prompt_path", optional=True),
        stdout_path=_str(row["stdout_path"], "stdout_path", optional=True),
        stderr_path=_str(row["stderr_path"], "stderr_path", optional=True),
        result_path=_str(row["result_path"], "result_path", optional=True),
        last_message_path=_str(row["last_message_path"], "last_message_path", optional=True),
        diagnostics=_held_object(row["diagnostics"], "diagnostics", optional=True),
        usage=stored_usage({name: row[name] for name in USAGE_COLUMNS}, row["cost_estimated"]),
        evidence_pruned_at=_ts(row, "evidence_pruned_at", optional=True),
    )


USAGE_COLUMNS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd")


@reads("workflow", "id")
def workflow_from_row(row: sqlite3.Row) -> WorkflowRecord:
    from agentd.records import WorkflowRecord

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
    from agentd.records import RecurringScheduleRecord, TaskIntent

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
    return RuntimeEvent(
        event_id=_str(row["event_id"], "event_id"),
        type=_word(row["type"], "type", EVENT_TYPES),
        timestamp=_ts(row, "timestamp"),
        sequence=_int(row["sequence"], "sequence"),
        schema_version=_int(row["schema_version"], "schema_version"),
        task_id=_int(row["task_id"], "task_id", optional=True),
        attempt_id=_str(row["attempt_id"], "attempt_id", optional=True),
        workflow_id=_int(row["workflow_id"], "workflow_id", optional=True),
        schedule_id=_str(row["schedule_id"], "schedule_id", optional=True),
        sensor_id=_str(row["sensor_id"], "sensor_id", optional=True),
        payload=_held_object(row["payload"], "payload"),
        refs=_held_object(row["refs"], "refs"),
        prev_hash=_str(row["prev_hash"], "prev_hash"),
        hash=_str(row["hash"], "hash"),
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
