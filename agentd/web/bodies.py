"""A request refused before its body was read (413 too large, 401, 403, 400, 429) must not wedge its
connection (docs/web.md, "Errors"): hypercorn stops reading a body the application does not take, so the
client's next request, or the rest of a body it sends before it reads, would wait forever. Its answer
says `Connection: close`; then the rest of the body is read and dropped, within DRAIN_BYTES and DRAIN_S,
and the connection ends; past either bound (or when the service stops) the connection is cut."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentd.web.peers import PeerBook

DRAIN_BYTES = 16 * 1024 * 1024  # what a refused body may still send (a client that sends all, then reads)
DRAIN_S = 10.0  # and how long it may take; then the connection is cut
CUT_S = 2.0  # a cut connection's last buffered bytes and its end take no longer than this


@dataclass
class Body:
    """How much of a request's body the application (or the drain) has taken, and whether all of it."""

    done: bool
    size: int = 0

    def took(self, message: Message) -> Message:
        if message["type"] == "http.request":
            self.size += len(message.get("body", b""))
            self.done = self.done or not message.get("more_body", False)
        elif message["type"] == "http.disconnect":
            self.done = True
        return message


def has_body(scope: Scope) -> bool:
    """A request whose head announces a body (a Content-Length past 0, or chunks)."""
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


class DrainRefusedBodies:
    """Pure ASGI (a live stream passes through untouched): an answer that starts before the request's
    body was taken says `Connection: close`, and the body's rest is drained before the answer's last
    part goes out (hypercorn ends the request there, and would wait forever for room to say so while a
    body it read is still queued for the application)."""

    def __init__(self, app: ASGIApp, book: PeerBook, stopping: anyio.Event) -> None:
        self.app, self.book, self.stopping = app, book, stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not has_body(scope):
            await self.app(scope, receive, send)
            return
        body = Body(done=False)

        async def receiving() -> Message:
            return body.took(await receive())

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and not body.done:
                MutableHeaders(scope=message)["connection"] = "close"
            if message["type"] == "http.response.body" and not message.get("more_body") and not body.done:
                await self.drain(scope, receiving, body)
            await send(message)

        await self.app(scope, receiving, sending)

    async def drain(self, scope: Scope, receive: Receive, body: Body) -> None:
        """Read and drop the rest, within the bounds; past them, or once the service stops, cut the
        connection and take only what was already read of it, up to its end."""
        async with anyio.create_task_group() as group:
            group.start_soon(cancel_when, self.stopping, group.cancel_scope)
            with anyio.move_on_after(DRAIN_S):
                while not body.done and body.size <= DRAIN_BYTES:
                    await receive()
            group.cancel_scope.cancel()
        if body.done:
            return
        conn = self.book.connection(scope.get("client"), scope.get("server"))
        if conn is not None:
            conn.cut()
        with anyio.move_on_after(CUT_S):
            while not body.done:
                await receive()


async def cancel_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()
