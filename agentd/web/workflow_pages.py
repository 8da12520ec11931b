"""The console's workflows (docs/sensors-and-workflows.md): the list, newest first, and one workflow's
steps, each the task of one state entry with the signal it gave, as `agentd workflow list` and `agentd
workflow show ID` print them. A goal loop is what `make run` shows first, so the console shows it too."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agentd.edge import INT64_MAX
from agentd.records import record_json
from agentd.store import Store
from agentd.web import inputs
from agentd.web.app import web_of
from agentd.web.console import page, viewer
from agentd.web.views import jsonable

WORKFLOWS_SHOWN = 200
STATUSES = ("active", "blocked", "completed", "canceled")


async def workflows(request: Request) -> Response:
    """GET /workflows[?status=…]: newest first."""
    operator, csrf = await viewer(request)
    status = request.query_params.get("status") or None
    statuses = (inputs.choice(status, "query.status", STATUSES),) if status else ()
    found = await web_of(request).db.call(Store.list_workflows, statuses=statuses, limit=WORKFLOWS_SHOWN)
    listed = [w.model_dump(mode="json") for w in found]
    return page(request, "workflows.html", operator, csrf, workflows=listed, status=status, statuses=STATUSES)


async def workflow(request: Request) -> Response:
    """GET /workflows/ID: the workflow, its steps in order, and its events."""
    operator, csrf = await viewer(request)
    workflow_id = inputs.integer(request.path_params["workflow_id"], "path.workflow_id", low=1, high=INT64_MAX)
    shown = await web_of(request).db.call(lambda store: workflow_view(store, workflow_id))
    return page(request, "workflow.html", operator, csrf, **shown)


def workflow_view(store: Store, workflow_id: int) -> dict[str, Any]:
    found = store.get_workflow_or_raise(workflow_id)
    steps = [jsonable(t) for t in store.workflow_steps(workflow_id)]
    events = [record_json(e) for e in store.read_events(workflow_id=workflow_id)][-WORKFLOWS_SHOWN:]
    return {"workflow": found.model_dump(mode="json"), "steps": steps, "events": events}


def routes() -> list[BaseRoute]:
    return [Route("/workflows", workflows), Route("/workflows/{workflow_id}", workflow)]
