"""The JSON API (docs/web.md, "The API"): every endpoint under /api/, a bearer token on every request,
every action through agentd/control with `by` = the token's operator, bad input a 4xx JSON error naming
the field."""

from __future__ import annotations

import codecs
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agentd import control
from agentd.edge import INT64_MAX
from agentd.process.files import read_beneath
from agentd.process.privilege import RESERVED_SOURCES
from agentd.records import TaskIntent
from agentd.records.fleet import DispatchContext
from agentd.store import CallDecided, HeldCall, StaleApproval, Store
from agentd.vocabulary import TASK_STATUSES
from agentd.web import handoff, inputs, stream
from agentd.web.app import Web, bearer, bearer_or_session, web_of
from agentd.web.auth import Operator
from agentd.web.inputs import BadInput
from agentd.web.views import (
    call_id_of,
    evidence_path,
    evidence_root,
    jsonable,
    status_view,
    task_view,
    tasks_view,
    waiting_on_a_person,
)

INTENT_FIELDS = (
    "task_type",
    "source",
    "subject",
    "description",
    "priority",
    "payload",
    "requested_profile_id",
    "requested_adapter_id",
    "requested_model",
    "skill_ids",
    "available_at",
    "schedule",
    "evidence_requirements",
)
SUBMIT_FIELDS = (*INTENT_FIELDS, "require_approval", "dispatch_context")
MAX_LIST = 500
MAX_EVIDENCE_BYTES = 16 * 1024 * 1024  # an evidence file larger than this is fetched from the disk


async def api_status(request: Request) -> Response:
    """GET /api/status: `agentd status --json`, the running attempts' activity, the approvals."""
    operator = await bearer(request)
    web = web_of(request)
    found = await web.db.call(lambda store: status_view(web.config, store, web.clock.now()))
    return JSONResponse(found | {"operator": operator.name})


async def api_tasks(request: Request) -> Response:
    """GET /api/tasks: newest first, by status (repeatable) and type; each task with its state (issue 52)."""
    await bearer(request)
    query = request.query_params
    statuses = tuple(inputs.choice(s, "query.status", TASK_STATUSES) for s in query.getlist("status"))
    task_type = inputs.optional_text(query.get("type"), "query.type", max_chars=128)
    limit = inputs.integer(query.get("limit"), "query.limit", low=1, high=MAX_LIST, default=50)
    web = web_of(request)
    now = web.clock.now()
    found = await web.db.call(
        lambda store: tasks_view(web.config, store, now, statuses=statuses, task_type=task_type, limit=limit)
    )
    return JSONResponse({"tasks": found})


async def api_task(request: Request) -> Response:
    """GET /api/tasks/ID: the task, its attempts with evidence links, its events, its dispatch context."""
    await bearer(request)
    web, task_id = web_of(request), path_id(request)
    return JSONResponse(await web.db.call(lambda store: task_view(web.config, store, task_id)))


async def api_events(request: Request) -> Response:
    """GET /api/events: events after a sequence, in order; `next_after` pages on."""
    await bearer(request)
    query = request.query_params
    after = inputs.integer(query.get("after"), "query.after", low=0, high=INT64_MAX, default=0)
    limit = inputs.integer(query.get("limit"), "query.limit", low=1, high=1000, default=200)
    task_id = inputs.integer(query.get("task_id"), "query.task_id", low=1, high=INT64_MAX, default=0) or None
    types = tuple(inputs.event_type(t, "query.type") for t in query.getlist("type"))
    rows = await web_of(request).db.call(Store.event_rows, after=after, task_id=task_id, types=types, limit=limit)
    return JSONResponse({"events": rows, "next_after": rows[-1]["sequence"] if rows else after})


async def api_stream(request: Request) -> Response:
    """Server-Sent Events from `after` (or the Last-Event-ID a reconnecting client sends)."""
    operator, session = await bearer_or_session(request)
    return stream.response(request, web_of(request), stream.Grant(operator.token_id, session))


async def api_approvals(request: Request) -> Response:
    """GET /api/approvals: what waits for an operator, oldest first."""
    await bearer(request)
    web = web_of(request)
    waiting, calls = await web.db.call(waiting_on_a_person, web.clock.now())
    return JSONResponse({"approvals": waiting, "tool_calls": calls})


def call_resolver(approved: bool) -> Callable[[Request], Any]:
    """POST /api/calls/{call_id}/approve or /deny: a person's answer to a held tool call (docs/policy.md);
    deny needs a reason, a call decided already (by a person or its timeout) is a 409."""
    field = "note" if approved else "reason"

    async def endpoint(request: Request) -> Response:
        operator, scoped = await handoff.resolver_of(request)  # an operator, or the call's own hand-off
        call_id = call_id_of(request.path_params["call_id"])
        body = await inputs.json_object(request)
        inputs.refuse_unknown(body, (field, "context"))
        note = inputs.note(body.get(field), f"body.{field}", required=not approved)
        web = web_of(request)

        def decide(store: Store) -> HeldCall:
            with store.transaction():
                if scoped is not None:
                    handoff.check_call_scope(store, scoped, call_id)
                now = web.clock.now()
                return control.resolve_call(
                    web.config, store, call_id, approved=approved, note=note, now=now, by=operator.name
                )

        try:
            held = await web.db.call(decide)
        except CallDecided as exc:
            raise BadInput(409, str(exc), "path.call_id", "a call that still waits") from None
        decided = {
            "call_id": held.call_id,
            "task_id": held.task_id,
            "status": held.status,
            "by": held.decided_by,
            "input_sha256": held.input_sha256,  # the input decided on (docs/policy.md, "Asking a person")
        }
        return JSONResponse(decided)

    return endpoint


