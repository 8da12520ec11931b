"""Delivering external messages (seed 000 §9: only after verification, only through handlers).

The outbox hands each allowed message of a verified outcome to a handler (`choose_handler`) in one
transaction with its outbox row. The delivery loop runs beside dispatch in the dispatch service (its own
task: a slow receiver never delays the next claim) and sends what is due: each attempt is recorded as
started before anything is sent and as ended after, under the outbox row's idempotency key, never a
new one — a dispatcher that dies mid-send leaves a row its successor sends again with the same key.
Between attempts it backs off exponentially (capped); it sleeps until the next attempt is due.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import anyio

from agentd.clock import Clock
from agentd.config import Config
from agentd.control.handlers import MessageHandler, send
from agentd.errors import contained
from agentd.outlook.metrics import DispatchMetrics, NullMetrics
from agentd.process.wake import Doorbell
from agentd.records import OutboxEntry
from agentd.records.messages import Delivery, DeliveryStep, OutboxItem, Sent
from agentd.store import AsyncStore, Store

logger = logging.getLogger(__name__)

BATCH = 50  # due messages read per pass
CONCURRENCY = 4  # messages sent at once: one slow receiver holds up at most one slot, for its timeout
POLL_S = 5.0  # longest idle sleep: an operator's `agentd outbox retry` is picked up within it
NO_HANDLER = "no message handler configured"


def choose_handler(message: dict[str, Any], config: Config) -> tuple[str | None, str | None]:
    """(handler_id, None) for the handler a message names, else [dispatch] default_message_handler;
    (None, why) when there is none to give it to."""
    named, known = message.get("handler"), config.message_handlers
    if not known:
        return None, NO_HANDLER
    if named is None:
        default = config.dispatch.default_message_handler
        why = f"the message names no handler and [dispatch] default_message_handler is not set ({_listed(known)})"
        return (default, None) if default is not None else (None, why)
    if not isinstance(named, str) or named not in known:
        return None, f"the message names handler {named!r}, which is not configured ({_listed(known)})"
    return named, None


def _listed(known: Mapping[str, object]) -> str:
    return "configured: " + ", ".join(sorted(known))


def next_step(handler: MessageHandler, delivery: Delivery, sent: Sent, now: datetime) -> DeliveryStep:
    """What attempt `delivery.attempts` leads to: delivered; failed (refused for good, or out of
    attempts); else pending again after a backoff."""
    if sent.outcome == "delivered":
        return DeliveryStep("delivered", None, None)
    if sent.outcome == "rejected":
        return DeliveryStep("failed", sent.error, None)
    if delivery.attempts >= handler.max_attempts:
        return DeliveryStep("failed", f"{sent.error} (attempt {delivery.attempts} of {handler.max_attempts})", None)
    wait_s = backoff_s(handler, delivery.attempts, sent, now)
    return DeliveryStep("pending", sent.error, now + timedelta(seconds=wait_s))


def backoff_s(handler: MessageHandler, attempt: int, sent: Sent, now: datetime) -> float:
    """backoff_base_s * 2^(attempt-1), capped at backoff_max_s; longer if the receiver asked (Retry-After),
    but never beyond backoff_max_s: a receiver cannot park a message for longer than its handler allows."""
    delay = min(handler.backoff_base_s * 2.0 ** min(attempt - 1, 60), handler.backoff_max_s)
    asked_s = (sent.retry_at - now).total_seconds() if sent.retry_at is not None else sent.retry_after_s
    if asked_s is not None:
        delay = max(delay, min(asked_s, handler.backoff_max_s))
    return delay


class Deliveries:
    """The delivery loop of one dispatcher (it runs only while the dispatch lock is held)."""

    def __init__(self, config: Config, db: AsyncStore, clock: Clock, metrics: DispatchMetrics | NullMetrics) -> None:
        self.config, self.db, self.clock, self.metrics = config, db, clock, metrics
        self.wake = Doorbell()  # rung when a message is handed over
        self.work_dir = config.paths.state_dir / "deliveries"

    async def hand_over(self, entry: OutboxEntry, now: datetime) -> None:
        """Give a message the outbox holds to its handler, or refuse it (no handler to give it to)."""
        handler_id, refusal = choose_handler(entry.payload, self.config)
        if await self.db.call(Store.hand_over_message, entry, handler_id, refusal, now):
            self.wake.ring()
        elif handler_id is None:
            self.metrics.message_counted("none", "refused")

    async def run(self) -> None:
        """Until cancelled: attempts a dead dispatcher left in flight are re-queued, then each due
        message is sent; sleep until the next is due, a hand-over rings, or POLL_S."""
        await self.db.call(Store.sweep_deliveries, self.clock.now())
        pause = 1.0
        while True:
            with contained(logger, "message_delivery_pass_failed: retrying in %.0fs", pause) as failed:
                await self.deliver_due(self.clock.now())
            if failed.error:
                await self.wake.wait(pause)
                pause = min(pause * 2, POLL_S)
                continue
            pause = 1.0
            await self.wake.wait(await self._idle_s())

    async def deliver_due(self, now: datetime) -> int:
        """Send every message due at `now` (a batch, a few at a time); return how many were tried."""
        due = await self.db.call(Store.due_deliveries, now, BATCH)
        limiter = anyio.CapacityLimiter(CONCURRENCY)
        async with anyio.create_task_group() as group:
            for delivery in due:
                group.start_soon(self._deliver_one, delivery, limiter)
        return len(due)

    async def _deliver_one(self, delivery: Delivery, limiter: anyio.CapacityLimiter) -> None:
        """Each message is its own boundary: what one raises is logged and the others go on (its row
        stays due; a started attempt is swept as interrupted at the next start)."""
        async with limiter:
            with contained(logger, "message %s could not be delivered", delivery.idempotency_key):
                await self.deliver(delivery)

    async def deliver(self, delivery: Delivery) -> None:
        """One attempt at one message: recorded started, sent, its end recorded."""
        handler = self.config.message_handlers.get(delivery.handler_id)
        refusal = _refusal(handler, delivery)
        if refusal is not None:
            await self.db.call(Store.finish_delivery_attempt, delivery, refusal, self.clock.now())
            self.metrics.message_counted(delivery.handler_id if handler else "none", "failed")
            return
        assert handler is not None
        started = await self.db.call(Store.start_delivery_attempt, delivery.outbox_id, self.clock.now())
        if started is None:
            return  # no longer pending (an operator acted meanwhile)
        sent = await send(handler, started, self.work_dir, self.config.dispatch.kill_grace_s)  # never raises
        step = next_step(handler, started, sent, self.clock.now())
        await self.db.call(Store.finish_delivery_attempt, started, step, self.clock.now())
        self.metrics.message_counted(handler.handler_id, "retry" if step.status == "pending" else step.status)

    async def _idle_s(self) -> float:
        upcoming = await self.db.call(Store.next_delivery_at)
        if upcoming is None:
            return POLL_S
        return min(POLL_S, max((upcoming - self.clock.now()).total_seconds(), 0.0))


def _refusal(handler: MessageHandler | None, delivery: Delivery) -> DeliveryStep | None:
    """A message that cannot be attempted again fails without being sent: its handler was removed from
    the config, or its attempts are spent (its last one interrupted, or max_attempts lowered)."""
    if handler is None:
        why = f"handler {delivery.handler_id!r} is no longer configured; restore it, then `agentd outbox retry`"
        return DeliveryStep("failed", why, None)
    if delivery.attempts >= handler.max_attempts:
        return DeliveryStep(
            "failed", f"{delivery.last_error} (attempt {delivery.attempts} of {handler.max_attempts})", None
        )
    return None


def retry_message(config: Config, store: Store, outbox_id: int, requested_by: str, now: datetime) -> OutboxItem:
    """`agentd outbox retry`: hand a failed message (or one recorded before handlers existed) to its
    handler again, with its attempts reset and its key unchanged; the loop sends it within POLL_S."""
    entry = store.outbox_entry(outbox_id)
    handler_id, refusal = choose_handler(entry.payload, config)
    store.retry_message(outbox_id, handler_id, refusal, requested_by, now)
    return store.outbox_item(outbox_id)
