"""Task queue verbs: enqueue, read, and the operator's view of the queue."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentd.clock import parse_ts
from agentd.intake import NewTask
from agentd.records import (
    EvidenceRequirements,
    TaskAttempt,
    TaskOutcome,
    TaskRecord,
    WorkflowRef,
)
from agentd.store.base import StoreBase, dumps, loads, parse_optional_ts, ts

TASK_COLUMNS = """t.id, t.task_type, t.source, t.subject, t.description, t.priority, t.payload,
    t.requested_profile_id, t.requested_adapter_id, t.requested_model, t.skill_ids,
    t.evidence_requirements, t.workflow_id, t.workflow_state, t.workflow_iteration, t.schedule_id,
    t.status, t.max_attempts, t.attempt_count, t.free_attempt_count, t.rate_limit_count, t.crash_count,
    t.available_at, t.created_at, t.updated_at, t.started_at, t.finished_at, t.outcome, t.last_error,
    t.cancel_requested_at,
    w.instance_key AS workflow_instance_key"""
TASK_FROM = "tasks t LEFT JOIN workflows w ON w.id = t.workflow_id"

# The next claimable task: priority 1 first, then available_at, then id. One index seek per
# priority (1..10, a CHECK constraint) rather than one ordered walk, so tasks waiting in the
# future never slow the claim down and no ANALYZE statistics can change the plan.
_CLAIM_BRANCH = """SELECT * FROM (
    SELECT id, priority, available_at FROM tasks
    WHERE status IN ('pending', 'retryable_failure') AND awaiting_approval = 0
      AND priority = {priority} AND available_at <= :now
    ORDER BY available_at, id LIMIT 1)"""
NEXT_CLAIMABLE_SQL = (
    "SELECT id FROM ("
    + " UNION ALL ".join(_CLAIM_BRANCH.format(priority=p) for p in range(1, 11))
    + ") ORDER BY priority, available_at, id LIMIT 1"
)
# One statement, inside BEGIN IMMEDIATE: two dispatchers could never both win the same row.
CLAIM_SQL = f"""UPDATE tasks
    SET status = 'running', attempt_count = attempt_count + 1,
        started_at = :now, updated_at = :now, finished_at = NULL
    WHERE id = ({NEXT_CLAIMABLE_SQL})
    RETURNING id"""


@dataclass(frozen=True)
class QueueSummary:
    counts: dict[str, int]
    oldest_pending_at: datetime | None
    next_available_at: datetime | None
    schema_version: int


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
        available_at=parse_ts(row["available_at"]),
        created_at=parse_ts(row["created_at"]),
        updated_at=parse_ts(row["updated_at"]),
        started_at=parse_optional_ts(row["started_at"]),
        finished_at=parse_optional_ts(row["finished_at"]),
        outcome=TaskOutcome.model_validate(outcome) if outcome is not None else None,
        last_error=row["last_error"],
        skill_ids=loads(row["skill_ids"]),
        evidence_requirements=EvidenceRequirements.model_validate(evidence) if evidence else None,
        workflow_ref=workflow_ref,
        workflow_iteration=row["workflow_iteration"],
        schedule_id=row["schedule_id"],
        free_attempt_count=row["free_attempt_count"],
        rate_limit_count=row["rate_limit_count"],
        crash_count=row["crash_count"],
        cancel_requested_at=parse_optional_ts(row["cancel_requested_at"]),
    )


def attempt_from_row(row: sqlite3.Row) -> TaskAttempt:
    return TaskAttempt(
        attempt_id=row["attempt_id"],
        task_id=row["task_id"],
        attempt_number=row["attempt_number"],
        adapter_id=row["adapter_id"],
        adapter_kind=row["adapter_kind"],
        model=row["model"],
        runner_id=row["runner_id"],
        started_at=parse_ts(row["started_at"]),
        ended_at=parse_optional_ts(row["ended_at"]),
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
        diagnostics=loads(row["diagnostics"]),
        usage=_usage(row),
    )


def _usage(row: sqlite3.Row) -> dict[str, Any] | None:
    fields = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens", "cost_usd")
    found = {name: row[name] for name in fields if row[name] is not None}
    if row["cost_usd"] is not None:
        found["cost_estimated"] = bool(row["cost_estimated"])
    return found or None


class TaskVerbs(StoreBase):
    def enqueue_task(self, new: NewTask, now: datetime, *, event_payload: dict[str, Any] | None = None) -> TaskRecord:
        """Insert a validated task and its task_enqueued event in one transaction."""
        with self._transaction():
            task_id = self._insert_task(new, now, event_payload)
        return self.get_task_or_raise(task_id)

    def _insert_task(self, new: NewTask, now: datetime, event_payload: dict[str, Any] | None = None) -> int:
        """The INSERT and its event; the caller holds the transaction."""
        workflow = new.workflow_ref
        cursor = self._conn.execute(
            """INSERT INTO tasks (task_type, source, subject, description, priority, payload,
                   requested_profile_id, requested_adapter_id, requested_model, skill_ids,
                   evidence_requirements, workflow_id, workflow_state, workflow_iteration,
                   schedule_id, max_attempts, available_at, created_at, updated_at)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
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
            ),
        )
        task_id = int(cursor.lastrowid or 0)
        self._append_event(
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
                **(event_payload or {}),
            },
        )
        return task_id

    def get_task(self, task_id: int) -> TaskRecord | None:
        row = self._conn.execute(f"SELECT {TASK_COLUMNS} FROM {TASK_FROM} WHERE t.id = ?", (task_id,)).fetchone()
        return None if row is None else task_from_row(row)

    def get_task_or_raise(self, task_id: int) -> TaskRecord:
        from agentd.errors import NotFound

        task = self.get_task(task_id)
        if task is None:
            raise NotFound(f"task {task_id} does not exist; `agentd task list` shows the queue")
        return task

    def list_tasks(self, *, statuses: tuple[str, ...] = (), limit: int = 50) -> list[TaskRecord]:
        """Newest first; filtered by status when given."""
        where, params = "", [*statuses]
        if statuses:
            where = f"WHERE t.status IN ({', '.join('?' * len(statuses))})"
        rows = self._conn.execute(
            f"SELECT {TASK_COLUMNS} FROM {TASK_FROM} {where} ORDER BY t.id DESC LIMIT ?", (*params, limit)
        ).fetchall()
        return [task_from_row(r) for r in rows]

    def attempts_of(self, task_id: int) -> list[TaskAttempt]:
        rows = self._conn.execute(
            "SELECT * FROM task_attempts WHERE task_id = ? ORDER BY attempt_number", (task_id,)
        ).fetchall()
        return [attempt_from_row(r) for r in rows]

    def attempt_usage(
        self, *, task_id: int | None = None, since: datetime | None = None, limit: int = 1000
    ) -> list[TaskAttempt]:
        """Finished attempts, newest first, for cost and token accounting."""
        clauses: list[str] = ["ended_at IS NOT NULL"]
        params: list[Any] = []
        if task_id is not None:
            clauses.append("task_id = ?")
            params.append(task_id)
        if since is not None:
            clauses.append("ended_at >= ?")
            params.append(ts(since))
        rows = self._conn.execute(
            f"SELECT * FROM task_attempts WHERE {' AND '.join(clauses)} ORDER BY ended_at DESC LIMIT ?",
            (*params, limit),
        ).fetchall()
        return [attempt_from_row(r) for r in rows]

    def explain_claim(self, now: datetime, *, analyze: bool = False) -> list[str]:
        """The query plan of the claim (tests and `make bench` check it uses tasks_claim)."""
        if analyze:
            self._conn.execute("ANALYZE")
        rows = self._conn.execute(f"EXPLAIN QUERY PLAN {CLAIM_SQL}", {"now": ts(now)}).fetchall()
        return [row[3] for row in rows]

    def queue_summary(self, now: datetime) -> QueueSummary:
        counts = dict(self._conn.execute("SELECT status, COUNT(*) FROM tasks GROUP BY status").fetchall())
        waiting = [
            self._conn.execute(
                "SELECT MIN(available_at) FROM tasks WHERE status = ? AND available_at <= ?", (status, ts(now))
            ).fetchone()[0]
            for status in ("pending", "retryable_failure")
        ]
        upcoming = [
            self._conn.execute(
                "SELECT MIN(available_at) FROM tasks WHERE status = ? AND available_at > ?", (status, ts(now))
            ).fetchone()[0]
            for status in ("pending", "retryable_failure")
        ]
        version = self._conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_migrations").fetchone()[0]
        oldest = min((w for w in waiting if w), default=None)
        following = min((u for u in upcoming if u), default=None)
        return QueueSummary(counts, parse_optional_ts(oldest), parse_optional_ts(following), version)
