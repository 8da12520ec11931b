"""`agentd events` without pydantic: each row only if a RuntimeEvent would hold it exactly as stored, else
the whole command is the full path's (agentd/cli/fast/commands.py says how the fast paths hand over)."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from agentd import frozen_value
from agentd.cli.common import option
from agentd.cli.fast.commands import plain_reader
from agentd.clock import format_ts, stored_ts
from agentd.edge import Refused, check_value

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
            "event_id": self.event_id,
            "type": self.type,
            "timestamp": format_ts(self.timestamp),
            "sequence": self.sequence,
            "schema_version": self.schema_version,
            "task_id": self.task_id,
            "attempt_id": self.attempt_id,
            "workflow_id": self.workflow_id,
            "schedule_id": self.schedule_id,
            "sensor_id": self.sensor_id,
            "payload": self.payload,
            "refs": self.refs,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }
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
        read = order_of(args)
        found = event_rows(
            store,
            after=args.after or 0,
            task_id=args.task,
            types=tuple(args.types),
            since=args.since,
            limit=limit,
            last=args.last is not None,
            before=option(args, "before"),
            until=option(args, "until"),
            newest_first=read.newest,
        )
    found = found[::-1] if read.newest and not read.shown_newest_first else found
    plain = [plain_event(row) for row in found]
    return None if any(event is None for event in plain) else plain  # type: ignore[return-value]


@frozen_value
class Order:
    """How `agentd events` reads and prints (docs/operate.md, "Commands"): `newest` reads the newest
    --limit (before --before), `shown_newest_first` prints them newest first."""

    newest: bool
    shown_newest_first: bool


def order_of(args: argparse.Namespace) -> Order:
    """Text for a person lists the newest first; reading forward (--after, --last, --follow,
    --oldest-first) and the machine formats (--json, agent-runtime) keep the log's order, as they did.
    --before pages back in either: the newest --limit before it, printed in the format's order."""
    text = option(args, "format") in (None, "text") and not option(args, "json", False)
    forward = option(args, "follow") or args.after is not None or args.last is not None
    oldest_first = forward or bool(option(args, "oldest_first"))
    newest = option(args, "before") is not None or (text and not oldest_first)
    return Order(newest, newest and text and not oldest_first)


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
    payload, refs = stored_object(row["payload"]), stored_object(row["refs"])
    if payload is None or refs is None or type(row["timestamp"]) is not str:
        return None
    try:
        timestamp = stored_ts(row["timestamp"])
    except ValueError:
        return None
    ids = {name: row[name] for name, _ in _OPTIONAL_IDS}
    hashes = {"event_id": row["event_id"], "prev_hash": row["prev_hash"], "hash": row["hash"]}
    return PlainEvent(
        row["sequence"],
        timestamp,
        row["type"],
        payload=payload,
        schema_version=row["schema_version"],
        refs=refs,
        **ids,
        **hashes,
    )


def stored_object(text: Any) -> dict[str, Any] | None:
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
