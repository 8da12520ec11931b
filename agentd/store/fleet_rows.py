"""A fleet row as agentd reads it (docs/fleet.md, "Poison in a row"): what every read of one selects, and
the row judged column by column.

Anyone with the DSN can write a row, so nothing in one may make a read raise. A claim commits before its
rows are read: when psycopg's own decoders raised on a row (JSON 3,000 levels deep, a 5,000-digit number,
a time of 'infinity'), every row of that claim stayed leased, none admitted or refused, and each was
claimed again every lease_s, forever. So psycopg decodes only integers, text cut short and times within
Python's years; the JSON comes as text, at most JSON_READ_CHARS of it, and agentd's bounded loader
(agentd/edge.py `loads`) judges it here, row by row. What cannot be held is None, and why is in
`unreadable`: the intake refuses that row with the reason (agentd/services/fleet.py), and the rest of its
claim goes on.
"""

from __future__ import annotations

from dataclasses import field
from datetime import datetime
from typing import Any

from agentd import frozen_value
from agentd.edge import MAX_KEY_CHARS, MAX_PAYLOAD_BYTES, MAX_SUBJECT_CHARS, Refused, json_kind, loads

NAMES = (
    "id",
    "idempotency_key",
    "task_type",
    "subject",
    "payload",
    "labels",
    "priority",
    "origin",
    "status",
    "lease_agent",
    "lease_token",
    "lease_expires_at",
    "claims",
    "result",
    "created_at",
    "updated_at",
    "finished_at",
)
JSON_COLUMNS = ("payload", "origin", "result")
TIME_COLUMNS = ("lease_expires_at", "created_at", "updated_at", "finished_at")
# Text no judge needs whole: cut one past what a task may hold, so the judge still sees it is too long.
TEXT_CAPS = {
    "subject": MAX_SUBJECT_CHARS + 1,
    "idempotency_key": MAX_KEY_CHARS + 1,
    "task_type": MAX_KEY_CHARS + 1,
    "lease_agent": MAX_KEY_CHARS + 1,
    "type": MAX_KEY_CHARS + 1,
    "agent": MAX_KEY_CHARS + 1,
}
# PostgreSQL prints JSON with a space after each `:` and `,`, at most 1.5 times its compact length: text
# longer than this is past MAX_PAYLOAD_BYTES whatever it holds, and is refused unparsed.
JSON_READ_CHARS = 2 * MAX_PAYLOAD_BYTES
# Python's datetime holds years 1 to 9999; a day's margin either side for the session's time zone.
TIME_RANGE = "'0001-01-02' AND '9999-12-30'"


def read_as(column: str) -> str:
    """The SQL that reads `column` as agentd judges it: JSON as text cut at JSON_READ_CHARS + 1, text cut
    at its cap, a time outside Python's years as NULL."""
    if column in JSON_COLUMNS or column == "detail":
        return f"left({column}::text, {JSON_READ_CHARS + 1}) AS {column}"
    if column in TIME_COLUMNS or column == "at":
        return f"CASE WHEN {column} BETWEEN {TIME_RANGE} THEN {column} END AS {column}"
    if column in TEXT_CAPS:
        return f"left({column}, {TEXT_CAPS[column]}) AS {column}"
    return column


COLUMNS = ", ".join(read_as(name) for name in NAMES)


def judged_object(text: str | None, column: str) -> tuple[dict[str, Any] | None, str | None]:
    """A JSON column's text as a JSON object agentd can hold, or (None, why not). Never raises."""
    if text is None:
        return None, None
    if len(text) > JSON_READ_CHARS:
        too_long = f"over {JSON_READ_CHARS:,} characters of JSON, past the {MAX_PAYLOAD_BYTES:,} bytes it may hold"
        return None, f"{column}: {too_long}"
    try:
        value = loads(text, column)
    except Refused as exc:
        return None, str(exc)
    if not isinstance(value, dict):
        return None, f"{column}: expected a JSON object, found {json_kind(value)}"
    return value, None


@frozen_value
class FleetTask:
    """A row of fleet_tasks, as read (COLUMNS). A JSON column agentd cannot hold is None, and
    `unreadable` says why (column → reason); a time outside Python's years is None."""

    fleet_id: int
    idempotency_key: str | None
    task_type: str
    subject: str | None
    payload: dict[str, Any] | None
    labels: list[str]
    priority: int
    origin: dict[str, Any] | None
    status: str
    lease_agent: str | None
    lease_token: int | None
    lease_expires_at: datetime | None
    claims: int
    result: dict[str, Any] | None
    created_at: datetime | None
    updated_at: datetime | None
    finished_at: datetime | None
    unreadable: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, row: dict[str, Any]) -> FleetTask:
        """The row as read, its JSON judged column by column; never raises, whatever the row holds."""
        unreadable = {}
        for column in JSON_COLUMNS:
            row[column], problem = judged_object(row[column], column)
            if problem is not None:
                unreadable[column] = problem
        return cls(row.pop("id"), **row, unreadable=unreadable)

    def as_dict(self) -> dict[str, Any]:
        return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in self.__dict__.items()}


@frozen_value
class Lease:
    """What a claim gives an agent: the task, and the token every later write must carry."""

    task: FleetTask
    token: int


def event_of(row: dict[str, Any]) -> dict[str, Any]:
    """A fleet_events row as read: `at` as ISO-8601 text (None outside Python's years), its detail judged
    as FleetTask.of judges a row's JSON (None, and why in `unreadable`, where agentd cannot hold it)."""
    detail, problem = judged_object(row["detail"], "detail")
    at = row["at"].isoformat() if row["at"] is not None else None
    return {**row, "detail": detail, "at": at, **({"unreadable": problem} if problem else {})}
