"""The operator's steering acts: approvals and pausing the dispatcher. Each is one transaction with
its event, naming who (the OS user who ran the command) and why."""

from __future__ import annotations

from datetime import datetime

from agentd import frozen_value
from agentd.clock import stored_ts
from agentd.errors import InputError
from agentd.records import TaskRecord
from agentd.store.approvals import ApprovalScope
from agentd.store.base import StoreBase, ts
from agentd.store.outbox import held_side_effects, settle
from agentd.store.plain import decide, denial
from agentd.store.tasks import read_task_or_raise


class StaleApproval(InputError):
    """The request a resolution names is no longer the task's pending one (resolved, or asked again)."""


@frozen_value
class PendingApproval:
    approval_id: str
    task_id: int
    task_type: str
    subject: str | None
    reason: str | None
    requested_at: datetime
    scope: ApprovalScope = "claim"


@frozen_value
class Pause:
    paused_at: datetime
    paused_by: str
    reason: str | None

    def describe(self) -> str:
        why = f": {self.reason}" if self.reason else ""
        return f"paused since {ts(self.paused_at)} by {self.paused_by}{why}"


class ControlVerbs(StoreBase):
    def resolve_approval(
        self,
        task_id: int,
        *,
        approved: bool,
        by: str,
        note: str | None,
        now: datetime,
        approval_id: str | None = None,
    ) -> tuple[TaskRecord, ApprovalScope]:
        """Approve (the task becomes claimable) or deny (it ends operator_canceled with the reason);
        for a side-effects approval, its held follow-ups and messages go ahead or are refused. With
        `approval_id`, only that request is resolved: one the task replaced since is StaleApproval."""
        with self.transaction():
            task = read_task_or_raise(self.tx, task_id)
            row = self.tx.execute(
                "SELECT approval_id, scope FROM approvals WHERE task_id = ? AND status = 'pending'", (task_id,)
            ).fetchone()
            if row is None:
                raise InputError(f"task {task_id} is not waiting for approval (it is {task.status})")
            if approval_id is not None and row[0] != approval_id:
                raise StaleApproval(f"approval_id: {approval_id!r} is not task {task_id}'s pending request")
            approval_id, scope = row
            held = held_side_effects(self.tx, task_id) if scope == "side_effects" else []  # before it is decided
            decide(self.tx, task_id, approval_id, scope, approved=approved, by=by, note=note, now=now)
            if scope == "side_effects" and not approved:  # the task stays as it ended; what it asked for is refused
                for entry in held:
                    settle(self.tx, entry, "refused", {"reason": denial(by, note)}, now)
            return read_task_or_raise(self.tx, task_id), scope

    def pending_approvals(self) -> list[PendingApproval]:
        """What waits for an operator, oldest first."""
        rows = self.tx.execute(
            """SELECT p.approval_id, p.task_id, t.task_type, t.subject, p.reason, p.requested_at, p.scope
               FROM approvals p JOIN tasks t ON t.id = p.task_id
               WHERE p.status = 'pending' ORDER BY p.requested_at, p.task_id"""
        ).fetchall()
        return [PendingApproval(r[0], r[1], r[2], r[3], r[4], stored_ts(r[5]), r[6]) for r in rows]

    def pause_dispatch(self, by: str, reason: str | None, now: datetime) -> tuple[Pause, bool]:
        """(the pause, whether this call made it): pausing a paused dispatcher changes nothing."""
        with self.transaction():
            current = self.dispatch_pause()
            if current is not None:
                return current, False
            self.tx.execute(
                "INSERT INTO dispatch_control (id, paused_at, paused_by, reason) VALUES (1, ?, ?, ?)",
                (ts(now), by, reason),
            )
            self.tx.event("dispatch_paused", now, payload={"by": by, "reason": reason})
            return Pause(now, by, reason), True

    def resume_dispatch(self, by: str, now: datetime) -> Pause | None:
        """The pause that ended, or None if the dispatcher was not paused."""
        with self.transaction():
            current = self.dispatch_pause()
            if current is None:
                return None
            self.tx.execute("DELETE FROM dispatch_control WHERE id = 1")
            paused_s = round((now - current.paused_at).total_seconds(), 3)
            self.tx.event("dispatch_resumed", now, payload={"by": by, "paused_s": paused_s})
            return current

    def dispatch_pause(self) -> Pause | None:
        row = self.tx.execute("SELECT paused_at, paused_by, reason FROM dispatch_control WHERE id = 1").fetchone()
        return None if row is None else Pause(stored_ts(row[0]), row[1], row[2])