async def api_submit(request: Request) -> Response:
    """`agentd task add`, judged by the same intake (agentd/work/intake.py), with seed 003 §7's
    dispatch context stored in its task_enqueued event."""
    operator = await bearer(request)
    body = await inputs.json_object(request)
    inputs.refuse_unknown(body, SUBMIT_FIELDS)
    intent = intent_of(body, operator)
    context = dispatch_context_of(body.get("dispatch_context"))
    hold = inputs.boolean(body.get("require_approval"), "body.require_approval")
    web = web_of(request)

    def add(store: Store) -> Any:
        now = web.clock.now()
        return control.add_task(
            web.config, store, intent, now, require_approval=hold, by=operator.name, dispatch_context=context
        )

    task = await web.db.call(add)
    return JSONResponse({"task": jsonable(task)}, status_code=201)


def intent_of(body: dict[str, Any], operator: Operator) -> TaskIntent:
    """The task intent of a submission, judged as `agentd task add` judges its options."""
    fields = {name: body[name] for name in INTENT_FIELDS if name in body}
    fields["source"] = source_of(fields.get("source"), operator)
    try:
        return TaskIntent.model_validate(fields)
    except ValidationError as exc:
        raise inputs.from_validation(exc) from None


def source_of(given: Any, operator: Operator) -> str:
    """`web:<operator>` by default; a source of the operator's own, unless it claims a namespace agentd
    sets (as `agentd task add --source` refuses it)."""
    if given is None:
        return f"web:{operator.name}"
    if not isinstance(given, str) or given.split(":", 1)[0].strip().lower() in RESERVED_SOURCES:
        raise BadInput(422, f"found {str(given)[:60]!r}", "body.source", "a source outside agentd's own namespaces")
    return given


def dispatch_context_of(value: Any) -> dict[str, Any] | None:
    """Seed 003 §7's AgentDispatchContext (agentd/records/fleet.py), validated; None when not given."""
    if value is None:
        return None
    try:
        return DispatchContext.model_validate(value).model_dump(mode="json")
    except ValidationError as exc:
        raise inputs.from_validation(exc, "body.dispatch_context") from None


def path_id(request: Request) -> int:
    """The task id in the path: a positive integer, or a 422 naming path.task_id."""
    return inputs.integer(request.path_params["task_id"], "path.task_id", low=1, high=INT64_MAX)


def action(
    verb: Callable[[Web, Store, int, dict[str, Any], Operator], Any], fields: tuple[str, ...]
) -> Callable[[Request], Any]:
    """A POST on one task: the token, the task id, the body (only `fields`), then the control verb."""

    async def endpoint(request: Request) -> Response:
        operator = await bearer(request)
        task_id = path_id(request)
        body = await inputs.json_object(request)
        inputs.refuse_unknown(body, fields)
        web = web_of(request)
        result = await web.db.call(lambda store: verb(web, store, task_id, body, operator))
        return JSONResponse(result)

    return endpoint


def do_cancel(web: Web, store: Store, task_id: int, body: dict[str, Any], operator: Operator) -> dict[str, Any]:
    """`agentd task cancel ID`, by the token's operator."""
    result = control.cancel_task(web.config, store, task_id, web.clock.now(), by=operator.name)
    return {"task": jsonable(result.task), "action": result.action}


def do_retry(web: Web, store: Store, task_id: int, body: dict[str, Any], operator: Operator) -> dict[str, Any]:
    """`agentd task retry ID [--attempts N]`, by the token's operator."""
    attempts = body.get("attempts")
    more = None if attempts is None else inputs.integer(attempts, "body.attempts", low=1, high=control.MAX_ATTEMPTS)
    task = control.retry_task(web.config, store, task_id, more, web.clock.now(), by=operator.name)
    return {"task": jsonable(task)}


def resolver(approved: bool) -> Callable[[Request], Any]:
    """Approve or deny; deny needs a reason. A resolution that brings a hand-off's context must bring
    the context of the request still pending, and a hand-off's own token resolves only that request,
    only with it (docs/web.md, "Approval hand-off"). The check and the resolution are one transaction,
    keyed by the approval: a deny and retry committed meanwhile cannot let the old context approve."""
    fields = ("note", "context") if approved else ("reason", "context")

    async def endpoint(request: Request) -> Response:
        operator, scoped = await handoff.resolver_of(request)
        task_id = path_id(request)
        body = await inputs.json_object(request)
        inputs.refuse_unknown(body, fields)
        web = web_of(request)
        return JSONResponse(await web.db.call(resolve, web, task_id, body, operator, scoped, approved))

    return endpoint


