"""The console's live parts (docs/web.md, "A console that lives"): what each page's script asks first (the
event sequence to follow the stream from, and how many things wait on a person, for the nav's badge), a
running attempt's progress bar and newest activity as a fragment the task page and the overview show, and
the favicon. The script that uses them is agentd/web/static/console.js."""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from agentd.edge import INT64_MAX
from agentd.store import Store
from agentd.web import inputs
from agentd.web.app import HERE, bearer_or_session, web_of

PROGRESS_SHOWN = 10  # of a running attempt's progress lines, the newest
ACTIVITY_SHOWN = 10  # of its other live events (tool calls, turns), the newest
TOOL_TYPES = ("tool_started", "tool_finished", "model_turn_completed", "activity_capped")
PERCENT = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,6})?)\s*%")
RATIO = re.compile(r"(?<![\d.])(\d{1,12})\s*(?:/|\bof\b)\s*(\d{1,12})(?![\d.])")


def progress_fraction(text: str) -> float | None:
    """The share of its work a progress line says is done, from its last `45%`, else its last `120 of
    400` or `3/10`; None when it says none, or says more than all of it (no bar is better than a wrong one)."""
    percents = PERCENT.findall(text)
    if percents:
        value = float(percents[-1])
        return value / 100 if value <= 100 else None
    ratios = RATIO.findall(text)
    if ratios:
        done, whole = (int(n) for n in ratios[-1])
        return done / whole if whole > 0 and done <= whole else None
    return None


def live_attempt(store: Store, task_id: int) -> dict[str, Any] | None:
    """The task's running attempt as its live fragment shows it, or None when none runs."""
    with store.snapshot():
        open_attempts = [a for a in store.attempts_of(task_id) if a.ended_at is None]
        if not open_attempts:
            return None
        return attempt_live(store, task_id, open_attempts[-1].attempt_id)


def attempt_live(store: Store, task_id: int, attempt_id: str) -> dict[str, Any]:
    """An attempt's progress lines and other live events, each newest first, and the share done its newest
    progress line says (docs/live.md, "A script's progress"). Only events: their text is redacted with the
    attempt's own secrets, which the raw stdout.log of a running attempt is not yet (docs/decisions.md)."""
    progress = store.event_rows(
        task_id=task_id, attempt_id=attempt_id, types=("attempt_progress",), limit=PROGRESS_SHOWN, last=True
    )
    activity = store.event_rows(
        task_id=task_id, attempt_id=attempt_id, types=TOOL_TYPES, limit=ACTIVITY_SHOWN, last=True
    )
    newest = str(progress[-1]["payload"].get("text") or "") if progress else None
    fraction = progress_fraction(newest) if newest is not None else None
    return {
        "task_id": task_id,
        "attempt_id": attempt_id,
        "progress": progress[::-1],
        "activity": activity[::-1],
        "said": newest,
        "percent": None if fraction is None else round(fraction * 100, 1),
    }


async def live_fragment(request: Request) -> Response:
    """GET /tasks/ID/live: the running attempt's progress bar and newest lines, as HTML for the page's
    script to put in place (nothing when none runs)."""
    await bearer_or_session(request)
    web = web_of(request)
    task_id = inputs.integer(request.path_params["task_id"], "path.task_id", low=1, high=INT64_MAX)
    live = await web.db.call(live_attempt, task_id)
    return web.templates.TemplateResponse(request, "live_attempt_body.html", {"live": live, "now": web.clock.now()})


def live_state(store: Store) -> dict[str, int]:
    """Where the stream is now, and what waits on a person (approvals and held tool calls) in one read."""
    with store.snapshot():
        waiting = len(store.pending_approvals()) + len(store.pending_calls())
        return {"last_sequence": store.last_event_sequence(), "waiting": waiting}


async def state(request: Request) -> Response:
    """GET /live/state: the page's script starts the stream here and shows the badge's count."""
    await bearer_or_session(request)
    return JSONResponse(await web_of(request).db.call(live_state))


async def favicon(request: Request) -> Response:
    """GET /favicon.ico: what a browser asks of every site, the console's mark (no 404 in its log)."""
    return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml")


def routes() -> list[BaseRoute]:
    return [
        Route("/live/state", state),
        Route("/tasks/{task_id:int}/live", live_fragment),
        Route("/favicon.ico", favicon),
    ]
