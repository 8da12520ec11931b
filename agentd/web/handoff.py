"""Approval hand-off (docs/web.md, "Approval hand-off"): each approval request is sent once, signed, to
the `[web] approval_handler` webhook with its run context (task, attempt, dispatch context), and a
resolution through the API must bring back the context of the request still pending (a stale or
mismatched one is refused, nothing resolved)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio

from agentd.control.handlers import send_signed
from agentd.errors import InputError
from agentd.records.messages import Delivery, Sent, WebhookHandler
from agentd.store import Store
from agentd.store.web import Handoff
from agentd.web.inputs import BadInput

if TYPE_CHECKING:
    from agentd.web.app import Web

logger = logging.getLogger(__name__)
CONTEXT_KEYS = ("approval_id", "task_id", "attempt_id", "dispatch_context")
POLL_S = 2.0  # how often the service looks for a new approval request (and a due resend)
MAX_SENDS = 8  # then the hand-off has failed for good (the console still shows the approval)
BACKOFF_S, BACKOFF_MAX_S = 15.0, 900.0


def run_context(store: Store, task_id: int) -> dict[str, Any]:
    """What a task's pending approval carries: the approval id, the task, its last attempt and the
    dispatch context it was submitted with (and, for a person reading it, the scope and reason)."""
    return store.approval_context(task_id)


def check_context(store: Store, task_id: int, given: Any) -> None:
    """The context a resolution brings must be the pending request's own, key by key: another approval
    of the same task (a stale hand-off), another attempt or another origin is a 409."""
    if not isinstance(given, dict):
        raise BadInput(422, f"a JSON {type(given).__name__}", "body.context", "the context the hand-off carried")
    try:
        current = run_context(store, task_id)
    except InputError as exc:
        raise BadInput(409, f"stale context: {exc}", "body.context.approval_id", "a pending approval's") from None
    for key in CONTEXT_KEYS:
        if given.get(key) != current[key]:
            what = f"{key} is {str(given.get(key))[:80]!r}; the pending request's is {str(current[key])[:80]!r}"
            raise BadInput(409, f"stale or mismatched context: {what}", f"body.context.{key}", "the pending request's")


def message(store: Store, agent_id: str, task_id: int) -> dict[str, Any]:
    """The body a hand-off POSTs: the run context, what the task is, and where to resolve it. The
    resolving app sends back `context` (CONTEXT_KEYS of this) with its approve or deny."""
    context = run_context(store, task_id)
    task = store.get_task_or_raise(task_id)
    return {
        "type": "agentd.approval_requested",
        "agent_id": agent_id,
        **context,
        "task_type": task.task_type,
        "subject": task.subject,
        "context": {key: context[key] for key in CONTEXT_KEYS},
        "resolve": {"approve": f"/api/approvals/{task_id}/approve", "deny": f"/api/approvals/{task_id}/deny"},
    }


def record_new(store: Store, agent_id: str, handler_id: str, now: datetime) -> int:
    """A hand-off row for each approval request not handed off yet, its message fixed now."""
    found = store.approvals_not_handed_off()
    for approval_id, task_id in found:
        try:
            body = message(store, agent_id, task_id)
        except InputError:  # resolved in between: nothing to hand off
            continue
        store.record_handoff(approval_id, task_id, handler_id, body, now)
    return len(found)


def next_step(sent: Sent, handoff: Handoff, now: datetime) -> tuple[str, datetime]:
    """sent, pending again at a later moment, or failed (refused, or out of sends)."""
    if sent.outcome == "delivered":
        return "sent", now
    if sent.outcome == "rejected" or handoff.attempts + 1 >= MAX_SENDS:
        return "failed", now
    wait = sent.retry_after_s if sent.retry_after_s is not None else BACKOFF_S * 2**handoff.attempts
    return "pending", (sent.retry_at or now + timedelta(seconds=min(wait, BACKOFF_MAX_S)))


async def hand_off_due(web: Web) -> int:
    """One pass: record the new approval requests, then send each hand-off that is due. The count sent."""
    handler_id = web.config.web.approval_handler
    handler = web.config.message_handlers.get(handler_id) if handler_id else None
    if handler_id is None or not isinstance(handler, WebhookHandler):
        return 0
    await web.db.call(record_new, web.config.agent.agent_id, handler_id, web.clock.now())
    due = await web.db.call(Store.due_handoffs, web.clock.now())
    for handoff in due:
        await send_one(web, handler, handoff)
    return len(due)


async def send_one(web: Web, handler: WebhookHandler, handoff: Handoff) -> None:
    """One signed send of a hand-off, and what it came to recorded."""
    delivery = Delivery(
        outbox_id=0,
        idempotency_key=f"approval-{handoff.approval_id}",
        task_id=handoff.task_id,
        handler_id=handoff.handler_id,
        message=handoff.context,
        status="pending",
        attempts=handoff.attempts + 1,
        in_flight=True,
        next_attempt_at=None,
        last_error=handoff.last_error,
    )
    stamp = str(int(web.clock.now().timestamp()))
    sent = await send_signed(handler, delivery, web.config.web.approval_secret_key, stamp)
    now = web.clock.now()
    status, next_at = next_step(sent, handoff, now)
    await web.db.call(Store.finish_handoff_attempt, handoff, status, sent.error, next_at, now)


async def keep_handing_off(web: Web, poll_s: float = POLL_S) -> None:
    """The service's loop while it runs (only with an approval_handler): one pass every poll_s."""
    while not web.stopping.is_set():
        try:
            await hand_off_due(web)
        except Exception:  # a bug or a database error here costs the hand-off a pass, never the console
            logger.exception("approval hand-off pass failed; trying again in %.0fs", poll_s)
        with anyio.move_on_after(poll_s):
            await web.stopping.wait()
