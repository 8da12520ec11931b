"""What the runtime knows of some tasks now beside their own rows, read as plain values without the records
(pydantic): their pauses, links, open attempts' newest activity, tool calls held for a person, the provider
resets they wait for, and the services' lines. agentd/outlook/states.py makes a task's state of them on every
path (issue 52); the store's verbs (store/steering.py) return the same."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentd import frozen_value
from agentd.clock import format_ts, stored_ts
from agentd.records.event_names import LIVE_EVENT_TYPES
from agentd.store.base import ts
from agentd.store.columns import RESTS_ON


@frozen_value
class TaskPause:
    task_id: int
    paused_at: datetime
    paused_by: str
    reason: str | None

    def describe(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        return f"paused since {format_ts(self.paused_at)} by {self.paused_by}{why}"


@frozen_value
class TaskLink:
    """`after_id` is claimed only once `before_id` has completed (`before_status` is what it is now)."""

    after_id: int
    before_id: int
    before_status: str
    created_at: datetime
    created_by: str


@frozen_value
class CallWait:
    """A tool call an open attempt holds for a person (store/calls.py; docs/policy.md, "Asking a person")."""

    call_id: str
    task_id: int
    tool: str
    summary: str
    requested_at: datetime


@frozen_value
class ResetWait:
    """The provider's reset a waiting task's credential rests until (docs/gateway.md, "Quotas and resets")."""

    task_id: int
    until: datetime
    reason: str


def pauses_of(tx: Any, task_ids: list[int]) -> dict[int, TaskPause]:
    """Each paused task of these → its pause (store/steering.py `pauses_of` too)."""
    sql = "SELECT task_id, paused_at, paused_by, reason FROM task_pauses WHERE task_id IN ({marks})"
    rows = tx.rows_in(sql, task_ids)
    return {r[0]: TaskPause(r[0], stored_ts(r[1]), r[2], r[3]) for r in rows}


def links_of(tx: Any, task_ids: list[int]) -> list[TaskLink]:
    """Every link in which one of these tasks waits or is waited for, in (after, before) order."""
    found = {
        tuple(row)
        for side in ("after_id", "before_id")
        for row in tx.rows_in(
            f"""SELECT l.after_id, l.before_id, b.status, l.created_at, l.created_by FROM task_links l
                JOIN tasks b ON b.id = l.before_id WHERE l.{side} IN ({{marks}})""",
            task_ids,
        )
    }
    return [TaskLink(r[0], r[1], r[2], stored_ts(r[3]), r[4]) for r in sorted(found)]


def activity_times(tx: Any, task_ids: list[int]) -> dict[str, datetime]:
    """Each open attempt of these tasks → when its harness last reported (docs/live.md), if it has:
    one walk back along the task's events (events_task), for the running tasks only."""
    found: dict[str, datetime] = {}
    kinds = ", ".join(f"'{kind}'" for kind in LIVE_EVENT_TYPES)
    for row in tx.rows_in(
        "SELECT task_id, attempt_id FROM task_attempts WHERE ended_at IS NULL AND task_id IN ({marks})", task_ids
    ):
        seen = tx.execute(
            f"""SELECT timestamp FROM events WHERE task_id = ? AND attempt_id = ? AND type IN ({kinds})
                ORDER BY sequence DESC LIMIT 1""",
            (row[0], row[1]),
        ).fetchone()
        if seen is not None:
            found[row[1]] = stored_ts(seen[0])
    return found


def calls_held(tx: Any, task_ids: list[int]) -> dict[str, CallWait]:
    """Each attempt of these tasks holding a tool call for a person → the oldest such call."""
    rows = tx.rows_in(
        """SELECT call_id, task_id, attempt_id, tool, summary, requested_at FROM held_calls
           WHERE status = 'pending' AND task_id IN ({marks}) ORDER BY requested_at DESC, rowid DESC""",
        task_ids,
    )
    return {r[2]: CallWait(r[0], r[1], r[3], r[4], stored_ts(r[5])) for r in rows}  # the oldest written last


def resets_waited(tx: Any, task_ids: list[int], now: datetime) -> dict[int, ResetWait]:
    """Each waiting task of these whose credential rests → the latest reset it waits for (the claim leaves it
    out until then: store/resets.py RESTING)."""
    rows = tx.rows_in(
        f"""SELECT tasks.id, r.until, r.reason FROM tasks JOIN provider_resets r ON r.until > ? AND ({RESTS_ON})
            WHERE tasks.status IN ('pending', 'retryable_failure') AND tasks.id IN ({{marks}}) ORDER BY r.until""",
        task_ids,
        ts(now),
    )
    return {r[0]: ResetWait(r[0], stored_ts(r[1]), r[2]) for r in rows}  # the latest written last


def service_rows(tx: Any) -> list[dict[str, Any]]:
    """The services' own lines (store/status.py `service_statuses`)."""
    return [dict(row) for row in tx.execute("SELECT * FROM service_status ORDER BY service").fetchall()]
