"""The console's "new task" form and its acts on a selection of tasks (docs/web.md, "A console that lives"):
a task judged by the intake `agentd task add` and `POST /api/tasks` use, its form kept with the error
when refused; retry or cancel of the tasks ticked in the list, confirmed first, each task by itself."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agentd import control, edge
from agentd.config import Config
from agentd.edge import INT64_MAX
from agentd.errors import InputError
from agentd.store import Store
from agentd.web import inputs
from agentd.web.api import intent_of
from agentd.web.app import web_of
from agentd.web.auth import Operator
from agentd.web.console import back, page, posted, posted_pairs, viewer
from agentd.web.inputs import BadInput, from_input_error
from agentd.web.steering import MAX_PAYLOAD_CHARS

FORM_FIELDS = ("task_type", "subject", "priority", "payload")
BULK_MAX = 200  # tasks one selection may act on: the list shows at most 200
BULK_VERBS: dict[str, Callable[[Config, Store, int, datetime, str], Any]] = {
    "retry": lambda config, store, task_id, now, by: control.retry_task(config, store, task_id, None, now, by=by),
    "cancel": lambda config, store, task_id, now, by: control.cancel_task(config, store, task_id, now, by=by),
}


def new_task_page(request: Request, operator: Operator, csrf: str, form: dict[str, str], error: str | None) -> Response:
    """The form, with what was typed and why it was refused (422) when it was."""
    types = sorted(web_of(request).config.task_types)
    shown = page(request, "new_task.html", operator, csrf, form=form, error=error, task_types=types)
    shown.status_code = 422 if error else 200
    return shown


async def new_task(request: Request) -> Response:
    """GET /tasks/new: the form, its payload an empty JSON object."""
    operator, csrf = await viewer(request)
    return new_task_page(request, operator, csrf, {"payload": "{}", "priority": ""}, None)


async def add_task(request: Request) -> Response:
    """POST /tasks/new: the task as `agentd task add` would take it, then its page; or the form again with
    what was wrong, nothing written."""
    operator, fields = await posted(request)
    web = web_of(request)
    form = {name: fields.get(name, "") for name in FORM_FIELDS}
    try:
        intent = intent_of(submission(form), operator)
        task = await web.db.call(
            lambda store: control.add_task(web.config, store, intent, web.clock.now(), by=operator.name)
        )
    except BadInput as exc:
        return new_task_page(request, operator, (await viewer(request))[1], form, f"{exc.where}: {exc.what}")
    except InputError as exc:
        refused = from_input_error(exc, "body")
        return new_task_page(request, operator, (await viewer(request))[1], form, f"{refused.where}: {refused.what}")
    return back(f"/tasks/{task.task_id}", f"Added task {task.task_id} ({task.task_type}).")


def submission(form: dict[str, str]) -> dict[str, Any]:
    """The form's fields as `POST /api/tasks` takes them: the payload a JSON object, the priority a number."""
    body: dict[str, Any] = {"task_type": form["task_type"], "payload": payload_of(form["payload"] or "{}")}
    if form["subject"].strip():
        body["subject"] = form["subject"].strip()
    if form["priority"].strip():
        body["priority"] = inputs.integer(form["priority"].strip(), "body.priority", low=1, high=10)
    return body


def payload_of(text: str) -> dict[str, Any]:
    """The payload field as a JSON object, parsed by the rules `agentd task add --payload` uses
    (agentd/edge.py `loads`: strict, no duplicate keys, bounded depth)."""
    if len(text) > MAX_PAYLOAD_CHARS:
        raise BadInput(422, f"{len(text):,} characters", "body.payload", f"at most {MAX_PAYLOAD_CHARS:,}")
    try:
        value = edge.loads(text, "body.payload")
    except edge.Refused as exc:
        raise BadInput(422, str(exc).removeprefix("body.payload: "), "body.payload", "a JSON object") from None
    if not isinstance(value, dict):
        raise BadInput(422, f"found {type(value).__name__}", "body.payload", "a JSON object")
    return value


async def bulk(request: Request) -> Response:
    """POST /tasks/bulk: retry or cancel the ticked tasks. First a page that names them; only its
    confirmation acts, each task by itself (one refused, a completed task's retry say, does not stop the
    rest), and the list then says what was done and what was refused."""
    operator, fields, ids = await selection(request)
    verb = inputs.choice(fields.get("verb"), "body.verb", tuple(BULK_VERBS))
    if fields.get("confirm") != "yes":
        csrf = (await viewer(request))[1]
        return page(request, "confirm_bulk.html", operator, csrf, verb=verb, ids=ids)
    web = web_of(request)
    done, refused = await web.db.call(
        lambda store: act_on_each(web.config, store, verb, ids, web.clock.now(), operator)
    )
    said = f"{verb.capitalize()}: {len(done)} of {len(ids)} tasks" + (f" ({', '.join(map(str, done))})" if done else "")
    if refused:
        said += "; refused: " + "; ".join(refused)
    return back("/tasks", said + ".")


async def selection(request: Request) -> tuple[Operator, dict[str, str], list[int]]:
    """The form (CSRF checked) and the task ids ticked in it (`task`, repeated), at least one."""
    operator, pairs = await posted_pairs(request)
    ticked = [value for key, value in pairs if key == "task"]
    if not ticked:
        raise BadInput(422, "no task was ticked", "body.task", "one or more tasks ticked in the list")
    if len(ticked) > BULK_MAX:
        raise BadInput(422, f"{len(ticked)} tasks", "body.task", f"at most {BULK_MAX}")
    ids = sorted({inputs.integer(value, "body.task", low=1, high=INT64_MAX) for value in ticked})
    return operator, dict(pairs), ids


def act_on_each(
    config: Config, store: Store, verb: str, ids: list[int], now: datetime, operator: Operator
) -> tuple[list[int], list[str]]:
    """The verb on each task, each its own write: those done, and each refusal in the CLI's words."""
    done, refused = [], []
    for task_id in ids:
        try:
            BULK_VERBS[verb](config, store, task_id, now, operator.name)
        except InputError as exc:
            refused.append(f"task {task_id}: {exc}")
        else:
            done.append(task_id)
    return done, refused


def routes() -> list[BaseRoute]:
    """Before the console's `/tasks/{task_id}`, which would take `new` for an id."""
    return [
        Route("/tasks/new", new_task),
        Route("/tasks/new", add_task, methods=["POST"]),
        Route("/tasks/bulk", bulk, methods=["POST"]),
    ]
