"""The live event stream (docs/web.md, "Live events"): Server-Sent Events from a sequence number, each
event once and in order; a reconnecting client's Last-Event-ID resumes where it left off. The stream
polls the database (an index range read) and ends when the service stops."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse

from agentd.edge import INT64_MAX
from agentd.store import Store
from agentd.web import inputs
from agentd.web.app import Web

BATCH = 200  # events per read; a backlog is sent batch by batch, never all at once
KEEPALIVE_S = 15.0  # a comment line this often keeps proxies from closing an idle stream


def response(request: Request, web: Web) -> StreamingResponse:
    """The stream the query (or Last-Event-ID) asks for: after, task_id, type (repeated)."""
    query = request.query_params
    resume = request.headers.get("last-event-id") or query.get("after")
    after = inputs.integer(resume, "query.after", low=0, high=INT64_MAX, default=0)
    task_id = inputs.integer(query.get("task_id"), "query.task_id", low=1, high=INT64_MAX, default=0) or None
    types = tuple(inputs.event_type(t, "query.type") for t in query.getlist("type"))
    headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
    return StreamingResponse(events_from(web, after, task_id, types), media_type="text/event-stream", headers=headers)


async def events_from(web: Web, after: int, task_id: int | None, types: tuple[str, ...]) -> AsyncIterator[str]:
    """Every matching event after `after`, then each new one as it is appended, until the service stops."""
    yield "retry: 2000\n\n"
    idle_s = 0.0
    while not web.stopping.is_set():
        rows = await web.db.call(Store.event_rows, after=after, task_id=task_id, types=types, limit=BATCH)
        for row in rows:
            yield frame(row)
        if rows:
            after, idle_s = rows[-1]["sequence"], 0.0
            continue
        with anyio.move_on_after(web.stream_poll_s):
            await web.stopping.wait()
        idle_s += web.stream_poll_s
        if idle_s >= KEEPALIVE_S:
            idle_s = 0.0
            yield ": keepalive\n\n"


def frame(row: dict[str, Any]) -> str:
    """One SSE frame: the sequence as its id, the row (its type included) as its data: an unnamed event,
    so one `onmessage` sees every type. JSON holds no raw newline: one data line."""
    return f"id: {row['sequence']}\ndata: {json.dumps(row, separators=(',', ':'))}\n\n"
