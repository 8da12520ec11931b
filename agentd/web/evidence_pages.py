"""The console's evidence pages (docs/web.md, "The console"): one evidence file shown inside the console,
with the way back to its task and the raw file a link away, and "verify this task's evidence", the check
`agentd evidence verify --task ID` makes (docs/evidence.md), its verdict shown as the command prints it."""

from __future__ import annotations

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agentd.evidence.verify import verify
from agentd.store import Store
from agentd.web.api import looks_textual, read_evidence
from agentd.web.app import web_of
from agentd.web.console import page, task_id_of, viewer
from agentd.web.inputs import BadInput
from agentd.web.task_page import pretty_text
from agentd.web.views import evidence_href, evidence_path, evidence_root

SHOWN_BYTES = 256 * 1024  # of a text file, in the page; the raw link has it all


async def evidence_page(request: Request) -> Response:
    """GET /tasks/ID/evidence/ATTEMPT/NAME: the file's text in the console (a binary file: its size and
    the raw link), a link back to the task."""
    operator, csrf = await viewer(request)
    web, task_id = web_of(request), task_id_of(request)
    attempt_id, name = request.path_params["attempt_id"], request.path_params["name"]
    relative = evidence_path(task_id, attempt_id, name)
    data = await anyio.to_thread.run_sync(read_evidence, evidence_root(web.config), relative)
    if data is None:
        raise BadInput(404, "no such evidence file", "path.name", "a file the task's page lists")
    text = data[:SHOWN_BYTES].decode("utf-8", "replace") if looks_textual(data) else None
    if text is not None and name.endswith(".json"):
        text = pretty_text(text)  # result.json and the manifest read indented, not as one clipped line
    context = {"task_id": task_id, "attempt_id": attempt_id, "file_name": name, "size": len(data), "text": text}
    raw = evidence_href(task_id, attempt_id, name)
    return page(request, "evidence.html", operator, csrf, raw=raw, cut=len(data) > SHOWN_BYTES, **context)


async def verify_page(request: Request) -> Response:
    """GET /tasks/ID/verify: the event chain whole and this task's attempts checked against their sealed
    manifests; read-only, so a GET."""
    operator, csrf = await viewer(request)
    web, task_id = web_of(request), task_id_of(request)

    def check(store: Store) -> dict[str, object]:
        store.get_task_or_raise(task_id)
        return verify(store, web.config.paths.state_dir, task_id=task_id).as_dict()

    result = await web.db.call(check)
    return page(request, "verify.html", operator, csrf, task_id=task_id, result=result)


def routes() -> list[BaseRoute]:
    return [
        Route("/tasks/{task_id}/evidence/{attempt_id}/{name}", evidence_page),
        Route("/tasks/{task_id}/verify", verify_page),
    ]
