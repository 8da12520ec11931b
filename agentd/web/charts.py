"""The numbers behind the console's charts (docs/web.md, "Charts"), from the tasks and attempts in the
database, within a window: the queue (waiting and running) each hour of the last QUEUE_HOURS, the
outcomes per hour of the last QUEUE_HOURS, both again per minute of the last hour, the cost per day of
the last COST_DAYS by adapter. Plain JSON, so `GET /api/charts` returns it as it is and the page draws it
(agentd/web/svg.py)."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from markupsafe import Markup

from agentd.clock import format_ts
from agentd.store import Store
from agentd.web.svg import LOOKS, Series, bar_chart, line_chart

QUEUE_HOURS = 48
LAST_HOUR_MINUTES = 60  # the minute charts beside the hourly ones: a first hour is not one flat point
COST_DAYS = 14
SPANS_READ = 100_000  # tasks (and attempts) read for the queue chart; more and the chart says it was cut
# The statuses an outcome chart shows, in an operator's words (agentd/store/charts.py ENDED_STATUSES).
OUTCOME_WORDS = {
    "completed": "completed",
    "permanent_failure": "failed",
    "blocked": "blocked",
    "operator_canceled": "canceled",
}
OTHER = "other adapters"


def hours_back(now: datetime, count: int) -> list[datetime]:
    """The starts of the last `count` hours, the current one last (UTC)."""
    hour = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return [hour - timedelta(hours=count - 1 - i) for i in range(count)]


def days_back(now: datetime, count: int) -> list[datetime]:
    """The starts of the last `count` days, today last (UTC)."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return [day - timedelta(days=count - 1 - i) for i in range(count)]


def open_at(spans: Sequence[tuple[str, str | None]], moments: Sequence[str]) -> list[int]:
    """How many spans (start, end or None while open; stored time text) are open at each moment: started
    at or before it and not ended by it. One sort and a bisection per moment, not a pass per moment."""
    starts = sorted(start for start, _ in spans)
    ends = sorted(end for _, end in spans if end is not None)
    return [bisect_right(starts, m) - bisect_right(ends, m) for m in moments]


def queue_numbers(
    tasks: Sequence[tuple[str, str | None]], attempts: Sequence[tuple[str, str | None]], moments: Sequence[str]
) -> dict[str, list[int]]:
    """Waiting (a task enqueued, not finished, no attempt of it running: due, held or waiting for a
    retry or approval) and running (an attempt open) at each moment."""
    running = open_at(attempts, moments)
    waiting = [max(0, unfinished - busy) for unfinished, busy in zip(open_at(tasks, moments), running, strict=True)]
    return {"waiting": waiting, "running": running}


def minutes_back(now: datetime, count: int) -> list[datetime]:
    """The starts of the last `count` minutes, the current one last (UTC)."""
    minute = now.astimezone(UTC).replace(second=0, microsecond=0)
    return [minute - timedelta(minutes=count - 1 - i) for i in range(count)]


def queue_chart(store: Store, now: datetime, *, by_minute: bool = False) -> dict[str, Any]:
    """The queue at the start of each of the last QUEUE_HOURS hours (or LAST_HOUR_MINUTES minutes), and now."""
    starts = minutes_back(now, LAST_HOUR_MINUTES) if by_minute else hours_back(now, QUEUE_HOURS)
    moments = [*(format_ts(h) for h in starts[1:]), format_ts(now)]
    tasks = store.task_spans(starts[0], now, SPANS_READ)
    attempts = store.attempt_spans(starts[0], now, SPANS_READ)
    labels = [*(h.strftime("%H:%M" if by_minute else "%d %H:00") for h in starts[1:]), "now"]
    cut = len(tasks) >= SPANS_READ or len(attempts) >= SPANS_READ
    window = f"{LAST_HOUR_MINUTES} minutes" if by_minute else f"{QUEUE_HOURS} hours"
    return {"window": window, "moments": moments, "labels": labels, "cut": cut} | queue_numbers(
        tasks, attempts, moments
    )


