"""Approval hand-off (docs/web.md, "Approval hand-off"): each approval request is sent once, signed, to
the `[web] approval_handler` webhook with its run context (task, attempt, dispatch context) and a token
of its own, scoped to approving or denying that one request; a resolution must bring back the context
of the request still pending (a stale or mismatched one is refused, nothing resolved), checked and
resolved in one transaction keyed by the approval. Nothing is sent for a request already resolved."""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
from starlette.requests import Request

from agentd.clock import format_ts
from agentd.config import Config
from agentd.config.environment import read_env_file
from agentd.control.handlers import send_signed
from agentd.errors import ConfigError, InputError
from agentd.records.messages import Delivery, Sent, WebhookHandler
from agentd.store import Handoff, Store
from agentd.web.app import Throttled, Unauthorized, Web, bearer, client_address, web_of
from agentd.web.auth import Operator
from agentd.web.inputs import BadInput

logger = logging.getLogger(__name__)
CONTEXT_KEYS = ("approval_id", "task_id", "attempt_id", "dispatch_context")
POLL_S = 2.0  # how often the service looks for a new approval request (and a due resend)
MAX_SENDS = 8  # then the hand-off has failed for good (the console still shows the approval)
BACKOFF_S, BACKOFF_MAX_S = 15.0, 900.0
TOKEN_PREFIX = "approval."
HANDOFF_TOKEN = re.compile(r"^approval\.(?P<id>[0-9A-Za-z_-]{1,64})\.(?P<mac>[0-9a-f]{64})$")


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


def call_message(store: Store, agent_id: str, call_id: str) -> dict[str, Any]:
    """The body a held tool call's hand-off POSTs (docs/policy.md): what the attempt asks to run, why it
    waits, and where to answer. The call waits at most [policy] ask_timeout_s: a late answer is a 409."""
    held = store.held_call(call_id)
    context = {"approval_id": call_id, "task_id": held.task_id, "attempt_id": held.attempt_id}
    return {
        "type": "agentd.tool_call_requested",
        "agent_id": agent_id,
        "call_id": call_id,
        **context,
        "task_type": held.task_type,
        "subject": held.subject,
        "tool": held.tool,
        "summary": held.summary,
        "input_json": held.input_json,  # whole: what runs if it is allowed (docs/policy.md, "Asking a person")
        "input_chars": held.input_chars,
        "input_sha256": held.input_sha256,
        "rule": held.rule,
        "requested_at": format_ts(held.requested_at),
        "context": context,
        "resolve": {"approve": f"/api/calls/{call_id}/approve", "deny": f"/api/calls/{call_id}/deny"},
    }


def record_new(store: Store, agent_id: str, handler_id: str, now: datetime) -> int:
    """A hand-off row for each approval request and each held tool call not handed off yet, its message
    fixed now."""
    found = store.approvals_not_handed_off()
    for approval_id, task_id in found:
        try:
            body = message(store, agent_id, task_id)
        except InputError:  # resolved in between: nothing to hand off
            continue
        store.record_handoff(approval_id, task_id, handler_id, body, now)
    calls = store.calls_not_handed_off()
    for call_id, task_id in calls:
        store.record_handoff(call_id, task_id, handler_id, call_message(store, agent_id, call_id), now)
    return len(found) + len(calls)


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
        message=with_token(web.config, handoff),
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


def with_token(config: Config, handoff: Handoff) -> dict[str, Any]:
    """The message as recorded, with the hand-off's own token under `resolve` (never stored: derived
    again for each send). Without a secret the send fails anyway, saying why (send_signed)."""
    secret = signing_secret(config)
    if secret is None:
        return handoff.context
    resolve = {**handoff.context.get("resolve", {}), "token": resolve_token(secret, handoff.approval_id)}
    return {**handoff.context, "resolve": resolve}


async def keep_handing_off(web: Web, poll_s: float = POLL_S) -> None:
    """The service's loop while it runs (only with an approval_handler): one pass every poll_s."""
    while not web.stopping.is_set():
        try:
            await hand_off_due(web)
        except Exception:  # a bug or a database error here costs the hand-off a pass, never the console
            logger.exception("approval hand-off pass failed; trying again in %.0fs", poll_s)
        with anyio.move_on_after(poll_s):
            await web.stopping.wait()


# --- the hand-off's own token -----------------------------------------------------------------------


def signing_secret(config: Config) -> str | None:
    """The approval handler's signing secret (`[web] approval_secret_key` in its env_file), or None."""
    handler_id = config.web.approval_handler
    handler = config.message_handlers.get(handler_id) if handler_id else None
    if not isinstance(handler, WebhookHandler) or not handler.env_file:
        return None
    try:
        return read_env_file(Path(handler.env_file)).get(config.web.approval_secret_key) or None
    except ConfigError:
        return None


def resolve_token(secret: str, approval_id: str) -> str:
    """The token a hand-off carries: good for approving or denying this one request, with its context,
    and for nothing else (not an operator's token: no other endpoint takes it). Derived from the signing
    secret, so every resend carries the same one and nothing of it is stored."""
    mac = hmac.new(secret.encode(), f"agentd-approval-resolve:{approval_id}".encode(), hashlib.sha256)
    return f"{TOKEN_PREFIX}{approval_id}.{mac.hexdigest()}"


async def resolver_of(request: Request) -> tuple[Operator, str | None]:
    """Who resolves an approval: an operator's bearer token (None: any approval), or a hand-off token
    (the approval id it is scoped to), counted against the client's failed logins as a token is."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip().startswith(TOKEN_PREFIX):
        return await bearer(request), None
    web, address = web_of(request), client_address(request)
    if (wait := web.throttle.retry_after(address)) is not None:
        raise Throttled(wait)
    found = HANDOFF_TOKEN.fullmatch(given.strip())
    secret = signing_secret(web.config)
    expected = resolve_token(secret, found["id"]) if found and secret else ""
    if not found or not hmac.compare_digest(given.strip().encode(), expected.encode()):
        web.throttle.failed(address)
        raise Unauthorized("the hand-off token is not valid (not one agentd sent, or for another secret)")
    web.throttle.succeeded(address)
    handler = web.config.web.approval_handler
    return Operator(f"approval_handler:{handler}", f"handoff:{found['id']}"), found["id"]


def check_call_scope(store: Store, scoped: str, call_id: str) -> None:
    """A hand-off token answers only the held call it was sent with (a call's hand-off carries no context
    to check: the call id is the whole of it)."""
    if scoped != call_id or store.handoff_of(scoped) is None:
        what = f"this hand-off token answers request {scoped!r} only"
        raise BadInput(403, what, "header.authorization", "the token sent with this call's hand-off")


def check_scope(store: Store, scoped: str, given: Any) -> None:
    """A hand-off token resolves only the request it was sent with, and only with its context."""
    if not isinstance(given, dict):
        raise BadInput(422, "missing", "body.context", "the context the hand-off carried (a hand-off token needs it)")
    if given.get("approval_id") != scoped or store.handoff_of(scoped) is None:
        what = f"this hand-off token resolves approval {scoped!r} only"
        raise BadInput(403, what, "header.authorization", "the token sent with this request's hand-off")
