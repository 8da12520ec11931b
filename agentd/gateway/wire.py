"""The gateway's HTTP/1.1 toward the harness (docs/gateway.md, "What it forwards"): one harness connection
served with h11 (`Harness`), the token found where a harness sends an API key, and the headers each way,
hop-by-hop ones and credentials taken out, the route's key put in. Toward the provider: upstream.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import Iterable
from typing import Any

import anyio
import h11

from agentd.gateway.calls import Route, error_body

MAX_HEAD_BYTES = 64 * 1024  # a request's line and headers
MAX_REQUEST_BYTES = 32 * 1024 * 1024  # a request's body: Anthropic's own limit; beyond: 413
READ_BYTES = 64 * 1024
IDLE_S = 300.0  # a kept-alive connection with no request for this long is closed
REQUEST_WITHIN_S = 60.0  # a request that does not arrive whole this long after its first byte is dropped
BUFFERED_EARLY = 1024 * 1024  # what a harness may send ahead (a pipelined request) while its answer streams

HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"proxy-connection", b"te",
     b"trailer", b"transfer-encoding", b"upgrade"}
)  # fmt: skip
# Where a harness may put a credential: none of them is forwarded, whatever it holds.
CREDENTIALS = frozenset({b"x-api-key", b"authorization", b"api-key", b"x-goog-api-key"})
NOT_FORWARDED = HOP_BY_HOP | CREDENTIALS | {b"host", b"content-length", b"expect", b"accept-encoding"}
TOKEN_PREFIX = b"/t/"

Headers = list[tuple[bytes, bytes]]


class Incoming:
    """One whole request from a harness."""

    __slots__ = ("body", "headers", "method", "target")

    def __init__(self, method: str, target: bytes, headers: Headers, body: bytes) -> None:
        self.method, self.target, self.headers, self.body = method, target, headers, body


class Refused(Exception):
    """A request the gateway answers itself before anything else: `status` and why."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind = status, kind


def tokens_in(incoming: Incoming) -> tuple[set[str], bytes]:
    """The tokens the request carries (as `x-api-key`, as `authorization: Bearer`, or as the path's first
    two segments `/t/TOKEN`) and its target without the `/t/TOKEN` prefix."""
    found = set()
    for name, value in incoming.headers:
        if name == b"x-api-key":
            found.add(value.decode("latin-1").strip())
        elif name == b"authorization" and value[:7].lower() == b"bearer ":
            found.add(value[7:].decode("latin-1").strip())
    target = incoming.target
    if target.startswith(TOKEN_PREFIX):
        token, slash, rest = target[len(TOKEN_PREFIX) :].partition(b"/")
        found.add(token.decode("latin-1"))
        target = b"/" + rest if slash else b"/"
    found.discard("")
    return found, target


def upstream_headers(headers: Headers, route: Route) -> Headers:
    """The request's headers as the upstream gets them: hop-by-hop ones (and those `connection` names),
    every credential, `host`, `content-length`, `expect` and `accept-encoding` out (the client sets the
    first two again; the gateway asks for an uncompressed answer, so it can read the usage in it), the
    route's key in."""
    named = _connection_named(headers)
    sent = [(name, value) for name, value in headers if name not in NOT_FORWARDED and name not in named]
    sent.append((b"accept-encoding", b"identity"))
    if route.key_style == "x-api-key":
        sent.append((b"x-api-key", route.key.encode()))
    elif route.key_style == "bearer":
        sent.append((b"authorization", b"Bearer " + route.key.encode()))
    return sent


def answer_headers(headers: Iterable[tuple[bytes, bytes]]) -> Headers:
    """The upstream's answer's headers as the harness gets them: hop-by-hop ones out (h11 frames the body
    again: by its `content-length` where the upstream gave one, else chunked)."""
    listed = [(name.lower(), value) for name, value in headers]
    named = _connection_named(listed)
    return [(name, value) for name, value in listed if name not in HOP_BY_HOP and name not in named]


def _connection_named(headers: Iterable[tuple[bytes, bytes]]) -> set[bytes]:
    return {part.strip().lower() for name, value in headers if name == b"connection" for part in value.split(b",")}


