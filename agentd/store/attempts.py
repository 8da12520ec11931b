"""Dispatch verbs: the lock, the claim, and an attempt's life from claimed to closed.

`finish_attempt` is the outcome commit of DESIGN §4: the attempt closed, the task's status,
outcome and counters, its artifacts, its outbox rows and their events, in one transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentd.clock import parse_ts
from agentd.errors import InputError
from agentd.hashing import new_ulid
from agentd.records import TERMINAL_STATUSES, TaskAttempt, TaskOutcome, TaskRecord
from agentd.store.base import dumps, ts
from agentd.store.tasks import CLAIM_SQL, attempt_from_row
from agentd.store.tasks import TaskVerbs as _TaskVerbs

OUTCOME_SUMMARY_MAX = 4000


@dataclass(frozen=True)
class LockHolder:
    holder_id: str
    pid: int
    pid_started: int
    host: str
    boot_id: str
    acquired_at: datetime
    heartbeat_at: datetime


@dataclass(frozen=True)
class LockAttempt:
    acquired: bool
    holder: LockHolder  # ours when acquired, else the live holder
    cleared: LockHolder | None = None
    cleared_because: str | None = None


@dataclass(frozen=True)
class AttemptPlan:
    adapter_id: str
    adapter_kind: str
    model: str | None


@dataclass(frozen=True)
class Claim:
    task: TaskRecord
    attempt: TaskAttempt | None
    refused: str | None = None  # the config can no longer run this task: it failed permanently


@dataclass(frozen=True)
class ArtifactRow:
    role: str
    relative_path: str
    sha256: str | None
    content_type: str | None = None


@dataclass(frozen=True)
class OutboxRow:
    kind: str  # follow_up_task | external_message | workflow_signal
    idempotency_key: str
    payload: dict[str, Any]
    status: str = "pending"  # or refused / awaiting_handler, decided by policy at commit
    result: dict[str, Any] | None = None


@dataclass(frozen=True)
class AttemptEnd:
    """Everything the outcome commit writes, decided before the transaction starts."""

    attempt_id: str
    task_id: int
    ended_at: datetime
    exit_status: str  # ok | error | timeout | unknown (the boot sweep found it; its exit was not seen)
    retry_class: str
    termination_reason: str
    outcome: TaskOutcome
    status: str
    available_at: datetime | None
    last_error: str | None
    free_attempt: bool = False
    rate_limited: bool = False
    crashed: bool = False  # the runtime died during it: counts toward the task's crash_limit
    side_effects: str = "possible"  # none: the adapter never started
    model: str | None = None
    downgrade_reasons: tuple[str, ...] = ()
    artifacts: tuple[ArtifactRow, ...] = ()
    outbox: tuple[OutboxRow, ...] = ()
    diagnostics: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    paths: dict[str, str | None] = field(default_factory=dict)
    boot_sweep: bool = False


def _holder_from_row(row: sqlite3.Row) -> LockHolder:
    return LockHolder(
        holder_id=row["holder_id"],
        pid=row["pid"],
        pid_started=row["pid_started"],
        host=row["host"],
        boot_id=row["boot_id"],
        acquired_at=parse_ts(row["acquired_at"]),
        heartbeat_at=parse_ts(row["heartbeat_at"]),
    )


class AttemptVerbs(_TaskVerbs):
    # --- the dispatch lock ----------------------------------------------------------------------

    def acquire_dispatch_lock(
        self, me: LockHolder, now: datetime, staleness: Callable[[LockHolder], str | None]
    ) -> LockAttempt:
        """Take the lock, clearing a stale one; two processes clearing it at once: one wins."""
        with self._transaction():
            row = self._conn.execute("SELECT * FROM dispatch_lock WHERE id = 1").fetchone()
            cleared, reason = None, None
            if row is not None:
                current = _holder_from_row(row)
                reason = staleness(current)
                if reason is None:
                    self._append_event("dispatch_locked", now, payload=_holder_payload(current, prefix="holder_"))
                    return LockAttempt(False, current)
                self._conn.execute("DELETE FROM dispatch_lock WHERE id = 1 AND holder_id = ?", (current.holder_id,))
                self._append_event(
                    "dispatch_lock_stale_cleared", now, payload={**_holder_payload(current), "reason": reason}
                )
                cleared = current
            self._conn.execute(
                """INSERT INTO dispatch_lock (id, holder_id, pid, pid_started, host, boot_id, acquired_at, heartbeat_at)
                   VALUES (1, ?, ?, ?, ?, ?, ?, ?)""",
                (me.holder_id, me.pid, me.pid_started, me.host, me.boot_id, ts(now), ts(now)),
            )
        return LockAttempt(True, me, cleared, reason)

    def heartbeat_dispatch_lock(self, holder_id: str, now: datetime) -> bool:
        """Refresh our heartbeat; False means the lock is no longer ours."""
        with self._transaction():
            cursor = self._conn.execute(
                "UPDATE dispatch_lock SET heartbeat_at = ? WHERE id = 1 AND holder_id = ?", (ts(now), holder_id)
            )
        return cursor.rowcount == 1

    def release_dispatch_lock(self, holder_id: str) -> None:
        with self._transaction():
            self._conn.execute("DELETE FROM dispatch_lock WHERE id = 1 AND holder_id = ?", (holder_id,))

    def dispatch_lock_holder(self) -> LockHolder | None:
        row = self._conn.execute("SELECT * FROM dispatch_lock WHERE id = 1").fetchone()
        return None if row is None else _holder_from_row(row)

    # --- claiming and running -------------------------------------------------------------------

    def claim_next_task(
        self,
        now: datetime,
        runner_id: str,
        plan: Callable[[TaskRecord], AttemptPlan],
        evidence_dir: Callable[[int, str], str],
    ) -> Claim | None:
        """Claim the next task and open its attempt (task_claimed), or None if nothing is due."""
        with self._transaction():
            row = self._conn.execute(CLAIM_SQL, {"now": ts(now)}).fetchone()
            if row is None:
                return None
            task = self.get_task_or_raise(row["id"])
            try:
                chosen = plan(task)
            except InputError as exc:
                return Claim(self._refuse_claimed(task, str(exc), now), None, str(exc))
            attempt_id = new_ulid(self.clock)
            self._conn.execute(
                """INSERT INTO task_attempts (attempt_id, task_id, attempt_number, adapter_id, adapter_kind,
                       model, runner_id, started_at, evidence_dir)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (
                    attempt_id,
                    task.task_id,
                    task.attempt_count,
                    chosen.adapter_id,
                    chosen.adapter_kind,
                    chosen.model,
                    runner_id,
                    ts(now),
                    evidence_dir(task.task_id, attempt_id),
                ),
            )
            self._append_event(
                "task_claimed",
                now,
                task_id=task.task_id,
                attempt_id=attempt_id,
                workflow_id=task.workflow_ref.workflow_id if task.workflow_ref else None,
                payload={
                    "attempt_number": task.attempt_count,
                    "adapter": chosen.adapter_id,
                    "model": chosen.model,
                    "priority": task.priority,
                },
            )
            attempt = self._attempt(attempt_id)
        return Claim(task, attempt)

    def _refuse_claimed(self, task: TaskRecord, reason: str, now: datetime) -> TaskRecord:
        self._conn.execute(
            """UPDATE tasks SET status = 'permanent_failure', last_error = ?, finished_at = ?, updated_at = ?,
                   attempt_count = attempt_count - 1 WHERE id = ?""",
            (reason, ts(now), ts(now), task.task_id),
        )
        self._append_event(
            "task_finished", now, task_id=task.task_id, payload={"status": "permanent_failure", "reason": reason}
        )
        return self.get_task_or_raise(task.task_id)

    def _attempt(self, attempt_id: str) -> TaskAttempt:
        row = self._conn.execute("SELECT * FROM task_attempts WHERE attempt_id = ?", (attempt_id,)).fetchone()
        return attempt_from_row(row)

    def record_bundle(
        self, task_id: int, attempt_id: str, bundle_hash: str, prompt_path: str, details: dict[str, Any], now: datetime
    ) -> None:
        with self._transaction():
            self._conn.execute(
                "UPDATE task_attempts SET bundle_hash = ?, prompt_path = ? WHERE attempt_id = ?",
                (bundle_hash, prompt_path, attempt_id),
            )
            self._append_event(
                "bundle_compiled",
                now,
                task_id=task_id,
                attempt_id=attempt_id,
                payload={"bundle_hash": bundle_hash, **details},
            )

    def mark_attempt_started(self, task_id: int, attempt_id: str, pid: int | None, now: datetime) -> None:
        """The adapter runs as the leader of process group `pid` (the boot sweep kills it by that);
        None for an adapter that runs no process (ollama-generate speaks HTTP)."""
        with self._transaction():
            self._conn.execute(
                "UPDATE task_attempts SET pid = ?, process_group = ? WHERE attempt_id = ?", (pid, pid, attempt_id)
            )
            self._append_event("task_started", now, task_id=task_id, attempt_id=attempt_id, payload={"pid": pid})

    def cancel_requested(self, task_id: int) -> bool:
        row = self._conn.execute("SELECT cancel_requested_at FROM tasks WHERE id = ?", (task_id,)).fetchone()
        return row is not None and row[0] is not None

    def running_attempts(self) -> list[tuple[TaskRecord, TaskAttempt]]:
        """Every task left running, with its open attempt: the boot sweep's work list."""
        rows = self._conn.execute(
            """SELECT a.* FROM task_attempts a JOIN tasks t ON t.id = a.task_id
               WHERE t.status = 'running' AND a.ended_at IS NULL ORDER BY a.task_id"""
        ).fetchall()
        return [(self.get_task_or_raise(row["task_id"]), attempt_from_row(row)) for row in rows]

    def finish_attempt(self, end: AttemptEnd) -> TaskRecord:
        """The outcome commit: one transaction, or nothing at all."""
        with self._transaction():
            self._close_attempt(end)
            self._update_task(end)
            workflow_id = self._conn.execute("SELECT workflow_id FROM tasks WHERE id = ?", (end.task_id,)).fetchone()[0]
            ids = {"task_id": end.task_id, "attempt_id": end.attempt_id, "workflow_id": workflow_id}
            for artifact in end.artifacts:
                self._conn.execute(
                    """INSERT INTO artifacts (artifact_id, task_id, attempt_id, role, relative_path, content_type,
                           sha256, created_at, verified_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    (
                        new_ulid(self.clock),
                        end.task_id,
                        end.attempt_id,
                        artifact.role,
                        artifact.relative_path,
                        artifact.content_type,
                        artifact.sha256,
                        ts(end.ended_at),
                        ts(end.ended_at),
                    ),
                )
                self._append_event(
                    "artifact_recorded",
                    end.ended_at,
                    **ids,
                    payload={"role": artifact.role, "path": artifact.relative_path},
                )
            for entry in end.outbox:
                self._conn.execute(
                    """INSERT INTO outbox (task_id, attempt_id, kind, idempotency_key, payload, status, result,
                           created_at, applied_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                    (
                        end.task_id,
                        end.attempt_id,
                        entry.kind,
                        entry.idempotency_key,
                        dumps(entry.payload),
                        entry.status,
                        dumps(entry.result) if entry.result else None,
                        ts(end.ended_at),
                        ts(end.ended_at) if entry.status == "refused" else None,
                    ),
                )
                if entry.status == "refused":
                    self._append_event(
                        "outbox_refused", end.ended_at, **ids, payload={"kind": entry.kind, **(entry.result or {})}
                    )
            self._append_events_of(end, ids)
        return self.get_task_or_raise(end.task_id)

    def _close_attempt(self, end: AttemptEnd) -> None:
        usage = end.usage
        cursor = self._conn.execute(
            """UPDATE task_attempts SET ended_at = ?, exit_status = ?, retry_class = ?, termination_reason = ?,
                   side_effects = ?, model = COALESCE(?, model), stdout_path = ?, stderr_path = ?, result_path = ?,
                   last_message_path = ?, diagnostics = ?, cost_usd = ?, cost_estimated = ?, input_tokens = ?,
                   output_tokens = ?, cache_read_tokens = ?, cache_write_tokens = ?
               WHERE attempt_id = ? AND ended_at IS NULL""",
            (
                ts(end.ended_at),
                end.exit_status,
                end.retry_class,
                end.termination_reason,
                end.side_effects,
                end.model,
                end.paths.get("stdout"),
                end.paths.get("stderr"),
                end.paths.get("result"),
                end.paths.get("last_message"),
                dumps(end.diagnostics),
                usage.get("cost_usd"),
                usage.get("cost_estimated"),
                usage.get("input_tokens"),
                usage.get("output_tokens"),
                usage.get("cache_read_tokens"),
                usage.get("cache_write_tokens"),
                end.attempt_id,
            ),
        )
        if cursor.rowcount != 1:
            raise RuntimeError(f"attempt {end.attempt_id} is not open; it was closed by someone else")

    def _update_task(self, end: AttemptEnd) -> None:
        stored = end.outcome.model_copy(
            update={"raw_output": None, "operator_summary": end.outcome.operator_summary[:OUTCOME_SUMMARY_MAX]}
        )
        terminal = end.status in TERMINAL_STATUSES
        cursor = self._conn.execute(
            """UPDATE tasks SET status = ?, outcome = ?, last_error = ?, updated_at = ?,
                   available_at = COALESCE(?, available_at), finished_at = ?,
                   free_attempt_count = free_attempt_count + ?, rate_limit_count = rate_limit_count + ?,
                   crash_count = CASE WHEN ? THEN crash_count + 1 ELSE 0 END, cancel_requested_at = NULL
               WHERE id = ? AND status = 'running'""",
            (
                end.status,
                dumps(stored.model_dump(mode="json", exclude_none=True)),
                end.last_error,
                ts(end.ended_at),
                ts(end.available_at),
                ts(end.ended_at) if terminal else None,
                int(end.free_attempt),
                int(end.rate_limited),
                int(end.crashed),
                end.task_id,
            ),
        )
        if cursor.rowcount != 1:
            raise RuntimeError(f"task {end.task_id} is not running; its outcome cannot be recorded twice")

    def _append_events_of(self, end: AttemptEnd, ids: dict[str, Any]) -> None:
        at = end.ended_at
        if end.boot_sweep:
            self._append_event(
                "boot_sweep_reclaimed",
                at,
                **ids,
                payload={
                    "next_status": end.status,
                    "judged": not end.crashed,
                    "side_effects": end.side_effects,
                    "killed": len(end.diagnostics.get("killed_pids") or []),
                },
            )
        if end.downgrade_reasons:
            self._append_event("outcome_downgraded", at, **ids, payload={"reasons": list(end.downgrade_reasons)})
        self._append_event(
            "task_attempt_finished",
            at,
            **ids,
            payload={
                "exit_status": end.exit_status,
                "retry_class": end.retry_class,
                "termination_reason": end.termination_reason,
                "outcome": end.outcome.status,
            },
        )
        if end.status == "retryable_failure":
            self._append_event(
                "task_retry_scheduled",
                at,
                **ids,
                payload={
                    "available_at": ts(end.available_at),
                    "rate_limited": end.rate_limited,
                    "free_attempt": end.free_attempt,
                    "reason": (end.last_error or "")[:200],
                },
            )
        else:
            self._append_event(
                "task_finished",
                at,
                **ids,
                payload={"status": end.status, "summary": end.outcome.operator_summary[:200]},
            )


def _holder_payload(holder: LockHolder, prefix: str = "") -> dict[str, Any]:
    return {
        f"{prefix}pid": holder.pid,
        f"{prefix}host": holder.host,
        f"{prefix}id": holder.holder_id,
        f"{prefix}heartbeat_at": ts(holder.heartbeat_at),
    }
