"""Message delivery's SQL: an outbox message handed to its handler, each attempt recorded as started
(committed before anything is sent) and as ended, an operator's retry, and the outbox as listed.
What to do is decided above (agentd/control/delivery.py) and passed in; each verb is one transaction with its
event. Events carry the key, the handler, the attempt and the error, never the message itself."""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agentd.edge import quoted
from agentd.errors import InputError, NotFound
from agentd.records import OutboxEntry
from agentd.store.base import StoreBase, dumps, loads, parse_optional_ts, ts
from agentd.store.outbox import HELD, entry_from_row, settle, still_pending
from agentd.store.rows import unreadable

if TYPE_CHECKING:  # pydantic's module
    from agentd.records.messages import Delivery, DeliveryStep, OutboxItem

DELIVERY = """SELECT d.outbox_id, o.idempotency_key, o.task_id, o.payload, d.handler_id, d.status, d.attempts,
       d.in_flight, d.next_attempt_at, d.last_error
FROM deliveries d JOIN outbox o ON o.id = d.outbox_id"""
# A message's state folds its delivery in: pending, delivered or failed while it has one; else the
# outbox row's own status (pending, applied, refused, awaiting_handler: recorded before handlers existed).
ITEM = f"""SELECT o.id, o.kind, o.idempotency_key, o.task_id, o.result, o.created_at, o.applied_at,
       COALESCE(d.status, o.status) AS state, d.handler_id, d.attempts, d.next_attempt_at, d.last_error,
       o.status = 'pending' AND {HELD} AS held
FROM outbox o LEFT JOIN deliveries d ON d.outbox_id = o.id"""
INTERRUPTED = (
    "interrupted: the dispatcher stopped during this attempt; the receiver may have the message, "
    "so it is sent again with the same key"
)


def delivery_from_row(row: sqlite3.Row) -> Delivery:
    from agentd.records.messages import Delivery  # pydantic's module: loaded where it is used

    return Delivery(
        outbox_id=row["outbox_id"],
        idempotency_key=row["idempotency_key"],
        task_id=row["task_id"],
        handler_id=row["handler_id"],
        message=loads(row["payload"]),
        status=row["status"],
        attempts=row["attempts"],
        in_flight=bool(row["in_flight"]),
        next_attempt_at=parse_optional_ts(row["next_attempt_at"]),
        last_error=row["last_error"],
    )


def item_from_row(row: sqlite3.Row) -> OutboxItem:
    from agentd.records.messages import OutboxItem  # pydantic's module: loaded where it is used

    created_at = parse_optional_ts(row["created_at"])
    assert created_at is not None
    result = loads(row["result"]) or {}
    if not isinstance(result, dict):
        raise unreadable("outbox", "id", row, ValueError(f"result: expected an object, found {quoted(result, 60)}"))
    return OutboxItem(
        outbox_id=row["id"],
        kind=row["kind"],
        idempotency_key=row["idempotency_key"],
        task_id=row["task_id"],
        state=row["state"],
        handler_id=row["handler_id"] or result.get("handler"),
        attempts=row["attempts"] or 0,
        next_attempt_at=parse_optional_ts(row["next_attempt_at"]),
        last_error=row["last_error"],
        reason=result.get("reason") or (f"held until `agentd approve {row['task_id']}`" if row["held"] else None),
        created_at=created_at,
        settled_at=parse_optional_ts(row["applied_at"]),
    )