def outcomes_chart(store: Store, now: datetime, *, by_minute: bool = False) -> dict[str, Any]:
    """The tasks that ended in each of the last QUEUE_HOURS hours (or LAST_HOUR_MINUTES minutes), by outcome."""
    if by_minute:
        starts, key_format, label_format = minutes_back(now, LAST_HOUR_MINUTES), "%Y-%m-%dT%H:%M", "%H:%M"
        rows, window, slots = store.outcomes_per_minute(starts[0]), f"{LAST_HOUR_MINUTES} minutes", "minutes"
    else:
        starts, key_format, label_format = hours_back(now, QUEUE_HOURS), "%Y-%m-%dT%H", "%d %H:00"
        rows, window, slots = store.outcomes_per_hour(starts[0]), f"{QUEUE_HOURS} hours", "hours"
    keys = [h.strftime(key_format) for h in starts]
    counts = {(slot, status): n for slot, status, n in rows}
    series = {word: [counts.get((key, status), 0) for key in keys] for status, word in OUTCOME_WORDS.items()}
    labels = [h.strftime(label_format) for h in starts]
    return {"window": window, slots: [format_ts(h) for h in starts], "labels": labels, "series": series}


def cost_chart(store: Store, now: datetime) -> dict[str, Any]:
    """What the attempts that ended each of the last COST_DAYS days cost, by adapter: the adapters that
    cost most each a series, the rest one (a chart tells at most len(LOOKS) series apart)."""
    starts = days_back(now, COST_DAYS)
    keys = [d.strftime("%Y-%m-%d") for d in starts]
    column = {key: i for i, key in enumerate(keys)}
    rows = [row for row in store.cost_per_day(starts[0]) if row[0] in column]  # not a day after today
    shown = top_adapters(rows, len(LOOKS) - 1)
    series: dict[str, list[float]] = {name: [0.0] * len(keys) for name in shown}
    for day, adapter, cost, _ in rows:
        name = adapter if adapter in shown else OTHER
        series.setdefault(name, [0.0] * len(keys))[column[day]] += cost
    estimated = any(row[3] for row in rows)
    labels = [d.strftime("%b %d") for d in starts]
    return {"window": f"{COST_DAYS} days", "days": keys, "labels": labels, "series": series, "estimated": estimated}


def top_adapters(rows: Sequence[tuple[str, str, float, bool]], count: int) -> list[str]:
    """The `count` adapters that cost most over the rows (by name on a tie), or all when they are no
    more than count + 1 (then no series is "other")."""
    totals: dict[str, float] = {}
    for _, adapter, cost, _ in rows:
        totals[adapter] = totals.get(adapter, 0.0) + cost
    ranked = sorted(totals, key=lambda name: (-totals[name], name))
    return ranked if len(ranked) <= count + 1 else ranked[:count]


def charts_view(store: Store, now: datetime) -> dict[str, Any]:
    """What `GET /api/charts` returns and the charts page draws."""
    return {
        "generated_at": format_ts(now),
        "queue": queue_chart(store, now),
        "outcomes": outcomes_chart(store, now),
        "cost": cost_chart(store, now),
        "queue_minutes": queue_chart(store, now, by_minute=True),
        "outcomes_minutes": outcomes_chart(store, now, by_minute=True),
    }


def drawn(view: dict[str, Any]) -> dict[str, Markup]:
    """The three charts as SVG, from charts_view's numbers."""
    queue, outcomes, cost = view["queue"], view["outcomes"], view["cost"]
    return {
        "queue": line_chart(
            "queue",
            "Tasks waiting and running",
            queue["labels"],
            [Series(n, tuple(queue[n])) for n in ("waiting", "running")],
        ),
        "outcomes": bar_chart(
            "outcomes", "Tasks ended per hour, by outcome", outcomes["labels"], _series(outcomes["series"])
        ),
        "cost": bar_chart("cost", "Cost per day, by adapter (USD)", cost["labels"], _series(cost["series"]), unit="$"),
        "queue_minutes": line_chart(
            "queue-minutes",
            "Tasks waiting and running, the last hour by minute",
            view["queue_minutes"]["labels"],
            [Series(n, tuple(view["queue_minutes"][n])) for n in ("waiting", "running")],
        ),
        "outcomes_minutes": bar_chart(
            "outcomes-minutes",
            "Tasks ended per minute, the last hour",
            view["outcomes_minutes"]["labels"],
            _series(view["outcomes_minutes"]["series"]),
        ),
    }


def _series(named: dict[str, list[float]]) -> list[Series]:
    return [Series(name, tuple(values)) for name, values in named.items()]
