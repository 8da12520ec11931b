"""Steering one task from the API and the console (docs/web.md, "Steer one task"): pause, resume, edit,
complete, fail, link, unlink, each through agentd/control/steering.py with `by` = the operator. The API
acts at once; the console shows a confirmation page first (its CSRF token on both forms)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agentd import frozen_value
from agentd.clock import parse_duration
from agentd.control import steering
from agentd.edge import INT64_MAX
from agentd.store import Store
from agentd.web import inputs
from agentd.web.app import Web, bearer, web_of
from agentd.web.inputs import BadInput
from agentd.web.views import jsonable, refuse_unless_applies

MAX_PAYLOAD_CHARS = 64 * 1024  # a payload typed into the console's form


@frozen_value
class Verb:
    """One steering act: the fields it takes, what it does, and what its confirmation page says."""

    fields: tuple[str, ...]
    act: Callable[[Web, Store, int, dict[str, Any], str], Any]
    says: Callable[[int, dict[str, Any]], str]


def _pause(web: Web, store: Store, task_id: int, body: dict[str, Any], by: str) -> Any:
    reason = inputs.note(body.get("reason"), "body.reason")
    task, changed = steering.pause_task(web.config, store, task_id, reason, web.clock.now(), by=by)
    return {"task": jsonable(task), "changed": changed}


def _resume(web: Web, store: Store, task_id: int, body: dict[str, Any], by: str) -> Any:
    task, _ = steering.resume_task(web.config, store, task_id, web.clock.now(), by=by)
    return {"task": jsonable(task)}


def _edit(web: Web, store: Store, task_id: int, body: dict[str, Any], by: str) -> Any:
    priority = (
        None
        if body.get("priority") in (None, "")
        else inputs.integer(body["priority"], "body.priority", low=1, high=10)
    )
    task = steering.edit_task(
        web.config,
        store,
        task_id,
        web.clock.now(),
        priority=priority,
        delay_s=_delay(body.get("delay")),
        at=inputs.optional_text(body.get("available_at"), "body.available_at", max_chars=64),
        payload=_payload(body.get("payload")),
        by=by,
    )
    return {"task": jsonable(task)}


def _delay(value: Any) -> float | None:
    if value in (None, ""):
        return None
    try:
        return parse_duration(str(value), "m")
    except ValueError as exc:
        raise BadInput(422, str(exc), "body.delay", "a duration: 90s, 15m, 2h, 1d (a bare number is minutes)") from None


def _payload(value: Any) -> dict[str, Any] | None:
    """A JSON object, or its text as a form gives it."""
    if value in (None, ""):
        return None
    if isinstance(value, str):
        if len(value) > MAX_PAYLOAD_CHARS:
            raise BadInput(422, f"{len(value):,} characters", "body.payload", f"at most {MAX_PAYLOAD_CHARS:,}")
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise BadInput(422, f"not JSON: {exc}", "body.payload", "a JSON object") from None
    if not isinstance(value, dict):
        raise BadInput(422, f"found {type(value).__name__}", "body.payload", "a JSON object")
    return value


def _closer(status: steering.Declared) -> Callable[[Web, Store, int, dict[str, Any], str], Any]:
    def close(web: Web, store: Store, task_id: int, body: dict[str, Any], by: str) -> Any:
        reason = inputs.note(body.get("reason"), "body.reason", required=True)
        task = steering.close_task(web.config, store, task_id, status, reason, web.clock.now(), by=by)
        return {"task": jsonable(task)}

    return close


def _linker(linked: bool) -> Callable[[Web, Store, int, dict[str, Any], str], Any]:
    def link(web: Web, store: Store, task_id: int, body: dict[str, Any], by: str) -> Any:
        after = inputs.integer(body.get("after"), "body.after", low=1, high=INT64_MAX)
        if linked:
            steering.link_tasks(web.config, store, task_id, after, web.clock.now(), by=by)
        else:
            steering.unlink_tasks(web.config, store, task_id, after, web.clock.now(), by=by)
        return {"task": jsonable(store.get_task_or_raise(task_id)), "after": after, "linked": linked}

    return link


VERBS: dict[str, Verb] = {
    "pause": Verb(("reason",), _pause, lambda t, b: f"Task {t} will not be claimed until resumed."),
    "resume": Verb((), _resume, lambda t, b: f"Task {t} may be claimed again."),
    "edit": Verb(
        ("priority", "delay", "available_at", "payload"),
        _edit,
        lambda t, b: f"Task {t} changes: " + ", ".join(f"{k} {v}" for k, v in b.items() if v not in (None, "")) + ".",
    ),
    "complete": Verb(("reason",), _closer("completed"), lambda t, b: f"Task {t} will end completed: {b.get('reason')}"),
    "fail": Verb(
        ("reason",),
        _closer("permanent_failure"),
        lambda t, b: f"Task {t} will end failed, not to be retried: {b.get('reason')}",
    ),
    "link": Verb(
        ("after",), _linker(True), lambda t, b: f"Task {t} will run only after task {b.get('after')} completed."
    ),
    "unlink": Verb(("after",), _linker(False), lambda t, b: f"Task {t} will no longer wait for task {b.get('after')}."),
}


def _task_id(request: Request) -> int:
    return inputs.integer(request.path_params["task_id"], "path.task_id", low=1, high=INT64_MAX)


def api_endpoint(name: str) -> Callable[[Request], Any]:
    """POST /api/tasks/ID/<verb>: the token's operator acts at once."""
    verb = VERBS[name]

    async def endpoint(request: Request) -> Response:
        operator = await bearer(request)
        task_id = _task_id(request)
        body = await inputs.json_object(request)
        inputs.refuse_unknown(body, verb.fields)
        web = web_of(request)
        return JSONResponse(await web.db.call(lambda store: verb.act(web, store, task_id, body, operator.name)))

    return endpoint


