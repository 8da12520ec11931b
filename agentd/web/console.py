"""The operator console (docs/web.md, "The console"): server-rendered pages over the same views as the API,
a login with a token that becomes a session cookie, a CSRF token in every form, and a confirmation with
a dry-run count before anything acts on more than one task."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from agentd import control
from agentd.config import Config
from agentd.edge import INT64_MAX
from agentd.records import TaskRecord
from agentd.store import Store
from agentd.vocabulary import TASK_STATUSES
from agentd.web import inputs
from agentd.web.app import Forbidden, Unauthorized, Web, bearer, check_token, session_of, web_of
from agentd.web.auth import COOKIE, Operator
from agentd.web.events_page import PAGE_MAX, event_query, page_of
from agentd.web.live import attempt_live
from agentd.web.task_page import page_context
from agentd.web.timeline import timeline_svg
from agentd.web.views import (
    ACTIVITY_TYPES,
    call_id_of,
    jsonable,
    refuse_unless_applies,
    status_view,
    task_view,
    waiting_on_a_person,
)

LOGIN_COOKIE = "agentd_login"  # the login form's own CSRF nonce, before there is a session
FLASH_COOKIE = "agentd_flash"  # what the last action did, said once on the page it returns to
FLASH_CHARS = 300
BULK_MAX = 1000  # tasks one confirmed action may act on
RETRYABLE = ("permanent_failure", "blocked", "operator_canceled")


def page(request: Request, name: str, operator: Operator | None, csrf: str, **context: Any) -> Response:
    """A page of the console with what every page shows (the operator, the CSRF token, the agent)."""
    web = web_of(request)
    values = {"operator": operator, "csrf": csrf, "agent_id": web.config.agent.agent_id, "now": web.clock.now()}
    flash = request.cookies.get(FLASH_COOKIE)
    values |= {"flash": unquote(flash)[:FLASH_CHARS] if flash and operator else None} | context
    answer = web.templates.TemplateResponse(request, name, values)
    if flash:
        answer.delete_cookie(FLASH_COOKIE, path="/", httponly=True, samesite="strict")
    return answer


async def viewer(request: Request) -> tuple[Operator, str]:
    """The session's operator and the CSRF token its forms carry; a page asked for with a bearer token
    (a script's, docs/web.md "Tokens and sessions") is that token's operator's, with no session's forms."""
    if "authorization" in request.headers:
        return await bearer(request), ""
    operator, session = await session_of(request)
    return operator, web_of(request).sessions.csrf(session)


async def posted(request: Request) -> tuple[Operator, dict[str, str]]:
    """A console POST: a live session, then its form (each field once), refused (403, nothing done) without
    the session's own CSRF token."""
    operator, pairs = await posted_pairs(request)
    return operator, dict(pairs)


async def posted_pairs(request: Request) -> tuple[Operator, list[tuple[str, str]]]:
    """`posted`, each field as often as it was sent. A bearer token needs no CSRF token: a browser never
    sends one of its own accord, so no other site's page can make it act."""
    if "authorization" in request.headers:
        return await bearer(request), await inputs.form_pairs(request)
    operator, session = await session_of(request)
    pairs = await inputs.form_pairs(request)
    if not web_of(request).sessions.csrf_ok(session, dict(pairs).get("csrf")):
        raise Forbidden("the form's CSRF token is missing or not this session's: reload the page and try again")
    return operator, pairs


def back(path: str, said: str | None = None) -> RedirectResponse:
    """A 303 to the page an action returns to (a reload does not post again), which says once what the
    action did (`said`, a short-lived cookie the next page shows and drops)."""
    answer = RedirectResponse(path, status_code=303)
    if said:
        answer.set_cookie(FLASH_COOKIE, quote(said[:FLASH_CHARS]), max_age=60, httponly=True, samesite="strict")
    return answer


# --- login --------------------------------------------------------------------------------------------


async def login_page(request: Request, *, failed: str | None = None, status: int = 200) -> Response:
    """GET /login: the form, with a CSRF token bound to a nonce cookie of its own."""
    web = web_of(request)
    nonce = request.cookies.get(LOGIN_COOKIE) or secrets.token_hex(16)
    answer = page(request, "login.html", None, web.sessions.login_csrf(nonce), failed=failed)
    answer.status_code = status
    answer.set_cookie(LOGIN_COOKIE, nonce, httponly=True, samesite="strict", path="/login")
    return answer


async def login(request: Request) -> Response:
    """A token from the form: a session cookie (HttpOnly, SameSite=Strict), or the form again."""
    web = web_of(request)
    fields = await inputs.form(request)
    if not web.sessions.login_csrf_ok(request.cookies.get(LOGIN_COOKIE), fields.get("csrf")):
        raise Forbidden("the login form's CSRF token is missing or wrong: reload the login page")
    try:
        operator = await check_token(request, fields.get("token", ""))
    except Unauthorized as exc:
        return await login_page(request, failed=str(exc), status=401)
    answer = back("/")
    cookie = web.sessions.issue(operator.token_id)
    max_age = int(web.sessions.lifetime_s)
    answer.set_cookie(COOKIE, cookie, max_age=max_age, httponly=True, samesite="strict", path="/")
    answer.delete_cookie(LOGIN_COOKIE, path="/login", httponly=True, samesite="strict")
    return answer


async def logout(request: Request) -> Response:
    """POST /logout: the session ends (its cookie, kept or copied, is refused from now on), and the
    browser drops the cookie."""
    await posted(request)
    session = web_of(request).sessions.read(request.cookies.get(COOKIE))
    if session is not None:
        web_of(request).sessions.end(session)
    answer = back("/login")
    answer.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
    return answer


# --- pages --------------------------------------------------------------------------------------------


async def overview(request: Request) -> Response:
    """GET /: the queue, dispatch, services, budget, and the running attempts with their activity."""
    operator, csrf = await viewer(request)
    web = web_of(request)
    status, lives = await web.db.call(lambda store: overview_view(web.config, store, web.clock.now()))
    context = {"status": status, "lives": lives, "last_sequence": status["last_sequence"]}
    return page(request, "overview.html", operator, csrf, activity_types=ACTIVITY_TYPES, **context)


def overview_view(config: Config, store: Store, now: datetime) -> tuple[dict[str, Any], dict[str, Any]]:
    """The status, and each running attempt's progress and newest lines (agentd/web/live.py), in one read."""
    with store.snapshot():
        status = status_view(config, store, now)
        return status, {r["attempt_id"]: attempt_live(store, r["task_id"], r["attempt_id"]) for r in status["running"]}


async def tasks(request: Request) -> Response:
    """GET /tasks: filtered by status and type; a many-task retry for the statuses it can retry."""
    operator, csrf = await viewer(request)
    query = request.query_params
    status = query.get("status") or None
    statuses = (inputs.choice(status, "query.status", TASK_STATUSES),) if status else ()
    task_type = inputs.optional_text(query.get("type"), "query.type", max_chars=128)
    found, last = await web_of(request).db.call(lambda store: tasks_read(store, statuses, task_type))
    listed = [jsonable(t) for t in found]
    context = {"tasks": listed, "status": status, "task_type": task_type, "statuses": TASK_STATUSES}
    return page(request, "tasks.html", operator, csrf, retryable=RETRYABLE, last_sequence=last, **context)


def tasks_read(store: Store, statuses: tuple[str, ...], task_type: str | None) -> tuple[list[TaskRecord], int]:
    """The tasks a list shows and the event it was read at (the page's live stream follows from there)."""
    with store.snapshot():
        return store.tasks_matching(statuses=statuses, task_type=task_type, limit=200), store.last_event_sequence()


async def task(request: Request) -> Response:
    """GET /tasks/ID: the task, its attempts with evidence links, its events."""
    operator, csrf = await viewer(request)
    web, task_id = web_of(request), task_id_of(request)
    shown = await web.db.call(lambda store: task_view(web.config, store, task_id))
    timelines = {
        a["attempt_id"]: timeline_svg(f"timeline-{n}", a["timeline"]["steps"]) for n, a in enumerate(shown["attempts"])
    }
    shown |= page_context(shown, web.clock.now())
    shown["events"] = shown["events"][::-1]  # newest first, as the events page
    return page(request, "task.html", operator, csrf, timelines=timelines, **shown)


async def approvals(request: Request) -> Response:
    """GET /approvals: approve (a note optional) or deny (a reason required)."""
    operator, csrf = await viewer(request)
    db, now = web_of(request).db, web_of(request).clock.now()
    (waiting, calls), last = await db.call(lambda store: (waiting_on_a_person(store, now), store.last_event_sequence()))
    return page(request, "approvals.html", operator, csrf, approvals=waiting, calls=calls, last_sequence=last)


async def events(request: Request) -> Response:
    """GET /events: newest first, filtered by type, task and time, a page older or newer than a sequence
    (agentd/web/events_page.py)."""
    operator, csrf = await viewer(request)
    web = web_of(request)
    query = event_query(request.query_params, request.query_params.getlist("type"), web.clock.now())

    def read(store: Store) -> list[dict[str, Any]]:
        if query.task_id is not None:
            store.get_task_or_raise(query.task_id)  # a task that does not exist: a 404, not an empty page
        found: list[dict[str, Any]] = store.event_page(
            before=query.before,
            after=query.after,
            task_id=query.task_id,
            types=query.types,
            since=query.since,
            until=query.until,
            limit=query.limit + 1,
        )
        return found

    shown = page_of(await web.db.call(read), query)
    return page(request, "events.html", operator, csrf, query=query, task_id=query.task_id, page_max=PAGE_MAX, **shown)


def task_id_of(request: Request) -> int:
    """The task id in the path, or a 422 naming path.task_id."""
    return inputs.integer(request.path_params["task_id"], "path.task_id", low=1, high=INT64_MAX)


# --- actions ------------------------------------------------------------------------------------------


def act(
    verb: Callable[[Web, Store, int | None, dict[str, str], Operator], str], said: str = ""
) -> Callable[[Request], Any]:
    """A console POST: session, CSRF, the control verb, then back to the page it names, which says what
    was done (`said`, its `{task_id}` filled in)."""

    async def endpoint(request: Request) -> Response:
        operator, fields = await posted(request)
        web = web_of(request)
        task_id = task_id_of(request) if "task_id" in request.path_params else None
        path = await web.db.call(lambda store: verb(web, store, task_id, fields, operator))
        return back(path, said.format(task_id=task_id))

    return endpoint


def do_approve(web: Web, store: Store, task_id: int | None, fields: dict[str, str], operator: Operator) -> str:
    """`agentd approve ID [--note]`."""
    assert task_id is not None
    refuse_unless_applies(web.config, store, task_id, "approve")
    note = inputs.note(fields.get("note"), "body.note")
    now = web.clock.now()
    control.resolve_approval(web.config, store, task_id, approved=True, note=note, now=now, by=operator.name)
    return f"/tasks/{task_id}" if fields.get("back") == "task" else "/approvals"


def do_deny(web: Web, store: Store, task_id: int | None, fields: dict[str, str], operator: Operator) -> str:
    """`agentd deny ID --reason`: a reason is required."""
    assert task_id is not None
    refuse_unless_applies(web.config, store, task_id, "deny")
    reason = inputs.note(fields.get("reason"), "body.reason", required=True)  # a reason is required to deny
    now = web.clock.now()
    control.resolve_approval(web.config, store, task_id, approved=False, note=reason, now=now, by=operator.name)
    return f"/tasks/{task_id}" if fields.get("back") == "task" else "/approvals"


def call_act(approved: bool) -> Callable[[Request], Any]:
    """A console answer to a held tool call (`agentd approve --call` / `deny --call`; docs/policy.md)."""
    field = "note" if approved else "reason"

    async def endpoint(request: Request) -> Response:
        operator, fields = await posted(request)
        call_id = call_id_of(request.path_params["call_id"])
        note = inputs.note(fields.get(field), f"body.{field}", required=not approved)
        web = web_of(request)
        await web.db.call(
            lambda store: control.resolve_call(
                web.config, store, call_id, approved=approved, note=note, now=web.clock.now(), by=operator.name
            )
        )
        return back("/approvals", f"{'Allowed' if approved else 'Denied'} tool call {call_id}.")

    return endpoint


def do_pause(web: Web, store: Store, task_id: int | None, fields: dict[str, str], operator: Operator) -> str:
    """`agentd dispatch pause [--reason]`."""
    reason = inputs.note(fields.get("reason"), "body.reason")
    control.pause_dispatch(web.config, store, reason, web.clock.now(), by=operator.name)
    return "/"


def do_resume(web: Web, store: Store, task_id: int | None, fields: dict[str, str], operator: Operator) -> str:
    """`agentd dispatch resume`."""
    control.resume_dispatch(web.config, store, web.clock.now(), by=operator.name)
    return "/"


def do_cancel(web: Web, store: Store, task_id: int | None, fields: dict[str, str], operator: Operator) -> str:
    """`agentd task cancel ID`."""
    assert task_id is not None
    refuse_unless_applies(web.config, store, task_id, "cancel")
    control.cancel_task(web.config, store, task_id, web.clock.now(), by=operator.name)
    return f"/tasks/{task_id}"


def do_retry(web: Web, store: Store, task_id: int | None, fields: dict[str, str], operator: Operator) -> str:
    """`agentd task retry ID`."""
    assert task_id is not None
    refuse_unless_applies(web.config, store, task_id, "retry")
    control.retry_task(web.config, store, task_id, None, web.clock.now(), by=operator.name)
    return f"/tasks/{task_id}"


async def retry_all(request: Request) -> Response:
    """Retry every task of one status and type: first a page with the dry-run count and a confirmation
    of that count; only a confirmation whose count is still the count acts (one changed in between is
    shown again, counted anew)."""
    operator, fields = await posted(request)
    web = web_of(request)
    status = inputs.choice(fields.get("status"), "body.status", RETRYABLE)
    task_type = inputs.optional_text(fields.get("type"), "body.type", max_chars=128)
    found = await web.db.call(Store.tasks_matching, statuses=(status,), task_type=task_type, limit=BULK_MAX)
    ids = [t.task_id for t in found]
    confirmed = fields.get("confirm") == "yes"
    if not confirmed or fields.get("expected") != str(len(ids)) or not ids:
        changed = confirmed and fields.get("expected") != str(len(ids))
        csrf = web.sessions.csrf((await session_of(request))[1])
        context = {"count": len(ids), "status": status, "task_type": task_type, "changed": changed}
        return page(request, "confirm.html", operator, csrf, **context)

    def retry_each(store: Store) -> None:
        for task_id in ids:
            control.retry_task(web.config, store, task_id, None, web.clock.now(), by=operator.name)

    await web.db.call(retry_each)
    return back(f"/tasks?status=pending&type={task_type or ''}", f"Retried {len(ids)} task{'s' * (len(ids) != 1)}.")


def routes() -> list[BaseRoute]:
    """The console's pages and forms (docs/web.md, "The console")."""
    return [
        Route("/login", login_page),
        Route("/login", login, methods=["POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/", overview),
        Route("/tasks", tasks),
        Route("/tasks/retry-all", retry_all, methods=["POST"]),
        Route("/tasks/{task_id}", task),
        Route("/tasks/{task_id}/cancel", act(do_cancel, "Canceled task {task_id}."), methods=["POST"]),
        Route(
            "/tasks/{task_id}/retry", act(do_retry, "Retried task {task_id}: it waits to run again."), methods=["POST"]
        ),
        Route("/approvals", approvals),
        Route("/approvals/{task_id}/approve", act(do_approve, "Approved task {task_id}."), methods=["POST"]),
        Route("/approvals/{task_id}/deny", act(do_deny, "Denied task {task_id}."), methods=["POST"]),
        Route("/calls/{call_id}/approve", call_act(True), methods=["POST"]),
        Route("/calls/{call_id}/deny", call_act(False), methods=["POST"]),
        Route("/events", events),
        Route("/pause", act(do_pause, "Dispatch paused: no task is claimed until resumed."), methods=["POST"]),
        Route("/resume", act(do_resume, "Dispatch resumed."), methods=["POST"]),
    ]
