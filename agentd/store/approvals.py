"""Approval requests: a task held before its first claim, or a completed outcome's side effects held in
the outbox, until an operator decides (agentd/store/control.py). Below both tasks and control, so each
may hold a task without importing the other."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from agentd.hashing import new_ulid
from agentd.store.base import Tx, ts

ApprovalScope = Literal["claim", "side_effects"]  # before its first claim, or its outcome's side effects


def request_approval(tx: Tx, task_id: int, reason: str, now: datetime, *, scope: ApprovalScope = "claim") -> None:
    """Hold a task before its first claim (`claim`), or its completed outcome's follow-ups and
    messages in the outbox (`side_effects`); the caller holds the transaction."""
    approval_id = new_ulid(tx.clock)
    if scope == "claim":
        tx.execute("UPDATE tasks SET awaiting_approval = 1 WHERE id = ?", (task_id,))
    tx.execute(
        "INSERT INTO approvals (approval_id, task_id, reason, requested_at, scope) VALUES (?, ?, ?, ?, ?)",
        (approval_id, task_id, reason, ts(now), scope),
    )
    payload = {"approval_id": approval_id, "reason": reason} | ({"scope": scope} if scope != "claim" else {})
    tx.event("approval_requested", now, task_id=task_id, payload=payload)


def never_approved(tx: Tx, task_id: int) -> bool:
    """The task was held for approval and its last claim approval ended without one: denied by an
    operator, or closed when the task was canceled while it waited."""
    row = tx.execute(
        """SELECT status FROM approvals WHERE task_id = ? AND scope = 'claim'
           ORDER BY approval_id DESC LIMIT 1""",  # ULIDs: the newest last
        (task_id,),
    ).fetchone()
    return row is not None and row[0] != "approved"
