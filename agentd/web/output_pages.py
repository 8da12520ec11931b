"""The outputs a task wrote, viewable from its page (docs/web.md, "A task's page"): only a path its outcome
names (artifact_paths), read from the workspace without following a link or leaving it, capped in size;
text shown (JSON pretty-printed), anything else a download."""

from __future__ import annotations

import anyio
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from agentd.process.files import read_beneath
from agentd.store import Store
from agentd.web.api import MAX_EVIDENCE_BYTES, looks_textual
from agentd.web.app import web_of
from agentd.web.console import page, task_id_of, viewer
from agentd.web.inputs import BadInput
from agentd.web.task_page import pretty_text

SHOWN_BYTES = 256 * 1024  # of a text file, in the page; the download has up to MAX_EVIDENCE_BYTES


async def output_page(request: Request) -> Response:
    """GET /tasks/ID/outputs?path=P (&download=1): one file the task's outcome names."""
    operator, csrf = await viewer(request)
    web, task_id = web_of(request), task_id_of(request)
    path = request.query_params.get("path") or ""
    named = await web.db.call(lambda store: _named_outputs(store, task_id))
    if path not in named:
        raise BadInput(404, f"task {task_id} names no output {path[:200]!r}", "query.path", "a path its page lists")
    data = await anyio.to_thread.run_sync(_read_output, web.config.paths.workspace, path)
    name = path.rsplit("/", 1)[-1]
    if request.query_params.get("download") == "1":
        headers = {"content-disposition": f'attachment; filename="{_safe_name(name)}"'}
        return Response(data, media_type="application/octet-stream", headers=headers)
    text = pretty_text(data[:SHOWN_BYTES].decode("utf-8", "replace")) if looks_textual(data) else None
    context = {"task_id": task_id, "path": path, "size": len(data), "text": text, "cut": len(data) > SHOWN_BYTES}
    return page(request, "output.html", operator, csrf, **context)


def _named_outputs(store: Store, task_id: int) -> list[str]:
    outcome = store.get_task_or_raise(task_id).outcome
    return list(outcome.artifact_paths or []) if outcome else []


def _read_output(workspace: object, path: str) -> bytes:
    """The file's bytes, or a 404 for one that is gone, a link, outside the workspace or not a regular file."""
    from pathlib import Path

    try:
        found = read_beneath(Path(str(workspace)), path, MAX_EVIDENCE_BYTES)
    except OSError:
        raise BadInput(404, "no such file in the workspace now", "query.path", "a file the task left") from None
    if len(found.data) > MAX_EVIDENCE_BYTES:
        raise BadInput(413, f"the file is {found.size} bytes", "query.path", f"at most {MAX_EVIDENCE_BYTES} bytes")
    return found.data


def _safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:128] or "output"


def routes() -> list[BaseRoute]:
    return [Route("/tasks/{task_id}/outputs", output_page)]
