"""The dispatch lock: at most one row, so at most one dispatcher per agent (docs/design.md, "Dispatch").

Whether a holder is stale is decided before the transaction (it reads /proc); the transaction
clears only the holder that was judged stale, so two processes clearing one stale lock cannot
both win.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentd.records import LockAttempt, LockHolder
from agentd.store.base import StoreBase, ts
from agentd.store.rows import holder_from_row


class LockVerbs(StoreBase):
    def dispatch_lock_holder(self) -> LockHolder | None:
        row = self.tx.execute("SELECT * FROM dispatch_lock WHERE id = 1").fetchone()
        return None if row is None else holder_from_row(row)

    def acquire_dispatch_lock(
        self, me: LockHolder, now: datetime, stale: LockHolder | None = None, reason: str | None = None
    ) -> LockAttempt:
        """Take the lock. `stale` is a holder the caller judged dead or silent (with `reason`): it is
        cleared only if it still holds the lock; any other holder is live and keeps it."""
        with self.transaction():
            row = self.tx.execute("SELECT * FROM dispatch_lock WHERE id = 1").fetchone()
            cleared = None
            if row is not None:
                current = holder_from_row(row)
                if stale is None or current.holder_id != stale.holder_id:
                    self.tx.event("dispatch_locked", now, payload=_holder_payload(current, prefix="holder_"))
                    return LockAttempt(False, current)
                self.tx.execute("DELETE FROM dispatch_lock WHERE id = 1 AND holder_id = ?", (current.holder_id,))
                self.tx.event(
                    "dispatch_lock_stale_cleared", now, payload={**_holder_payload(current), "reason": reason}
                )
                cleared = current
            self.tx.execute(
                """INSERT INTO dispatch_lock (id, holder_id, pid, pid_started, host, boot_id, acquired_at, heartbeat_at)
                   VALUES (1, ?, ?, ?, ?, ?, ?, ?)""",
                (me.holder_id, me.pid, me.pid_started, me.host, me.boot_id, ts(now), ts(now)),
            )
        return LockAttempt(True, me, cleared)

    def heartbeat_dispatch_lock(self, holder_id: str, now: datetime) -> bool:
        """Refresh our heartbeat; False means the lock is no longer ours."""
        with self.transaction():
            cursor = self.tx.execute(
                "UPDATE dispatch_lock SET heartbeat_at = ? WHERE id = 1 AND holder_id = ?", (ts(now), holder_id)
            )
        return cursor.rowcount == 1

    def release_dispatch_lock(self, holder_id: str) -> None:
        with self.transaction():
            self.tx.execute("DELETE FROM dispatch_lock WHERE id = 1 AND holder_id = ?", (holder_id,))


def _holder_payload(holder: LockHolder, prefix: str = "") -> dict[str, Any]:
    return {
        f"{prefix}pid": holder.pid,
        f"{prefix}host": holder.host,
        f"{prefix}id": holder.holder_id,
        f"{prefix}heartbeat_at": ts(holder.heartbeat_at),
    }
