"""The outbox (applied after the outcome commit, exactly once), operator controls, and the
memory a bundle draws on: earlier failures of a task and recent outcomes of the agent."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentd.errors import InputError
from agentd.intake import NewTask
from agentd.records import TERMINAL_STATUSES, TaskOutcome, TaskRecord
from agentd.store.attempts import AttemptVerbs
from agentd.store.base import dumps, loads, ts


@dataclass(frozen=True)
class OutboxItem:
    outbox_id: int
    task_id: int
    attempt_id: str
    kind: str
    idempotency_key: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class CancelResult:
    task: TaskRecord
    action: str  # "canceled" (it was waiting) or "requested" (the dispatcher will stop it)


class OutboxVerbs(AttemptVerbs):
    def pending_outbox(self, limit: int = 100) -> list[OutboxItem]:
        rows = self._conn.execute(
            "SELECT * FROM outbox WHERE status = 'pending' ORDER BY id LIMIT ?", (limit,)
        ).fetchall()
        return [
            OutboxItem(r["id"], r["task_id"], r["attempt_id"], r["kind"], r["idempotency_key"], loads(r["payload"]))
            for r in rows
        ]

    def apply_follow_up(self, item: OutboxItem, new: NewTask | None, refusal: str | None, now: datetime) -> int | None:
        """Enqueue a follow-up and mark its outbox row applied, in one transaction; a re-run after a
        crash finds the row applied and does nothing (exactly once). Returns the new task id."""
        with self._transaction():
            if not self._still_pending(item.outbox_id):
                return None
            task_id = None
            if new is not None:
                task_id = self._insert_task(
                    new, now, {"follow_up_of": item.task_id, "outbox_key": item.idempotency_key}
                )
                self._settle(item, "applied", {"task_id": task_id}, now)
            else:
                self._settle(item, "refused", {"reason": refusal}, now)
        return task_id

    def settle_outbox(self, item: OutboxItem, status: str, result: dict[str, Any], now: datetime) -> None:
        """Mark an outbox row applied, refused or awaiting its handler, once."""
        with self._transaction():
            if self._still_pending(item.outbox_id):
                self._settle(item, status, result, now)

    def _still_pending(self, outbox_id: int) -> bool:
        row = self._conn.execute("SELECT status FROM outbox WHERE id = ?", (outbox_id,)).fetchone()
        return row is not None and row[0] == "pending"

    def _settle(self, item: OutboxItem, status: str, result: dict[str, Any], now: datetime) -> None:
        self._conn.execute(
            "UPDATE outbox SET status = ?, result = ?, applied_at = ? WHERE id = ?",
            (status, dumps(result), ts(now), item.outbox_id),
        )
        event = "outbox_refused" if status == "refused" else "outbox_applied"
        self._append_event(
            event,
            now,
            task_id=item.task_id,
            attempt_id=item.attempt_id,
            payload={"kind": item.kind, "key": item.idempotency_key, "status": status, **result},
        )

    def outbox_of(self, task_id: int) -> list[dict[str, Any]]:
        rows = self._conn.execute("SELECT * FROM outbox WHERE task_id = ? ORDER BY id", (task_id,)).fetchall()
        return [
            {
                "kind": r["kind"],
                "key": r["idempotency_key"],
                "status": r["status"],
                "payload": loads(r["payload"]),
                "result": loads(r["result"]),
            }
            for r in rows
        ]

    # --- operator controls ----------------------------------------------------------------------

    def cancel_task(self, task_id: int, now: datetime) -> CancelResult:
        """A waiting task ends operator_canceled now; a running one is flagged for the dispatcher."""
        with self._transaction():
            task = self.get_task_or_raise(task_id)
            if task.status in TERMINAL_STATUSES:
                raise InputError(f"task {task_id} is already {task.status}; there is nothing to cancel")
            if task.status == "running":
                self._conn.execute(
                    """UPDATE tasks SET cancel_requested_at = COALESCE(cancel_requested_at, ?), updated_at = ?
                       WHERE id = ?""",
                    (ts(now), ts(now), task_id),
                )
                self._append_event("task_cancel_requested", now, task_id=task_id)
                return CancelResult(self.get_task_or_raise(task_id), "requested")
            outcome = TaskOutcome(
                status="operator_canceled",
                machine_status="canceled",
                operator_summary="canceled by the operator before it ran",
            )
            self._conn.execute(
                """UPDATE tasks SET status = 'operator_canceled', outcome = ?, finished_at = ?, updated_at = ?
                   WHERE id = ?""",
                (dumps(outcome.model_dump(mode="json", exclude_none=True)), ts(now), ts(now), task_id),
            )
            self._append_event(
                "task_finished",
                now,
                task_id=task_id,
                payload={"status": "operator_canceled", "summary": outcome.operator_summary},
            )
            return CancelResult(self.get_task_or_raise(task_id), "canceled")

    def retry_task(self, task_id: int, more_attempts: int, now: datetime) -> TaskRecord:
        """Re-queue a failed, blocked or canceled task with `more_attempts`; its history stays."""
        with self._transaction():
            task = self.get_task_or_raise(task_id)
            if task.status not in ("permanent_failure", "blocked", "operator_canceled"):
                raise InputError(
                    f"task {task_id} is {task.status}; only permanent_failure, blocked or operator_canceled "
                    "tasks can be retried (a completed task is never re-run)"
                )
            self._conn.execute(
                """UPDATE tasks SET status = 'pending', available_at = ?, updated_at = ?, finished_at = NULL,
                       outcome = NULL, max_attempts = attempt_count - free_attempt_count + ?
                   WHERE id = ?""",
                (ts(now), ts(now), more_attempts, task_id),
            )
            self._append_event(
                "task_requeued",
                now,
                task_id=task_id,
                payload={"from_status": task.status, "more_attempts": more_attempts},
            )
        return self.get_task_or_raise(task_id)

    # --- memory for the bundle ------------------------------------------------------------------

    def failure_summaries(self, task_id: int) -> list[tuple[int, str, str]]:
        """(attempt number, termination reason, summary) of the task's failed attempts."""
        rows = self._conn.execute(
            """SELECT attempt_number, termination_reason, diagnostics FROM task_attempts
               WHERE task_id = ? AND ended_at IS NOT NULL AND retry_class != 'none' ORDER BY attempt_number""",
            (task_id,),
        ).fetchall()
        return [(r[0], r[1] or "error", (loads(r[2]) or {}).get("summary", "")) for r in rows]

    def recent_outcomes(self, limit: int, exclude_task: int) -> list[tuple[int, str, str, str]]:
        """(task id, type, status, summary) of the agent's most recently finished tasks."""
        rows = self._conn.execute(
            """SELECT id, task_type, status, json_extract(outcome, '$.operator_summary') FROM tasks
               WHERE finished_at IS NOT NULL AND id != ? ORDER BY finished_at DESC LIMIT ?""",
            (exclude_task, limit),
        ).fetchall()
        return [(r[0], r[1], r[2], r[3] or "") for r in rows]

    def next_due_at(self, now: datetime) -> datetime | None:
        """When the earliest waiting task becomes claimable (None if none waits)."""
        from agentd.store.base import parse_optional_ts

        waiting = [
            self._conn.execute(  # one index seek per status (tasks_status)
                "SELECT available_at FROM tasks WHERE status = ? AND available_at > ? ORDER BY available_at LIMIT 1",
                (status, ts(now)),
            ).fetchone()
            for status in ("pending", "retryable_failure")
        ]
        return parse_optional_ts(min((row[0] for row in waiting if row), default=None))

    def report_service_status(
        self, service: str, pid: int, status: str, metrics_url: str | None, started_at: datetime, now: datetime
    ) -> None:
        """A running service's status line (not an event: it changes every few seconds)."""
        with self._transaction():
            self._conn.execute(
                """INSERT INTO service_status (service, pid, status, metrics_url, started_at, updated_at)
                   VALUES (?, ?, ?, ?, ?, ?)
                   ON CONFLICT (service) DO UPDATE SET pid = excluded.pid, status = excluded.status,
                       metrics_url = excluded.metrics_url, started_at = excluded.started_at,
                       updated_at = excluded.updated_at""",
                (service, pid, status, metrics_url, ts(started_at), ts(now)),
            )

    def waiting_count(self, now: datetime) -> int:
        """Tasks claimable now (pending or retrying and due)."""
        row = self._conn.execute(
            """SELECT (SELECT COUNT(*) FROM tasks WHERE status = 'pending' AND available_at <= :now)
                    + (SELECT COUNT(*) FROM tasks WHERE status = 'retryable_failure' AND available_at <= :now)""",
            {"now": ts(now)},
        ).fetchone()
        return int(row[0])

    def service_statuses(self) -> list[dict[str, Any]]:
        rows = self._conn.execute("SELECT * FROM service_status ORDER BY service").fetchall()
        return [dict(row) for row in rows]

    def last_successful_attempt_at(self) -> datetime | None:
        from agentd.store.base import parse_optional_ts

        row = self._conn.execute(
            """SELECT ended_at FROM task_attempts WHERE ended_at IS NOT NULL AND retry_class = 'none'
                   AND exit_status = 'ok' ORDER BY ended_at DESC LIMIT 1"""
        ).fetchone()
        return parse_optional_ts(row[0] if row else None)

    def record_event(self, event_type: str, now: datetime, payload: dict[str, Any] | None = None) -> None:
        """A service-level event with no other state change (dispatch_started, dispatch_idle, …)."""
        with self._transaction():
            self._append_event(event_type, now, payload=payload)
