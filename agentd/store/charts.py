"""The console's charts' reads (docs/web.md, "Charts"): tasks and attempts open within a window, the
outcomes per hour and the cost per day per adapter. Each read is bounded: a window, and a row limit
where the rows are not already grouped."""

from __future__ import annotations

from datetime import datetime

from agentd.store.base import StoreBase, ts
from agentd.store.budget import BELIEVED_COST

# The task statuses an outcome chart counts: the terminal ones (a retryable failure goes back to pending).
ENDED_STATUSES = ("completed", "permanent_failure", "blocked", "operator_canceled")
HOUR_CHARS, MINUTE_CHARS = 13, 16  # of a stored time: `YYYY-MM-DDTHH`, `YYYY-MM-DDTHH:MM`
Span = tuple[str, str | None]  # start and end as stored (fixed-width text: text order is time order)


class ChartVerbs(StoreBase):
    def task_spans(self, since: datetime, until: datetime, limit: int) -> list[Span]:
        """(created_at, finished_at) of the tasks open at some moment from `since` to `until`, the newest
        first, at most `limit` of them (the caller says the chart was cut when it gets `limit`)."""
        return self._spans("tasks", "created_at", "finished_at", since, until, limit)

    def attempt_spans(self, since: datetime, until: datetime, limit: int) -> list[Span]:
        """(started_at, ended_at) of the attempts running at some moment from `since` to `until`, as
        task_spans."""
        return self._spans("task_attempts", "started_at", "ended_at", since, until, limit)

    def _spans(self, table: str, start: str, end: str, since: datetime, until: datetime, limit: int) -> list[Span]:
        """(start, end) of `table`'s rows open at some moment of the window: two indexed reads, the open rows
        (migration 0020) and those that ended inside it, never a scan of all. Names are this module's own."""
        rows = self.tx.execute(
            f"""SELECT {start}, {end} FROM (
                    SELECT {start}, {end} FROM {table} WHERE {end} IS NULL AND {start} <= :until
                    UNION ALL
                    SELECT {start}, {end} FROM {table} WHERE {end} >= :since AND {start} <= :until)
                ORDER BY {start} DESC LIMIT :limit""",
            {"until": ts(until), "since": ts(since), "limit": limit},
        ).fetchall()
        return [(row[0], row[1]) for row in rows]

    def outcomes_per_hour(self, since: datetime) -> list[tuple[str, str, int]]:
        """(hour as `YYYY-MM-DDTHH`, status, tasks) of the tasks that ended since `since`."""
        return self._outcomes_per(since, HOUR_CHARS)

    def outcomes_per_minute(self, since: datetime) -> list[tuple[str, str, int]]:
        """(minute as `YYYY-MM-DDTHH:MM`, status, tasks) of the tasks that ended since `since`."""
        return self._outcomes_per(since, MINUTE_CHARS)

    def _outcomes_per(self, since: datetime, chars: int) -> list[tuple[str, str, int]]:
        """Ended tasks grouped by the first `chars` of their stored end (fixed-width text: an hour, a minute)."""
        marks = ", ".join("?" for _ in ENDED_STATUSES)
        rows = self.tx.execute(
            f"""SELECT substr(finished_at, 1, ?) AS slot, status, COUNT(*) FROM tasks
                WHERE finished_at >= ? AND status IN ({marks}) GROUP BY slot, status""",
            (chars, ts(since), *ENDED_STATUSES),
        ).fetchall()
        return [(row[0], row[1], int(row[2])) for row in rows]

    def cost_per_day(self, since: datetime) -> list[tuple[str, str, float, bool]]:
        """(day as `YYYY-MM-DD`, adapter, cost in USD, whether any of it is estimated) of the attempts
        that ended since `since`, counting only a cost `agentd cost` believes (store/budget.py)."""
        rows = self.tx.execute(
            f"""SELECT day, adapter_id, TOTAL(cost), MAX(cost_estimated = 1) FROM (
                    SELECT substr(ended_at, 1, 10) AS day, adapter_id, {BELIEVED_COST} AS cost, cost_estimated
                    FROM task_attempts WHERE ended_at IS NOT NULL AND ended_at >= ?)
                WHERE cost IS NOT NULL GROUP BY day, adapter_id""",
            (ts(since),),
        ).fetchall()
        return [(row[0], row[1], float(row[2]), bool(row[3])) for row in rows]
