"""Tasks: enqueue, read, the operator's cancel and retry, and the queue's shape over time.

`read_task` and `insert_task` are shared by every concept that reads or makes tasks (attempts,
the outbox, workflows, schedules, sensing): they take the store and run inside its transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentd.errors import InputError, NotFound
from agentd.records import TERMINAL_STATUSES, CancelResult, NewTask, QueueSummary, TaskOutcome, TaskRecord
from agentd.store.approvals import never_approved, request_approval
from agentd.store.base import StoreBase, dumps, parse_optional_ts, ts
from agentd.store.rows import TASK_COLUMNS, TASK_FROM, task_from_row

WAITING = ("pending", "retryable_failure")


def read_task(store: StoreBase, task_id: int) -> TaskRecord | None:
    row = store._conn.execute(f"SELECT {TASK_COLUMNS} FROM {TASK_FROM} WHERE t.id = ?", (task_id,)).fetchone()
    return None if row is None else task_from_row(row)


def read_task_or_raise(store: StoreBase, task_id: int) -> TaskRecord:
    task = read_task(store, task_id)
    if task is None:
        raise NotFound(f"task {task_id} does not exist; `agentd task list` shows the queue")
    return task


def insert_task(store: StoreBase, new: NewTask, now: datetime, event_payload: dict[str, Any] | None = None) -> int:
    """The INSERT and its task_enqueued event; the caller holds the transaction."""
    workflow = new.workflow_ref
    cursor = store._conn.execute(
        """INSERT INTO tasks (task_type, source, subject, description, priority, payload,
               requested_profile_id, requested_adapter_id, requested_model, skill_ids,
               evidence_requirements, workflow_id, workflow_state, workflow_iteration,
               schedule_id, max_attempts, available_at, created_at, updated_at, parent_task_id, delegation_depth,
               root_task_id, delegation_caps)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        (
            new.task_type,
            new.source,
            new.subject,
            new.description,
            new.priority,
            dumps(new.payload),
            new.requested_profile_id,
            new.requested_adapter_id,
            new.requested_model,
            dumps(list(new.skill_ids)),
            dumps(new.evidence_requirements.model_dump(exclude_none=True)) if new.evidence_requirements else None,
            workflow.workflow_id if workflow else None,
            workflow.state_id if workflow else None,
            new.workflow_iteration,
            new.schedule_id,
            new.max_attempts,
            ts(new.available_at),
            ts(now),
            ts(now),
            new.parent_task_id,
            new.delegation_depth,
            new.root_task_id,
            dumps(new.delegation_caps) if new.delegation_caps is not None else None,
        ),
    )
    task_id = int(cursor.lastrowid or 0)
    store._append_event(
        "task_enqueued",
        now,
        task_id=task_id,
        workflow_id=workflow.workflow_id if workflow else None,
        schedule_id=new.schedule_id,
        payload={
            "task_type": new.task_type,
            "source": new.source,
            "priority": new.priority,
            "available_at": ts(new.available_at),
            **({"parent_task_id": new.parent_task_id} if new.parent_task_id is not None else {}),
            **(event_payload or {}),
        },
    )
    if new.approval_reason is not None:
        request_approval(store, task_id, new.approval_reason, now)
    return task_id


def cancel_waiting(store: StoreBase, task_id: int, outcome: TaskOutcome, now: datetime, by: str = "agentd") -> None:
    """A task that is not running ends operator_canceled; the caller holds the transaction."""
    store._conn.execute(
        """UPDATE tasks SET status = 'operator_canceled', outcome = ?, finished_at = ?, updated_at = ?
           WHERE id = ?""",
        (dumps(outcome.model_dump(mode="json", exclude_none=True)), ts(now), ts(now), task_id),
    )
    store._append_event(
        "task_finished",
        now,
        task_id=task_id,
        payload={"status": "operator_canceled", "summary": outcome.operator_summary, "by": by},
    )
    _close_approvals(store, task_id, outcome.operator_summary, now, by)


def _close_approvals(store: StoreBase, task_id: int, why: str, now: datetime, by: str) -> None:
    """A canceled task waits for no operator: its pending approval is closed (denied, by whoever
    canceled it, with the cancel's summary), or `approvals` and the oldest-approval gauge would keep it
    forever."""
    rows = store._conn.execute(
        """UPDATE approvals SET status = 'rejected', decided_at = ?, decided_by = ?, reason = ?
           WHERE task_id = ? AND status = 'pending' RETURNING approval_id""",
        (ts(now), by, why, task_id),
    ).fetchall()
    store._conn.execute("UPDATE tasks SET awaiting_approval = 0 WHERE id = ? AND awaiting_approval = 1", (task_id,))
    for (approval_id,) in rows:
        payload = {"approval_id": approval_id, "decision": "denied", "by": by, "note": f"task canceled: {why}"}
        store._append_event("approval_resolved", now, task_id=task_id, payload=payload)