def resolve(
    store: Store, web: Web, task_id: int, body: dict[str, Any], operator: Operator, scoped: str | None, approved: bool
) -> dict[str, Any]:
    where = "body.note" if approved else "body.reason"
    note = inputs.note(body.get("note" if approved else "reason"), where, required=not approved)
    with store.transaction():
        if scoped is not None:
            handoff.check_scope(store, scoped, body.get("context"))
        approval_id = None
        if "context" in body:
            handoff.check_context(store, task_id, body["context"])
            approval_id = body["context"]["approval_id"]
        try:
            task, scope = control.resolve_approval(
                web.config,
                store,
                task_id,
                approved=approved,
                note=note,
                now=web.clock.now(),
                by=operator.name,
                approval_id=approval_id,
            )
        except StaleApproval as exc:
            raise BadInput(409, f"stale context: {exc}", "body.context.approval_id", "a pending approval's") from None
    return {"task": jsonable(task), "scope": scope}


async def api_pause(request: Request) -> Response:
    """POST /api/pause: `agentd dispatch pause [--reason]`."""
    operator = await bearer(request)
    body = await inputs.json_object(request)
    inputs.refuse_unknown(body, ("reason",))
    reason = inputs.note(body.get("reason"), "body.reason")
    web = web_of(request)
    pause, changed = await web.db.call(
        lambda store: control.pause_dispatch(web.config, store, reason, web.clock.now(), by=operator.name)
    )
    return JSONResponse({"paused": True, "changed": changed, "by": pause.paused_by, "reason": pause.reason})


async def api_resume(request: Request) -> Response:
    """POST /api/resume: `agentd dispatch resume`."""
    operator = await bearer(request)
    inputs.refuse_unknown(await inputs.json_object(request), ())
    web = web_of(request)
    ended = await web.db.call(
        lambda store: control.resume_dispatch(web.config, store, web.clock.now(), by=operator.name)
    )
    return JSONResponse({"paused": False, "changed": ended is not None})


def routes() -> list[BaseRoute]:
    """The API's routes (docs/web.md, "The API")."""
    return [
        Route("/api/status", api_status),
        Route("/api/tasks", api_tasks),
        Route("/api/tasks", api_submit, methods=["POST"]),
        Route("/api/tasks/{task_id}", api_task),
        Route("/api/tasks/{task_id}/cancel", action(do_cancel, ()), methods=["POST"]),
        Route("/api/tasks/{task_id}/retry", action(do_retry, ("attempts",)), methods=["POST"]),
        Route("/api/events", api_events),
        Route("/api/events/stream", api_stream),
        Route("/api/approvals", api_approvals),
        Route("/api/approvals/{task_id}/approve", resolver(True), methods=["POST"]),
        Route("/api/approvals/{task_id}/deny", resolver(False), methods=["POST"]),
        Route("/api/calls/{call_id}/approve", call_resolver(True), methods=["POST"]),
        Route("/api/calls/{call_id}/deny", call_resolver(False), methods=["POST"]),
        Route("/api/pause", api_pause, methods=["POST"]),
        Route("/api/resume", api_resume, methods=["POST"]),
        Route("/evidence/{task_id}/{attempt_id}/{name}", evidence_file),
    ]


async def evidence_file(request: Request) -> Response:
    """One file of an attempt's evidence folder, read-only, never through a link (agentd/process/files.py),
    always as an attachment-safe type: the console links to it, no page renders it."""
    await bearer_or_session(request)
    web, task_id = web_of(request), path_id(request)
    relative = evidence_path(task_id, request.path_params["attempt_id"], request.path_params["name"])
    data = await anyio.to_thread.run_sync(read_evidence, evidence_root(web.config), relative)
    if data is None:
        raise BadInput(404, "no such evidence file", "path.name", "a file the task's page lists")
    kind = "text/plain; charset=utf-8" if looks_textual(data) else "application/octet-stream"
    return Response(data, media_type=kind, headers={"content-security-policy": "sandbox; default-src 'none'"})


def read_evidence(root: Path, relative: str) -> bytes | None:
    """The file's bytes, or None for anything that is not a regular file reached without a link."""
    try:
        found = read_beneath(root, relative, MAX_EVIDENCE_BYTES)
    except OSError:  # missing, a link, not a regular file: all the same to a reader
        return None
    if len(found.data) > MAX_EVIDENCE_BYTES:
        raise BadInput(413, f"the file is {found.size} bytes", "path.name", f"at most {MAX_EVIDENCE_BYTES} bytes")
    return found.data


def looks_textual(data: bytes) -> bool:
    """UTF-8 without NUL bytes (in its first 64 KiB): served as text/plain. A character the 64 KiB cut in
    two is not held against it (final=False: an incomplete sequence at the end is left undecoded)."""
    head = data[:65536]
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=len(data) <= len(head))
    except UnicodeDecodeError:
        return False
    return b"\x00" not in head
