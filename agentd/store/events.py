"""The event log: reading it, appending a service-level event, and proving its hash chain (DESIGN §6)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agentd.hashing import GENESIS_HASH, chain_hash
from agentd.records import RuntimeEvent
from agentd.store.base import StoreBase, loads
from agentd.store.rows import EVENT_BODY_FIELDS, event_from_row


@dataclass(frozen=True)
class ChainBreak:
    sequence: int
    reason: str


class EventVerbs(StoreBase):
    def read_events(
        self,
        *,
        after: int = 0,
        task_id: int | None = None,
        workflow_id: int | None = None,
        limit: int = 1000,
    ) -> list[RuntimeEvent]:
        """Events in sequence order after `after`, optionally for one task or workflow."""
        clauses, params = ["sequence > ?"], [after]
        if task_id is not None:
            clauses.append("task_id = ?")
            params.append(task_id)
        if workflow_id is not None:
            clauses.append("workflow_id = ?")
            params.append(workflow_id)
        rows = self._conn.execute(
            f"SELECT * FROM events WHERE {' AND '.join(clauses)} ORDER BY sequence LIMIT ?", (*params, limit)
        ).fetchall()
        return [event_from_row(r) for r in rows]

    def last_event_sequence(self) -> int:
        return int(self._conn.execute("SELECT COALESCE(MAX(sequence), 0) FROM events").fetchone()[0])

    def record_event(self, event_type: str, now: datetime, payload: dict[str, Any] | None = None) -> None:
        """A service-level event with no other state change (dispatch_started, dispatch_idle, …)."""
        with self._transaction():
            self._append_event(event_type, now, payload=payload)

    def verify_event_chain(self, batch: int = 10_000) -> list[ChainBreak]:
        """Recompute every hash; each row must continue the previous one with no gaps."""
        breaks, prev_hash, expected, after = [], GENESIS_HASH, 1, 0
        while rows := self._conn.execute(
            "SELECT * FROM events WHERE sequence > ? ORDER BY sequence LIMIT ?", (after, batch)
        ).fetchall():
            for row in rows:
                if row["sequence"] != expected:
                    breaks.append(ChainBreak(row["sequence"], f"expected sequence {expected}: events are missing"))
                if row["prev_hash"] != prev_hash:
                    breaks.append(ChainBreak(row["sequence"], "prev_hash does not match the previous event"))
                body = {field: row[field] for field in EVENT_BODY_FIELDS}
                body["payload"], body["refs"] = loads(row["payload"]), loads(row["refs"])
                if chain_hash(row["prev_hash"], body) != row["hash"]:
                    breaks.append(ChainBreak(row["sequence"], "hash does not match the event's content"))
                prev_hash, expected, after = row["hash"], row["sequence"] + 1, row["sequence"]
        return breaks
