"""The gateway's side toward the providers: HTTP/1.1 over asyncio streams with h11, TLS where the route says
https, connections kept alive per origin (docs/decisions.md, "The model gateway": httpx cost 0.8 ms of CPU
a call here, this 0.2 ms).

One request at a time per connection; a connection goes back to its origin's pool only once its answer was
read whole, and one found closed by the provider while idle is dropped, never used. No request is sent twice:
a call that fails is the harness's to retry. No proxy: the dispatcher reaches the provider itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import anyio
import h11

from agentd import frozen_value

CONNECT_S = 10.0
READ_S = 300.0  # between two pieces of an answer: a model may think a long while before its first token
WRITE_S = 60.0
IDLE_S = 30.0  # a kept connection unused this long is closed rather than reused (providers drop them)
MAX_IDLE = 32  # kept connections per origin
READ_BYTES = 64 * 1024
MAX_HEAD_BYTES = 64 * 1024

Headers = list[tuple[bytes, bytes]]
Waiting = Callable[[], Awaitable[None]]


class UpstreamError(Exception):
    """The upstream failed; the message says how, in words (never a header's value)."""


@frozen_value
class Origin:
    """Where a route's calls go: scheme, host and port, the `host` header, and the base path to prefix."""

    scheme: str
    host: str
    port: int
    host_header: bytes
    base_path: str


@functools.lru_cache(maxsize=256)
def origin_of(upstream: str) -> Origin:
    """A route's upstream (`https://api.anthropic.com`, `http://127.0.0.1:8080/api`) as an Origin."""
    parts = urlsplit(upstream)
    default = 443 if parts.scheme == "https" else 80
    port = parts.port or default
    host = parts.hostname or ""
    bracketed = f"[{host}]" if ":" in host else host
    header = bracketed if port == default else f"{bracketed}:{port}"
    return Origin(parts.scheme, host, port, header.encode("ascii"), parts.path.rstrip("/"))


class Answer:
    """An upstream's answer: its head at once, its body piece by piece (`pieces`), then `close`."""

    def __init__(self, connection: _Connection, response: h11.Response, upstream: Upstream) -> None:
        self._connection, self._upstream = connection, upstream
        self.status = response.status_code
        self.reason = bytes(response.reason)
        self.headers: Headers = [(bytes(name), bytes(value)) for name, value in response.headers]

    async def pieces(self, before_waiting: Waiting | None = None) -> AsyncIterator[bytes]:
        """The body as it arrives; `before_waiting` is awaited the first time a piece is not there yet.
        :raises UpstreamError: a piece not within READ_S, or the connection ended early."""
        connection = self._connection
        while True:
            event = await connection.next_event(self._upstream.read_s, before_waiting)
            before_waiting = None
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return
            else:
                raise UpstreamError("the connection closed before the answer ended")

    def close(self) -> None:
        """The connection back to its pool if the answer was read whole, else closed."""
        self._upstream.release(self._connection)


class _Connection:
    """One kept-alive connection to an origin."""

    def __init__(self, origin: Origin, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.origin, self.reader, self.writer = origin, reader, writer
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.idle_since = 0.0

    def stale(self, now: float, idle_s: float) -> bool:
        """Closed by the other end (or sending unasked) while it sat in the pool, or idle too long."""
        unasked = bool(
            getattr(self.reader, "_buffer", b"")
        )  # bytes no request asked for: never parse them as an answer
        return self.writer.is_closing() or self.reader.at_eof() or unasked or now - self.idle_since > idle_s

    async def next_event(self, read_s: float, before_waiting: Waiting | None = None) -> Any:
        """The next h11 event of the answer. :raises UpstreamError: none came in time, or it broke HTTP/1.1."""
        try:
            return await self._next_event(read_s, before_waiting)
        except h11.RemoteProtocolError as exc:
            raise UpstreamError(f"the answer broke HTTP/1.1 ({exc})") from None

    async def _next_event(self, read_s: float, before_waiting: Waiting | None) -> Any:
        while (event := self.h11.next_event()) is h11.NEED_DATA:
            if before_waiting is not None:
                await before_waiting()
                before_waiting = None
            try:
                with anyio.fail_after(read_s):
                    data = await self.reader.read(READ_BYTES)
            except TimeoutError:
                raise UpstreamError(f"no answer within the read timeout ({read_s:g} s)") from None
            except (ConnectionError, OSError) as exc:
                raise UpstreamError(f"the connection failed while reading ({type(exc).__name__})") from None
            self.h11.receive_data(data)
        return event

    def close(self) -> None:
        self.writer.close()


class Upstream:
    """Sends a request to an origin and hands back its answer, reusing kept-alive connections."""

    def __init__(
        self,
        *,
        connect_s: float = CONNECT_S,
        read_s: float = READ_S,
        write_s: float = WRITE_S,
        idle_s: float = IDLE_S,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.connect_s, self.read_s, self.write_s, self.idle_s = connect_s, read_s, write_s, idle_s
        self._tls = tls
        self._idle: dict[Origin, list[_Connection]] = {}

    async def send(self, origin: Origin, method: str, target: str, headers: Headers, body: bytes) -> Answer:
        """Send the request whole and read its answer's head. :raises UpstreamError: what failed, in words."""
        connection = self._kept(origin) or await self._connect(origin)
        try:
            head = [(b"host", origin.host_header), *headers, (b"content-length", str(len(body)).encode())]
            request = h11.Request(method=method, target=origin.base_path + target, headers=head)
            data = connection.h11.send(request) + connection.h11.send(h11.Data(data=body))
            connection.writer.write(data + connection.h11.send(h11.EndOfMessage()))
            await self._drained(connection)
            while not isinstance(response := await connection.next_event(self.read_s), h11.Response):
                if not isinstance(response, h11.InformationalResponse):
                    raise UpstreamError("the connection closed before an answer")
            return Answer(connection, response, self)
        except h11.ProtocolError as exc:
            connection.close()
            raise UpstreamError(f"the answer is not HTTP/1.1 ({exc})") from None
        except BaseException:
            connection.close()
            raise

    async def _drained(self, connection: _Connection) -> None:
        try:
            with anyio.fail_after(self.write_s):
                await connection.writer.drain()
        except TimeoutError:
            raise UpstreamError(f"sending the request took longer than {self.write_s:g} s") from None
        except (ConnectionError, OSError) as exc:
            raise UpstreamError(f"the connection failed while sending ({type(exc).__name__})") from None

    def _kept(self, origin: Origin) -> _Connection | None:
        idle, now = self._idle.get(origin), anyio.current_time()
        while idle:
            connection = idle.pop()
            if not connection.stale(now, self.idle_s):
                return connection
            connection.close()
        return None

    async def _connect(self, origin: Origin) -> _Connection:
        tls = None
        if origin.scheme == "https":
            tls = self._tls or _default_tls()
        try:
            with anyio.fail_after(self.connect_s):
                reader, writer = await asyncio.open_connection(
                    origin.host, origin.port, ssl=tls, server_hostname=origin.host if tls else None, limit=READ_BYTES
                )
        except TimeoutError:
            raise UpstreamError(f"connecting took longer than {self.connect_s:g} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise UpstreamError(f"could not connect ({type(exc).__name__}: {exc.strerror or exc})") from None
        sock = writer.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(origin, reader, writer)

    def release(self, connection: _Connection) -> None:
        """Back to its origin's pool if it may carry another request, else closed."""
        machine = connection.h11
        if machine.our_state is h11.DONE and machine.their_state is h11.DONE:
            machine.start_next_cycle()
            idle = self._idle.setdefault(connection.origin, [])
            if len(idle) < MAX_IDLE:
                connection.idle_since = anyio.current_time()
                idle.append(connection)
                return
        connection.close()

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
                with contextlib.suppress(OSError):
                    await connection.writer.wait_closed()
        self._idle.clear()


@functools.lru_cache(maxsize=1)
def _default_tls() -> ssl.SSLContext:
    """The system's trusted certificates, HTTP/1.1 by ALPN."""
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    return context