class DeliveryVerbs(StoreBase):
    def hand_over_message(self, entry: OutboxEntry, handler_id: str | None, refusal: str | None, now: datetime) -> bool:
        """Give a pending message to its handler (a delivery due now) or refuse it with `refusal`, in one
        transaction with its outbox row; a re-run after a crash finds the row settled and does nothing.
        True if a delivery was created."""
        with self.transaction():
            if not still_pending(self.tx, entry.outbox_id):
                return False
            if handler_id is None:
                settle(self.tx, entry, "refused", {"reason": refusal or "no message handler configured"}, now)
                return False
            self.tx.execute(
                """INSERT INTO deliveries (outbox_id, handler_id, next_attempt_at, created_at, updated_at)
                   VALUES (?, ?, ?, ?, ?)""",
                (entry.outbox_id, handler_id, ts(now), ts(now), ts(now)),
            )
            settle(self.tx, entry, "awaiting_handler", {"handler": handler_id}, now)
        return True

    def due_deliveries(self, now: datetime, limit: int = 50) -> list[Delivery]:
        """Pending messages whose next attempt is due, the longest due first."""
        rows = self.tx.execute(
            f"""{DELIVERY} WHERE d.status = 'pending' AND d.in_flight = 0 AND d.next_attempt_at <= ?
                ORDER BY d.next_attempt_at, d.outbox_id LIMIT ?""",
            (ts(now), limit),
        ).fetchall()
        return [delivery_from_row(r) for r in rows]

    def next_delivery_at(self) -> datetime | None:
        """When the next pending message falls due (None: none is pending)."""
        row = self.tx.execute(
            "SELECT MIN(next_attempt_at) FROM deliveries WHERE status = 'pending' AND in_flight = 0"
        ).fetchone()
        return parse_optional_ts(row[0])

    def sweep_deliveries(self, now: datetime) -> int:
        """Attempts a dead dispatcher left in flight (only the lock holder delivers, so any in flight at
        its start are a predecessor's): each is recorded interrupted and falls due now, to be sent again
        under the same key. Returns how many."""
        with self.transaction():
            swept = [delivery_from_row(r) for r in self.tx.execute(f"{DELIVERY} WHERE d.in_flight = 1")]
            for delivery in swept:
                self.tx.execute(
                    """UPDATE deliveries SET in_flight = 0, next_attempt_at = ?, last_error = ?, updated_at = ?
                       WHERE outbox_id = ?""",
                    (ts(now), INTERRUPTED, ts(now), delivery.outbox_id),
                )
                self._delivery_event(
                    "message_delivery_attempted", delivery, now, outcome="interrupted", error=INTERRUPTED
                )
        return len(swept)

    def start_delivery_attempt(self, outbox_id: int, now: datetime) -> Delivery | None:
        """The next attempt begins: counted and marked in flight, committed before anything is sent, so a
        crash from here on leaves a row the next dispatcher re-sends. None if the message is not pending."""
        with self.transaction():
            cursor = self.tx.execute(
                """UPDATE deliveries SET attempts = attempts + 1, in_flight = 1, updated_at = ?
                   WHERE outbox_id = ? AND status = 'pending' AND in_flight = 0""",
                (ts(now), outbox_id),
            )
            if cursor.rowcount == 0:
                return None
            delivery = delivery_from_row(self.tx.execute(f"{DELIVERY} WHERE d.outbox_id = ?", (outbox_id,)).fetchone())
            self._delivery_event("message_delivery_started", delivery, now)
        return delivery

    def finish_delivery_attempt(self, delivery: Delivery, step: DeliveryStep, now: datetime) -> None:
        """Record how the attempt ended: delivered (the outbox row applied), pending again until
        `step.next_attempt_at`, or failed (the outbox row refused with the error)."""
        with self.transaction():
            cursor = self.tx.execute(
                """UPDATE deliveries SET status = :status, in_flight = 0, next_attempt_at = :next, last_error = :error,
                       updated_at = :now, delivered_at = CASE WHEN :status = 'delivered' THEN :now END
                   WHERE outbox_id = :id AND status = 'pending'""",
                {
                    "status": step.status,
                    "next": ts(step.next_attempt_at),
                    "error": step.error if step.status != "delivered" else None,
                    "now": ts(now),
                    "id": delivery.outbox_id,
                },
            )
            if cursor.rowcount == 0:
                return  # settled meanwhile: nothing of this attempt is recorded twice
            if step.status == "pending":
                self._delivery_event(
                    "message_delivery_attempted",
                    delivery,
                    now,
                    outcome="retry",
                    error=step.error,
                    next_attempt_at=ts(step.next_attempt_at),
                )
                return
            result: dict[str, Any] = {"handler": delivery.handler_id, "attempts": delivery.attempts}
            if step.status == "failed":
                result["reason"] = f"delivery failed after {delivery.attempts} attempt(s): {step.error}"
            self.tx.execute(
                "UPDATE outbox SET status = ?, result = ?, applied_at = ? WHERE id = ?",
                ("applied" if step.status == "delivered" else "refused", dumps(result), ts(now), delivery.outbox_id),
            )
            event = "message_delivered" if step.status == "delivered" else "message_delivery_failed"
            self._delivery_event(event, delivery, now, error=step.error)

    def retry_message(
        self, outbox_id: int, handler_id: str | None, refusal: str | None, requested_by: str, now: datetime
    ) -> None:
        """An operator's retry: a failed message (or one recorded before it could have a handler) is
        handed to `handler_id` again, pending now with its attempts reset and its key unchanged."""
        with self.transaction():
            item = self.outbox_item(outbox_id)
            if item.kind != "external_message":
                raise InputError(f"outbox entry {outbox_id} is a {item.kind}: only external messages are retried")
            if item.state not in ("failed", "awaiting_handler"):
                raise InputError(
                    f"message {outbox_id} is {item.state}: only a failed message (or one awaiting a handler) "
                    "can be retried"
                )
            if handler_id is None:
                raise InputError(f"message {outbox_id} cannot be retried: {refusal}")
            self.tx.execute(
                """INSERT INTO deliveries (outbox_id, handler_id, next_attempt_at, created_at, updated_at)
                   VALUES (:id, :handler, :now, :now, :now)
                   ON CONFLICT (outbox_id) DO UPDATE SET handler_id = :handler, status = 'pending', attempts = 0,
                       in_flight = 0, next_attempt_at = :now, updated_at = :now, delivered_at = NULL""",
                {"id": outbox_id, "handler": handler_id, "now": ts(now)},
            )
            self.tx.execute(
                "UPDATE outbox SET status = 'awaiting_handler', result = ?, applied_at = NULL WHERE id = ?",
                (dumps({"handler": handler_id}), outbox_id),
            )
            self.tx.event(
                "message_retry_requested",
                now,
                task_id=item.task_id,
                payload={
                    "outbox_id": outbox_id,
                    "key": item.idempotency_key,
                    "handler": handler_id,
                    "was": item.state,
                    "requested_by": requested_by,
                },
            )

    def failed_message_count(self) -> int:
        """External messages whose delivery failed for good (refused by the receiver, or out of
        attempts) and that no one has retried: `agentd status` and `agentd_messages_failed`."""
        return int(self.tx.execute("SELECT COUNT(*) FROM deliveries WHERE status = 'failed'").fetchone()[0])

    def outbox_entry(self, outbox_id: int) -> OutboxEntry:
        """One outbox row with its payload; NotFound if there is none."""
        row = self.tx.execute("SELECT * FROM outbox WHERE id = ?", (outbox_id,)).fetchone()
        if row is None:
            raise NotFound(f"no outbox entry {outbox_id}; `agentd outbox list` shows them")
        return entry_from_row(row)

    def list_outbox(self, *, state: str | None = None, limit: int = 50) -> list[OutboxItem]:
        """Newest first; only those in `state` when given (a message's delivery state counts)."""
        rows = self.tx.execute(
            f"{ITEM} WHERE ?1 IS NULL OR COALESCE(d.status, o.status) = ?1 ORDER BY o.id DESC LIMIT ?2",
            (state, limit),
        ).fetchall()
        return [item_from_row(r) for r in rows]

    def outbox_item(self, outbox_id: int) -> OutboxItem:
        """One outbox row as `agentd outbox list` shows it; NotFound if there is none."""
        row = self.tx.execute(f"{ITEM} WHERE o.id = ?", (outbox_id,)).fetchone()
        if row is None:
            raise NotFound(f"no outbox entry {outbox_id}; `agentd outbox list` shows them")
        return item_from_row(row)

    def _delivery_event(self, event_type: str, delivery: Delivery, now: datetime, **fields: Any) -> None:
        payload = {
            "outbox_id": delivery.outbox_id,
            "key": delivery.idempotency_key,
            "handler": delivery.handler_id,
            "attempt": delivery.attempts,
            **{k: v for k, v in fields.items() if v is not None},
        }
        self.tx.event(event_type, now, task_id=delivery.task_id, payload=payload)