class TaskVerbs(StoreBase):
    def enqueue_task(self, new: NewTask, now: datetime, *, event_payload: dict[str, Any] | None = None) -> TaskRecord:
        """Insert a validated task and its task_enqueued event in one transaction."""
        with self._transaction():
            task_id = insert_task(self, new, now, event_payload)
        return read_task_or_raise(self, task_id)

    def get_task(self, task_id: int) -> TaskRecord | None:
        return read_task(self, task_id)

    def get_task_or_raise(self, task_id: int) -> TaskRecord:
        return read_task_or_raise(self, task_id)

    def all_task_ids(self) -> list[int]:
        return [row[0] for row in self._conn.execute("SELECT id FROM tasks ORDER BY id")]

    def list_tasks(self, *, statuses: tuple[str, ...] = (), limit: int = 50) -> list[TaskRecord]:
        """Newest first; filtered by status when given."""
        where, params = "", [*statuses]
        if statuses:
            where = f"WHERE t.status IN ({', '.join('?' * len(statuses))})"
        rows = self._conn.execute(
            f"SELECT {TASK_COLUMNS} FROM {TASK_FROM} {where} ORDER BY t.id DESC LIMIT ?", (*params, limit)
        ).fetchall()
        return [task_from_row(r) for r in rows]

    # --- operator controls ----------------------------------------------------------------------

    def cancel_task(self, task_id: int, outcome: TaskOutcome, now: datetime, *, by: str = "agentd") -> CancelResult:
        """A waiting task ends operator_canceled now (with `outcome`); a running one is flagged for
        the dispatcher, which stops its adapter."""
        with self._transaction():
            task = read_task_or_raise(self, task_id)
            if task.status in TERMINAL_STATUSES:
                raise InputError(f"task {task_id} is already {task.status}; there is nothing to cancel")
            if task.status == "running":
                self._conn.execute(
                    """UPDATE tasks SET cancel_requested_at = COALESCE(cancel_requested_at, ?), updated_at = ?
                       WHERE id = ?""",
                    (ts(now), ts(now), task_id),
                )
                self._append_event("task_cancel_requested", now, task_id=task_id, payload={"by": by})
                return CancelResult(read_task_or_raise(self, task_id), "requested")
            cancel_waiting(self, task_id, outcome, now, by)
            return CancelResult(read_task_or_raise(self, task_id), "canceled")

    def retry_task(self, task_id: int, more_attempts: int, now: datetime, *, by: str = "agentd") -> TaskRecord:
        """Re-queue a failed, blocked or canceled task with `more_attempts`; its history stays. A task that
        was denied, or canceled while it waited for approval, waits for approval again: a retry is
        never a way around an operator's no."""
        with self._transaction():
            task = read_task_or_raise(self, task_id)
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
                payload={"from_status": task.status, "more_attempts": more_attempts, "by": by},
            )
            if never_approved(self, task_id):
                request_approval(self, task_id, "retried after it was denied (or canceled unapproved)", now)
        return read_task_or_raise(self, task_id)

    # --- the queue over time ------------------------------------------------------------------

    def queue_summary(self, now: datetime) -> QueueSummary:
        """Counts by status, and what waiting means now: claimable, waiting for a retry, delayed."""
        counts = dict(self._conn.execute("SELECT status, COUNT(*) FROM tasks GROUP BY status").fetchall())
        at = ts(now)
        due = {  # one index range per status (tasks_status)
            (status, is_due): self._conn.execute(
                f"SELECT COUNT(*), MIN(available_at) FROM tasks WHERE status = ? AND available_at {op} ?",
                (status, at),
            ).fetchone()
            for status in WAITING
            for is_due, op in ((True, "<="), (False, ">"))
        }
        version = self._conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
        oldest = min((due[(s, True)][1] for s in WAITING if due[(s, True)][1]), default=None)
        following = min((due[(s, False)][1] for s in WAITING if due[(s, False)][1]), default=None)
        return QueueSummary(
            counts,
            parse_optional_ts(oldest),
            parse_optional_ts(following),
            version,
            claimable=sum(due[(s, True)][0] for s in WAITING),
            retry_waiting=due[("retryable_failure", False)][0],
            delayed=due[("pending", False)][0],
        )

    def next_due_at(self, now: datetime) -> datetime | None:
        """When the earliest waiting task becomes claimable (None if none waits)."""
        waiting = [
            self._conn.execute(  # one index seek per status (tasks_status)
                "SELECT available_at FROM tasks WHERE status = ? AND available_at > ? ORDER BY available_at LIMIT 1",
                (status, ts(now)),
            ).fetchone()
            for status in WAITING
        ]
        return parse_optional_ts(min((row[0] for row in waiting if row), default=None))

    def waiting_count(self, now: datetime) -> int:
        """Tasks claimable now (pending or retrying and due)."""
        row = self._conn.execute(
            """SELECT (SELECT COUNT(*) FROM tasks WHERE status = 'pending' AND available_at <= :now)
                    + (SELECT COUNT(*) FROM tasks WHERE status = 'retryable_failure' AND available_at <= :now)""",
            {"now": ts(now)},
        ).fetchone()
        return int(row[0])

    def recent_outcomes(self, limit: int, exclude_task: int) -> list[tuple[int, str, str, str]]:
        """(task id, type, status, summary) of the agent's most recently finished tasks: the memory a
        bundle may carry."""
        rows = self._conn.execute(
            """SELECT id, task_type, status, json_extract(outcome, '$.operator_summary') FROM tasks
               WHERE finished_at IS NOT NULL AND id != ? ORDER BY finished_at DESC LIMIT ?""",
            (exclude_task, limit),
        ).fetchall()
        return [(r[0], r[1], r[2], r[3] or "") for r in rows]
