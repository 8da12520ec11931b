"""The outbox: side effects an outcome asked for, written with it and applied after it, once.

`settle` is shared with the workflow verbs (a workflow signal is an outbox entry too)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentd.records import NewTask, OutboxEntry, OutboxStatus
from agentd.store.base import StoreBase, Tx, dumps, loads, ts
from agentd.store.tasks import insert_task


def still_pending(tx: Tx, outbox_id: int | None) -> bool:
    row = tx.execute("SELECT status FROM outbox WHERE id = ?", (outbox_id,)).fetchone()
    return row is not None and row[0] == "pending"


def settle(tx: Tx, entry: OutboxEntry, status: OutboxStatus, result: dict[str, Any], now: datetime) -> None:
    """Mark a pending entry applied, refused or awaiting its handler, with its event; the caller
    holds the transaction (and has checked still_pending)."""
    tx.execute(
        "UPDATE outbox SET status = ?, result = ?, applied_at = ? WHERE id = ?",
        (status, dumps(result), ts(now), entry.outbox_id),
    )
    tx.event(
        "outbox_refused" if status == "refused" else "outbox_applied",
        now,
        task_id=entry.task_id,
        attempt_id=entry.attempt_id,
        payload={"kind": entry.kind, "key": entry.idempotency_key, "status": status, **result},
    )


# An entry of a kind result_policy.require_approval_for_side_effects holds, while its task's
# side-effects approval waits for an operator (store/control.py).
HELD = """o.kind IN ('follow_up_task', 'external_message') AND EXISTS (SELECT 1 FROM approvals a
    WHERE a.task_id = o.task_id AND a.scope = 'side_effects' AND a.status = 'pending')"""


def entry_from_row(r: Any) -> OutboxEntry:
    return OutboxEntry(
        r["kind"],
        r["idempotency_key"],
        loads(r["payload"]),
        r["status"],
        loads(r["result"]),
        outbox_id=r["id"],
        task_id=r["task_id"],
        attempt_id=r["attempt_id"],
    )


def held_side_effects(tx: Tx, task_id: int) -> list[OutboxEntry]:
    """The task's pending follow-ups and messages that its side-effects approval holds."""
    rows = tx.execute(
        f"SELECT o.* FROM outbox o WHERE o.task_id = ? AND o.status = 'pending' AND {HELD} ORDER BY o.id",
        (task_id,),
    ).fetchall()
    return [entry_from_row(r) for r in rows]


class OutboxVerbs(StoreBase):
    def pending_outbox(self, limit: int = 100) -> list[OutboxEntry]:
        """Pending entries to apply now, in order: those an operator's approval holds are left."""
        rows = self.tx.execute(
            f"SELECT o.* FROM outbox o WHERE o.status = 'pending' AND NOT ({HELD}) ORDER BY o.id LIMIT ?", (limit,)
        ).fetchall()
        return [entry_from_row(r) for r in rows]

    def outbox_waiting(self) -> bool:
        """Whether `pending_outbox` has an entry to apply now (the pending index: no scan)."""
        found = self.tx.execute(f"SELECT 1 FROM outbox o WHERE o.status = 'pending' AND NOT ({HELD}) LIMIT 1")
        return found.fetchone() is not None

    def apply_follow_up(
        self, entry: OutboxEntry, new: NewTask | None, refusal: str | None, now: datetime, max_descendants: int = 50
    ) -> int | None:
        """Enqueue a follow-up and mark its entry applied, in one transaction; a re-run after a crash
        finds the entry applied and does nothing (exactly once). Past `max_descendants` tasks in its
        root's tree (counted in the same transaction) it is refused instead. Returns the new task id."""
        with self.transaction():
            if not still_pending(self.tx, entry.outbox_id):
                return None
            task_id = None
            root = new.root_task_id if new is not None else None
            if root is not None:
                found = self.tx.execute("SELECT COUNT(*) FROM tasks WHERE root_task_id = ?", (root,))
                if found.fetchone()[0] >= max_descendants:
                    new, refusal = (
                        None,
                        (
                            f"task {root} already has {max_descendants} descendants "
                            "([dispatch] max_descendants): no more follow-ups in its tree"
                        ),
                    )
            if new is not None:
                task_id = insert_task(
                    self.tx, new, now, {"follow_up_of": entry.task_id, "outbox_key": entry.idempotency_key}
                )
                settle(self.tx, entry, "applied", {"task_id": task_id}, now)
            else:
                settle(self.tx, entry, "refused", {"reason": refusal}, now)
        return task_id

    def settle_outbox(self, entry: OutboxEntry, status: OutboxStatus, result: dict[str, Any], now: datetime) -> None:
        """Mark an entry applied, refused or awaiting its handler, once."""
        with self.transaction():
            if still_pending(self.tx, entry.outbox_id):
                settle(self.tx, entry, status, result, now)

    def outbox_of(self, task_id: int) -> list[dict[str, Any]]:
        rows = self.tx.execute("SELECT * FROM outbox WHERE task_id = ? ORDER BY id", (task_id,)).fetchall()
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