class Harness:
    """One connection from a harness, served with h11: requests read whole, answers written as they come."""

    def __init__(
        self, sock: socket.socket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, idle_s: float = IDLE_S
    ) -> None:
        self.sock, self.reader, self.writer, self.idle_s = sock, reader, writer, idle_s
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.sent_head = False
        self._held = b""  # an answer's head not written yet
        self.method = ""  # of the request being answered

    @classmethod
    async def accept(cls, sock: socket.socket, idle_s: float = IDLE_S) -> Harness:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each event out at once
        reader, writer = await asyncio.open_connection(sock=sock, limit=READ_BYTES)
        return cls(sock, reader, writer, idle_s)

    async def next_request(self, max_body: int = MAX_REQUEST_BYTES) -> Incoming | None:
        """The next whole request, or None when the harness is done (closed, idle too long, or broke the
        protocol: then it was answered 400 first). :raises Refused: a body above `max_body`."""
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
            self.sent_head = False
        head = None
        with anyio.move_on_after(self.idle_s):
            head = await self._event()
        if not isinstance(head, h11.Request):
            return None
        self.method = head.method.decode("ascii")
        body = bytearray()
        with anyio.move_on_after(REQUEST_WITHIN_S):
            if self.h11.they_are_waiting_for_100_continue:
                await self._send(h11.InformationalResponse(status_code=100, headers=[]))
            while isinstance(event := await self._event(), h11.Data):
                body += event.data
                if len(body) > max_body:
                    raise Refused(413, "request_too_large", f"the request's body is larger than {max_body} bytes")
            if isinstance(event, h11.EndOfMessage):
                headers = [(name, value) for name, value in head.headers]
                return Incoming(self.method, head.target, headers, bytes(body))
        return None

    async def _event(self) -> Any:
        """The next h11 event; ConnectionClosed at the harness's end; a protocol error answered 400."""
        while True:
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                await self.answer_json(400, error_body("invalid_request_error", f"not HTTP/1.1: {exc}"[:200]))
                return h11.ConnectionClosed()
            if event is not h11.NEED_DATA:
                return event
            try:
                data = await self.reader.read(READ_BYTES)
            except ConnectionError:
                data = b""
            self.h11.receive_data(data)

    async def answer_json(
        self, status: int, body: Any, headers: Iterable[tuple[str, str]] = (), close: bool = False
    ) -> None:
        """A whole JSON answer of the gateway's own (nothing is sent if an answer was begun already)."""
        if self.sent_head:
            return
        data = json.dumps(body).encode()
        head = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        head += [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]
        if close:
            head.append((b"connection", b"close"))
        with contextlib.suppress(ConnectionError, h11.LocalProtocolError):
            await self.send_head(status, head)
            if self.method != "HEAD":  # its answer has the head alone
                await self.send(data)
            await self.end()

    async def send_head(self, status: int, headers: Headers, reason: bytes = b"") -> None:
        """The answer's head, held back to go out with its first piece (one write, one wake-up of the harness)
        or at `flush`, whichever comes first."""
        self.sent_head = True
        self._held = self.h11.send(h11.Response(status_code=status, headers=headers, reason=reason))

    async def flush(self) -> None:
        """What is held back, out now (the first piece is not there yet: the head must not wait for it)."""
        await self._write(None)

    async def send(self, data: bytes) -> None:
        if data:
            await self._write(self.h11.send(h11.Data(data=data)))

    async def end(self) -> None:
        await self._write(self.h11.send(h11.EndOfMessage()))

    async def _send(self, event: Any) -> None:
        await self._write(self.h11.send(event))

    async def _write(self, data: bytes | None) -> None:
        if self._held:
            data, self._held = self._held + (data or b""), b""
        if data:
            self.writer.write(data)
            await self.writer.drain()

    @property
    def answered(self) -> bool:
        """The answer to the current request was sent whole (so the connection may serve another)."""
        return self.h11.our_state in (h11.DONE, h11.MUST_CLOSE)

    async def hung_up(self) -> None:
        """Return once the harness closes its side (while its answer is under way). What it sends meanwhile
        (a pipelined request) is kept for h11, up to BUFFERED_EARLY; then it is simply not read."""
        early = 0
        while early <= BUFFERED_EARLY:
            try:
                data = await self.reader.read(READ_BYTES)
            except ConnectionError:
                return
            if not data:
                return
            early += len(data)
            self.h11.receive_data(data)
        await anyio.sleep_forever()

    def abort(self) -> None:
        """End the connection at once: an answer begun and not ended reads as cut short to any HTTP client."""
        self.writer.transport.abort()

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()