def console_endpoint(name: str) -> Callable[[Request], Any]:
    """POST /tasks/ID/<verb> from the console: a confirmation page, then (confirm=yes) the act."""
    verb = VERBS[name]

    async def endpoint(request: Request) -> Response:
        from agentd.web.console import back, page, posted, viewer

        operator, fields = await posted(request)
        task_id = _task_id(request)
        given = {key: fields[key] for key in verb.fields if fields.get(key) not in (None, "")}
        web = web_of(request)
        given = await web.db.call(lambda store: _checked(web, store, task_id, name, given))
        if fields.get("confirm") != "yes":
            _, csrf = await viewer(request)
            context = {"task_id": task_id, "verb": name, "fields": given, "what": verb.says(task_id, given)}
            return page(
                request, "confirm_steer.html", operator, csrf, title=f"{name.capitalize()} task {task_id}", **context
            )
        await web.db.call(lambda store: verb.act(web, store, task_id, given, operator.name))
        return back(f"/tasks/{task_id}", "Done. " + verb.says(task_id, given))

    return endpoint


def _checked(web: Web, store: Store, task_id: int, name: str, given: dict[str, str]) -> dict[str, str]:
    """A console form's fields, before its confirmation page and again before the act: refused (409) when
    the verb does not apply to the task now; an edit's payload parsed (a bad one is refused before any
    confirmation) and left out when it is the payload the task has (the editor starts filled with it)."""
    refuse_unless_applies(web.config, store, task_id, name)
    if name != "edit":
        return given
    if "payload" in given and _payload(given["payload"]) == store.get_task_or_raise(task_id).payload:
        given = {key: value for key, value in given.items() if key != "payload"}
    if not given:
        raise BadInput(422, "nothing to change", "body", "a new priority, delay or payload")
    return given


def routes() -> list[BaseRoute]:
    """The API's and the console's steering routes (docs/web.md, "Steer one task")."""
    found: list[BaseRoute] = []
    for name in VERBS:
        found.append(Route(f"/api/tasks/{{task_id}}/{name}", api_endpoint(name), methods=["POST"]))
        found.append(Route(f"/tasks/{{task_id}}/{name}", console_endpoint(name), methods=["POST"]))
    return found
