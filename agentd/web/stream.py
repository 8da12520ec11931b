"""The live event stream (docs/web.md, "Live events"): Server-Sent Events from a sequence number, each
event once and in order; a reconnecting client's Last-Event-ID resumes where it left off. The stream
polls the database (an index range read) and ends when the service stops, and as soon as what opened it
no longer holds: its token revoked, its session logged out or expired.

Streams are bounded (docs/web.md, "Live events"): at most `[web] max_streams` open at once and
`[web] max_streams_per_token` per token (429 past them), and their reads and frames, the replay of a
backlog above all, take turns on one lane at no more than REPLAY_EVENTS_PER_S in all: a thousand
clients replaying the log cannot starve the API nor, under `agentd run`, the dispatcher."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from agentd import frozen_value
from agentd.edge import INT64_MAX
from agentd.store import Store
from agentd.web import inputs
from agentd.web.app import Web
from agentd.web.auth import Session

BATCH = 200  # events per read (a page); a backlog is sent page by page, never all at once
KEEPALIVE_S = 15.0  # a comment line this often keeps proxies from closing an idle stream
REPLAY_EVENTS_PER_S = 5_000.0  # every stream's events together, at most (a page of 200: 40 ms of the lane)


@frozen_value
class Grant:
    """What opened a stream: its token and, for the console's own script, its session; asked again
    before every read."""

    token_id: str
    session: Session | None = None


@frozen_value
class Query:
    after: int
    task_id: int | None
    types: tuple[str, ...]


class LiveStream(StreamingResponse):
    """A StreamingResponse that holds its place among the open streams until it ends, however it ends."""

    def __init__(self, web: Web, grant: Grant, query: Query) -> None:
        web.streams.take(grant.token_id)
        self.web, self.grant = web, grant
        headers = {"cache-control": "no-store", "x-accel-buffering": "no"}
        super().__init__(events_from(web, grant, query), media_type="text/event-stream", headers=headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.web.streams.give_back(self.grant.token_id)


def response(request: Request, web: Web, grant: Grant) -> StreamingResponse:
    """The stream the query (or Last-Event-ID) asks for: after, task_id, type (repeated)."""
    query = request.query_params
    resume = request.headers.get("last-event-id") or query.get("after")
    after = inputs.integer(resume, "query.after", low=0, high=INT64_MAX, default=0)
    task_id = inputs.integer(query.get("task_id"), "query.task_id", low=1, high=INT64_MAX, default=0) or None
    types = tuple(inputs.event_type(t, "query.type") for t in query.getlist("type"))
    return LiveStream(web, grant, Query(after, task_id, types))


async def events_from(web: Web, grant: Grant, query: Query) -> AsyncIterator[str]:
    """Every matching event after `after`, then each new one as it is appended, until the service stops
    or the grant no longer holds."""
    yield "retry: 2000\n\n"
    after, idle_s = query.after, 0.0
    while not web.stopping.is_set():
        async with web.streams.lane:  # one stream's read and frames at a time, paced
            page = await next_page(web, grant, Query(after, query.task_id, query.types))
            if page is None:
                return  # revoked, logged out or expired: nothing more, not even the revocation itself
            if page.count:
                await anyio.sleep(page.count / REPLAY_EVENTS_PER_S)
        if page.count:
            yield page.text
            after, idle_s = page.last, 0.0
            continue
        with anyio.move_on_after(web.stream_poll_s):
            await web.stopping.wait()
        idle_s += web.stream_poll_s
        if idle_s >= KEEPALIVE_S:
            idle_s = 0.0
            yield ": keepalive\n\n"


@frozen_value
class Page:
    text: str  # the frames
    count: int
    last: int  # the last one's sequence


async def next_page(web: Web, grant: Grant, query: Query) -> Page | None:
    """The next page of frames, if the grant still holds (None otherwise): the token is read in the
    same snapshot as the events, so no event appended after a revocation is ever sent for it."""
    if not session_live(web, grant):
        return None
    page = await web.db.call(page_if_granted, grant.token_id, query)
    return page if session_live(web, grant) else None  # one that ended while it was read sends nothing more


def session_live(web: Web, grant: Grant) -> bool:
    return grant.session is None or web.sessions.live(grant.session)


def page_if_granted(store: Store, token_id: str, query: Query) -> Page | None:
    """On the store's thread: the token's row and the events, then the frames built there too (the event
    loop only writes them out)."""
    with store.snapshot():
        token = store.web_token(token_id)
        if token is None or token.revoked_at is not None:
            return None
        found = store.event_frames(after=query.after, task_id=query.task_id, types=query.types, limit=BATCH)
    if not found:
        return Page("", 0, query.after)
    return Page("".join(frame(sequence, text) for sequence, text in found), len(found), found[-1][0])


def frame(sequence: int, event_json: str) -> str:
    """One SSE frame: the sequence as its id, the event (its type included) as its data: an unnamed event,
    so one `onmessage` sees every type. JSON holds no raw newline: one data line."""
    return f"id: {sequence}\ndata: {event_json}\n\n"
