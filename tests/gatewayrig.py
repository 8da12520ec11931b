"""What the gateway's tests share: a gateway serving on a real 127.0.0.1 socket, hooks that remember what
they were asked, a tap that records the exact bytes an upstream sent, and upstreams that misbehave on
purpose (stall, break off) on real sockets."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import h11
import httpx

from agentd.clock import SystemClock
from agentd.gateway.calls import GO, CallRecord, CallRequest, Route, Verdict
from agentd.gateway.server import Gateway

KEY = "sk-real-provider-key-7f3a9c0d"  # what only the gateway holds
TOKEN = "agentd-attempt-token-0123456789abcdef"  # what the attempt holds


@dataclass
class Recorder:
    """Hooks that remember every call, estimate and record; `verdict` answers `before`, `cut_at` makes
    `on_progress` say stop once the estimate reaches it."""

    verdict: Verdict = GO
    cut_at: int | None = None
    before_fails: bool = False
    calls: list[CallRequest] = field(default_factory=list)
    estimates: list[int] = field(default_factory=list)
    records: list[CallRecord] = field(default_factory=list)
    recorded: asyncio.Event = field(default_factory=asyncio.Event)

    async def before(self, call: CallRequest) -> Verdict:
        self.calls.append(call)
        if self.before_fails:
            raise RuntimeError("the budget's database is gone")
        return self.verdict

    def on_progress(self, call: CallRequest, output_tokens: int) -> bool:
        self.estimates.append(output_tokens)
        return self.cut_at is None or output_tokens < self.cut_at

    async def after(self, record: CallRecord) -> None:
        self.records.append(record)
        self.recorded.set()

    async def record(self, count: int = 1, within_s: float = 5.0) -> CallRecord:
        """The `count`th record, once it is there."""
        async with asyncio.timeout(within_s):
            while len(self.records) < count:
                self.recorded.clear()
                await self.recorded.wait()
        return self.records[count - 1]


@contextlib.asynccontextmanager
async def serving(gateway: Gateway | None = None) -> AsyncIterator[tuple[Gateway, str]]:
    """A gateway serving on a fresh 127.0.0.1 port until the block ends: (the gateway, its base URL)."""
    gateway = gateway or Gateway(SystemClock())
    listener = socket.create_server(("127.0.0.1", 0))
    task = asyncio.create_task(gateway.serve(listener))
    try:
        yield gateway, f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        listener.close()
        await gateway.aclose()


def admit(gateway: Gateway, upstream: str, style: str = "x-api-key", **hooks: object) -> Recorder:
    recorder = Recorder(**hooks)  # type: ignore[arg-type]
    gateway.admit(TOKEN, Route(upstream, style, KEY), recorder)  # type: ignore[arg-type]
    return recorder


def client(url: str, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=url, headers=headers, timeout=10.0, trust_env=False)


class LoopbackServer:
    """A server on the host's loopback at a port the kernel picks, each connection a task of `_serve`; leaving it
    closes the server and ends the tasks (`cancel`: at once, else waiting up to 5 s for them to end)."""

    cancel = False

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._connected, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        for task in self.tasks if self.cancel else ():
            task.cancel()
        async with asyncio.timeout(5):
            await asyncio.gather(*self.tasks, return_exceptions=True)

    def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.tasks.append(asyncio.create_task(self._serve(reader, writer)))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class Tap(LoopbackServer):
    """A TCP relay in front of an upstream that keeps, per connection, the bytes the upstream sent back."""

    def __init__(self, upstream_port: int) -> None:
        super().__init__()
        self.upstream_port = upstream_port
        self.answers: list[bytearray] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        answer = bytearray()
        self.answers.append(answer)

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, keep: bytearray | None) -> None:
            while data := await source.read(65536):
                if keep is not None:
                    keep += data
                sink.write(data)
                await sink.drain()
            with contextlib.suppress(OSError):
                sink.write_eof()

        with contextlib.suppress(OSError):
            await asyncio.gather(pump(reader, up_writer, None), pump(up_reader, writer, answer))
        for each in (writer, up_writer):
            each.close()
            with contextlib.suppress(OSError):
                await each.wait_closed()

    def bodies(self) -> list[bytes]:
        """The body of each answer the upstream sent, its HTTP framing taken off."""
        found = []
        for raw in self.answers:
            parser = h11.Connection(h11.CLIENT)
            parser.send(h11.Request(method="POST", target="/", headers=[("host", "x"), ("content-length", "0")]))
            parser.send(h11.EndOfMessage())
            parser.receive_data(bytes(raw))
            parser.receive_data(b"")
            body = bytearray()
            while not isinstance(event := parser.next_event(), h11.EndOfMessage | h11.ConnectionClosed):
                if isinstance(event, h11.Data):
                    body += event.data
            found.append(bytes(body))
        return found


Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawUpstream(LoopbackServer):
    """An upstream on a real socket whose answer a test writes by hand (`answer`); `closed` is set when the
    gateway closes a connection to it."""

    cancel = True

    def __init__(self, answer: Answer) -> None:
        super().__init__()
        self.answer = answer
        self.closed = asyncio.Event()
        self.requests = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.requests += 1
        try:
            await reader.readuntil(b"\r\n\r\n")
            await self.answer(reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()


async def stall_after_one_event(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up: RawUpstream) -> None:
    """Headers and one SSE event, then nothing until the gateway hangs up."""
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
    event = b'event: ping\ndata: {"type": "ping"}\n\n'
    writer.write(b"%x\r\n%s\r\n" % (len(event), event))
    await writer.drain()
    while await reader.read(65536):
        pass
    up.closed.set()
