"""The console's events page (docs/web.md, "Events"): newest first, filtered by type, task and time, paged
both ways by sequence cursors, a bounded page, and the migrations a fresh agent starts with folded into
one line. The query's parsing and the folding are pure; the page reads one store verb."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from agentd import frozen_value
from agentd.clock import moment_at as typed_moment
from agentd.edge import INT64_MAX
from agentd.web import inputs
from agentd.web.inputs import BadInput

PAGE_SIZE = 50  # events a page shows unless asked for another size
PAGE_MAX = 200  # the most one page shows
TYPES_MAX = 20  # event types one filter names
WHEN_CHARS = 64
FOLDED = "migration_applied"


@frozen_value
class EventQuery:
    """What the events page was asked for: a cursor (at most one of before/after) and the filters."""

    before: int | None
    after: int | None
    task_id: int | None
    types: tuple[str, ...]
    since: datetime | None
    until: datetime | None
    limit: int

    def filters(self) -> dict[str, str]:
        """The filters as the page's query string holds them (its links keep them)."""
        found = {
            "type": ",".join(self.types),
            "task_id": "" if self.task_id is None else str(self.task_id),
            "since": "" if self.since is None else _iso(self.since),
            "until": "" if self.until is None else _iso(self.until),
            "limit": "" if self.limit == PAGE_SIZE else str(self.limit),
        }
        return {key: value for key, value in found.items() if value}

    def link(self, **cursor: int) -> str:
        return "/events?" + urlencode(self.filters() | {key: str(value) for key, value in cursor.items()})


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def moment_at(text: str, now: datetime, where: str) -> datetime:
    """A time an operator typed, in the grammar of `agentd events --since` (agentd/clock.py `moment_at`)."""
    text = text.strip()
    if len(text) > WHEN_CHARS:
        raise BadInput(422, f"{len(text)} characters", where, f"at most {WHEN_CHARS}")
    try:
        return typed_moment(text, now)
    except ValueError:
        raise BadInput(
            422, f"found {text[:40]!r}", where, "a UTC time like 2026-11-23T10:00:00Z or an age like 30m, 2h, 7d"
        ) from None


def event_types(values: Sequence[str]) -> tuple[str, ...]:
    """Event types from the query: repeated, or comma-separated in one field; each of a type's shape."""
    found: list[str] = []
    for value in values:
        found += [part.strip() for part in value.split(",") if part.strip()]
    if len(found) > TYPES_MAX:
        raise BadInput(422, f"{len(found)} types", "query.type", f"at most {TYPES_MAX}")
    return tuple(dict.fromkeys(inputs.event_type(t, "query.type") for t in found))


def event_query(query: Mapping[str, str], types: Sequence[str], now: datetime) -> EventQuery:
    """The page's query, or a 422 naming the field that is wrong."""

    def whole(name: str, low: int, high: int) -> int | None:
        value = query.get(name) or None
        return None if value is None else inputs.integer(value, f"query.{name}", low=low, high=high)

    before, after = whole("before", 1, INT64_MAX), whole("after", 0, INT64_MAX)
    if before is not None and after is not None:
        raise BadInput(422, "both before and after", "query.before", "one cursor: before (older) or after (newer)")
    since = moment_at(query["since"], now, "query.since") if query.get("since") else None
    until = moment_at(query["until"], now, "query.until") if query.get("until") else None
    if since is not None and until is not None and until <= since:
        raise BadInput(422, "until is not after since", "query.until", "a time after since")
    limit = whole("limit", 1, PAGE_MAX) or PAGE_SIZE
    return EventQuery(before, after, whole("task_id", 1, INT64_MAX), event_types(types), since, until, limit)


def fold_migrations(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows as shown, each run of migration_applied rows one row saying how many (and which versions)."""
    shown: list[dict[str, Any]] = []
    for row in rows:
        last = shown[-1] if shown else None
        if row["type"] != FOLDED:
            shown.append(row)
        elif last is not None and last.get("folded"):
            last["folded"] += 1
            last["first_sequence"] = row["sequence"]
            last["low"] = row["payload"].get("version", last["low"])
        else:
            version = row["payload"].get("version")
            shown.append(row | {"folded": 1, "first_sequence": row["sequence"], "high": version, "low": version})
    for row in shown:
        if row.get("folded"):
            low, high = row.pop("low"), row.pop("high")
            row["versions"] = "" if low is None else (f"version {low}" if low == high else f"versions {low}–{high}")
    return shown


def page_of(rows: list[dict[str, Any]], query: EventQuery) -> dict[str, Any]:
    """The page from `limit + 1` rows read newest first: the rows shown, folded, and its links."""
    forward = query.after is not None
    more = len(rows) > query.limit
    rows = (rows[1:] if forward else rows[:-1]) if more else rows
    newer = (more if forward else query.before is not None) and bool(rows)
    older = (query.after != 0 if forward else more) and bool(rows)
    return {
        "events": fold_migrations(rows),
        "newer": query.link(after=rows[0]["sequence"]) if newer else None,
        "older": query.link(before=rows[-1]["sequence"]) if older else None,
        "newest": "/events?" + urlencode(query.filters()),
        "filters": query.filters(),
    }
