"""The egress proxy (agentd/gateway/egress.py; docs/gateway.md, "The network an attempt can reach"): real sockets on
127.0.0.1, a local echo server standing in for an allowed host, every connection's record."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.clock import FakeClock, format_ts
from agentd.gateway.egress import (
    Destination,
    EgressLimits,
    EgressProxy,
    EgressRecord,
    Refused,
    parse_allow_list,
    parse_connect,
    parse_destination,
)

WITHIN_S = 10.0


@dataclass
class Records:
    """The proxy's records as they come, and a way to wait for the nth."""

    seen: list[EgressRecord] = field(default_factory=list)
    arrived: anyio.Event = field(default_factory=anyio.Event)
    breaks: int = 0  # so many records first raise, as a sink that cannot keep them would

    def __call__(self, record: EgressRecord) -> None:
        if self.breaks:
            self.breaks -= 1
            raise RuntimeError("the evidence file is gone")
        self.seen.append(record)
        self.arrived.set()

    async def wait_for(self, count: int) -> list[EgressRecord]:
        with anyio.fail_after(WITHIN_S):
            while len(self.seen) < count:
                self.arrived = anyio.Event()
                await self.arrived.wait()
        return self.seen


@dataclass
class Running:
    proxy_port: int
    echo_port: int
    records: Records
    clock: FakeClock


async def _echo(stream: anyio.abc.SocketStream) -> None:
    async with stream:
        try:
            while True:
                await stream.send(await stream.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return


@asynccontextmanager
async def running(allow: list[str], limits: EgressLimits | None = None) -> AsyncIterator[Running]:
    """An echo server (the "host"), and the proxy on a listener of its own, allowing `allow` (ECHO: the echo
    server's port), until the block ends."""
    echo = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    echo_port = echo.extra(anyio.abc.SocketAttribute.local_port)
    listener = socket.create_server(("127.0.0.1", 0))
    records, clock = Records(), FakeClock()
    allowed = parse_allow_list(entry.replace("ECHO", str(echo_port)) for entry in allow)
    proxy = EgressProxy(allowed, records, clock, limits)
    async with echo, anyio.create_task_group() as group:
        group.start_soon(echo.serve, _echo)
        group.start_soon(proxy.serve, listener)
        yield Running(listener.getsockname()[1], echo_port, records, clock)
        group.cancel_scope.cancel()


async def ask(port: int, head: bytes) -> tuple[anyio.abc.SocketStream, bytes]:
    """A connection to the proxy that sent `head`, and the proxy's answer head."""
    stream = await anyio.connect_tcp("127.0.0.1", port)
    await stream.send(head)
    return stream, await answer(stream)


async def answer(stream: anyio.abc.SocketStream) -> bytes:
    said = b""
    with anyio.fail_after(WITHIN_S):
        while b"\r\n\r\n" not in said:
            try:
                said += await stream.receive(1)
            except anyio.EndOfStream:
                break
    return said


async def echoed(stream: anyio.abc.SocketStream, data: bytes, more: int = 0) -> bytes:
    """What comes back for `data` (and `more` bytes already on their way)."""
    await stream.send(data)
    got = b""
    with anyio.fail_after(WITHIN_S):
        while len(got) < len(data) + more:
            got += await stream.receive()
    return got


def connect(host: str, port: int) -> bytes:
    return f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()


@pytest.mark.parametrize(("entry", "host"), [("127.0.0.1:ECHO", "127.0.0.1"), ("localhost:ECHO", "localhost")])
@pytest.mark.asyncio
async def test_an_allowed_host_is_tunnelled_and_its_record_counts_the_bytes(entry: str, host: str) -> None:
    async with running([entry]) as run:
        stream, said = await ask(run.proxy_port, connect(host, run.echo_port))
        assert said.startswith(b"HTTP/1.1 200 ")
        async with stream:
            assert await echoed(stream, b"hello, host") == b"hello, host"
            assert await echoed(stream, b"x" * 100_000) == b"x" * 100_000
        [record] = await run.records.wait_for(1)
    assert record == EgressRecord(
        format_ts(run.clock.now()), host, run.echo_port, True, "closed", 200, 100_011, 100_011, 0.0
    )


@pytest.mark.asyncio
async def test_bytes_sent_with_the_request_head_reach_the_host_first() -> None:
    async with running(["127.0.0.1:ECHO"]) as run:
        stream, said = await ask(run.proxy_port, connect("127.0.0.1", run.echo_port) + b"early")
        async with stream:
            assert said.startswith(b"HTTP/1.1 200 ")
            assert await echoed(stream, b"-late", more=len(b"early")) == b"early-late"
        [record] = await run.records.wait_for(1)
    assert (record.bytes_up, record.bytes_down) == (10, 10)


@pytest.mark.asyncio
async def test_a_half_close_lets_the_answer_through() -> None:
    """The client says it is done sending (shutdown SHUT_WR); what the host still sends reaches it."""
    async with running(["127.0.0.1:ECHO"]) as run:
        stream, _ = await ask(run.proxy_port, connect("127.0.0.1", run.echo_port))
        async with stream:
            await stream.send(b"last words")
            await stream.send_eof()
            got = b""
            with anyio.fail_after(WITHIN_S):
                while True:
                    try:
                        got += await stream.receive()
                    except anyio.EndOfStream:
                        break
        assert got == b"last words"
        [record] = await run.records.wait_for(1)
    assert record.reason == "closed" and record.bytes_down == 10


@pytest.mark.parametrize(
    ("head", "status", "reason"),
    [
        (b"CONNECT example.com:443 HTTP/1.1\r\n\r\n", 403, "not in the allow list"),
        (b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", 405, "not a CONNECT request"),
        (b"CONNECT example.com HTTP/1.1\r\n\r\n", 400, "malformed CONNECT target"),
        (b"CONNECT 127.0.0.1:0 HTTP/1.1\r\n\r\n", 400, "malformed CONNECT target"),
        (b"hello\r\n\r\n", 400, "malformed request line"),
        (b"CONNECT a:1 HTTP/1.1\r\nX: " + b"y" * 9000 + b"\r\n\r\n", 400, "request head over 8192 bytes"),
    ],
)
@pytest.mark.asyncio
async def test_anything_else_is_answered_with_an_error_and_closed(head: bytes, status: int, reason: str) -> None:
    async with running(["127.0.0.1:ECHO"]) as run:
        stream, said = await ask(run.proxy_port, head)
        async with stream:
            assert said.startswith(f"HTTP/1.1 {status} ".encode()), said
            assert (b"Allow: CONNECT" in said) == (status == 405)
            with anyio.fail_after(WITHIN_S):  # closed by the proxy: the body, then the end
                while True:
                    try:
                        await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        break
        [record] = await run.records.wait_for(1)
    assert not record.allowed and record.status == status and record.reason is not None
    assert record.reason.startswith(reason)


@pytest.mark.asyncio
async def test_the_port_is_part_of_what_is_allowed() -> None:
    async with running(["127.0.0.1:ECHO"]) as run:
        stream, said = await ask(run.proxy_port, connect("127.0.0.1", run.echo_port + 1))
        await stream.aclose()
        [record] = await run.records.wait_for(1)
    assert said.startswith(b"HTTP/1.1 403 ") and record.port == run.echo_port + 1


@pytest.mark.asyncio
async def test_a_name_that_resolves_to_this_machine_is_refused_unless_the_list_names_it() -> None:
    """An allowed name never reaches the host's own loopback (nor a cloud's metadata address): only `localhost`
    or an address written in the list does."""
    name = socket.gethostname().lower()
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(name, 80, type=socket.SOCK_STREAM)}
    except OSError:
        addresses = set()
    if not addresses or not all(a.startswith("127.") or a == "::1" for a in addresses):
        pytest.skip(f"this machine's name {name!r} does not resolve to loopback alone ({addresses})")
    async with running([f"{name}:ECHO"]) as run:
        stream, said = await ask(run.proxy_port, connect(name, run.echo_port))
        await stream.aclose()
        [record] = await run.records.wait_for(1)
    assert said.startswith(b"HTTP/1.1 403 "), said
    assert record.reason is not None and "resolves only to addresses of this machine" in record.reason


@pytest.mark.asyncio
async def test_a_host_that_refuses_is_a_502() -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    async with running([f"127.0.0.1:{port}"]) as run:
        stream, said = await ask(run.proxy_port, connect("127.0.0.1", port))
        await stream.aclose()
        [record] = await run.records.wait_for(1)
    assert said.startswith(b"HTTP/1.1 502 ") and record.status == 502 and not record.allowed


@pytest.mark.asyncio
async def test_a_request_head_sent_too_slowly_is_a_408() -> None:
    async with running(["127.0.0.1:ECHO"], EgressLimits(head_s=0.2)) as run:
        stream, said = await ask(run.proxy_port, b"CONNECT 127.0.0.1:")
        await stream.aclose()
        [record] = await run.records.wait_for(1)
    assert said.startswith(b"HTTP/1.1 408 ") and record.status == 408


@pytest.mark.asyncio
async def test_an_idle_tunnel_is_closed() -> None:
    async with running(["127.0.0.1:ECHO"], EgressLimits(idle_s=0.3)) as run:
        stream, _ = await ask(run.proxy_port, connect("127.0.0.1", run.echo_port))
        async with stream:
            assert await echoed(stream, b"ping") == b"ping"
            with anyio.fail_after(WITHIN_S), pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                await stream.receive()  # nothing more is sent: the proxy ends the tunnel
        [record] = await run.records.wait_for(1)
    assert record.reason == "idle" and record.bytes_up == 4


@pytest.mark.asyncio
async def test_a_flood_is_bounded_and_the_proxy_serves_again_after_it() -> None:
    """Connections at once beyond the limit are answered 503 at once, each recorded; once the flood ends, an
    allowed connection works again."""
    limits = EgressLimits(max_connections=4, head_s=WITHIN_S)
    async with running(["127.0.0.1:ECHO"], limits) as run:
        holding = [await anyio.connect_tcp("127.0.0.1", run.proxy_port) for _ in range(4)]
        await holding[0].send(b"CONNECT 127.0.0.1:")  # each holds its place, sending no whole head
        flood = [await ask(run.proxy_port, connect("127.0.0.1", run.echo_port)) for _ in range(20)]
        assert all(said.startswith(b"HTTP/1.1 503 ") for _, said in flood)
        for stream in [*holding, *(stream for stream, _ in flood)]:
            await stream.aclose()
        records = await run.records.wait_for(24)
        stream, said = await ask(run.proxy_port, connect("127.0.0.1", run.echo_port))
        async with stream:
            assert said.startswith(b"HTTP/1.1 200 ")
            assert await echoed(stream, b"after") == b"after"
    assert sum(r.status == 503 for r in records) == 20
    assert all(r.reason == "more than 4 connections at once" for r in records if r.status == 503)


@pytest.mark.asyncio
async def test_a_record_that_cannot_be_kept_leaves_the_proxy_serving(caplog: pytest.LogCaptureFixture) -> None:
    async with running(["127.0.0.1:ECHO"]) as run:
        run.records.breaks = 1  # the first record's sink raises
        for _ in range(2):
            stream, said = await ask(run.proxy_port, connect("127.0.0.1", run.echo_port))
            async with stream:
                assert said.startswith(b"HTTP/1.1 200 ")
                assert await echoed(stream, b"again") == b"again"
        [record] = await run.records.wait_for(1)
    assert record.allowed and "egress_record_failed" in caplog.text


@pytest.mark.asyncio
async def test_clients_that_hang_up_are_recorded_not_logged_as_failures(caplog: pytest.LogCaptureFixture) -> None:
    """A hang-up before the head ends, and a reset in the middle of a tunnel, are what clients do."""
    async with running(["127.0.0.1:ECHO"]) as run:
        linger = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # on, 0 s: the close is a reset
        for head in (b"CONNECT 127.0.0.1:", b""):  # a reset, and a plain close, before the head ended
            stream = await anyio.connect_tcp("127.0.0.1", run.proxy_port)
            await stream.send(head or b"C")
            if head:
                stream.extra(anyio.abc.SocketAttribute.raw_socket).setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, linger
                )
            await stream.aclose()
        tunnel, said = await ask(run.proxy_port, connect("127.0.0.1", run.echo_port))
        assert said.startswith(b"HTTP/1.1 200 ") and await echoed(tunnel, b"ping") == b"ping"
        tunnel.extra(anyio.abc.SocketAttribute.raw_socket).setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        await tunnel.aclose()
        records = await run.records.wait_for(3)
    assert sorted((r.status, r.reason or "") for r in records) == [
        (0, "the client went away"),
        (200, "closed"),
        (400, "closed before the request head ended"),
    ]
    assert "egress_connection_failed" not in caplog.text


@pytest.mark.asyncio
async def test_stopping_the_proxy_records_an_open_tunnel_as_stopped() -> None:
    records = Records()
    echo = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    echo_port = echo.extra(anyio.abc.SocketAttribute.local_port)
    listener = socket.create_server(("127.0.0.1", 0))
    proxy = EgressProxy(parse_allow_list([f"127.0.0.1:{echo_port}"]), records, FakeClock())
    async with echo, anyio.create_task_group() as group:
        group.start_soon(echo.serve, _echo)
        group.start_soon(proxy.serve, listener)
        stream, _ = await ask(listener.getsockname()[1], connect("127.0.0.1", echo_port))
        assert await echoed(stream, b"open") == b"open"
        group.cancel_scope.cancel()
    await stream.aclose()
    assert [(r.allowed, r.reason, r.bytes_up) for r in records.seen] == [(True, "stopped", 4)]
    assert listener.fileno() == -1  # closed with the proxy


# --- the allow list and the request line, as parsed ------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "host", "port"),
    [
        ("github.com:443", "github.com", 443),
        ("GitHub.COM.:443", "github.com", 443),
        ("*.pythonhosted.org:443", "*.pythonhosted.org", 443),
        ("127.0.0.1:8080", "127.0.0.1", 8080),
        ("[::1]:8080", "::1", 8080),
        ("[0:0::1]:8080", "::1", 8080),
    ],
)
def test_allow_list_entries(entry: str, host: str, port: int) -> None:
    assert parse_destination(entry) == Destination(host, port)


@pytest.mark.parametrize(
    "entry",
    ["github.com", "github.com:0", "github.com:65536", "*:443", "*.1.2.3.4:443", "a b:1", "::1:80", "[x]:1", ""],
)
def test_what_is_no_allow_list_entry_is_refused_by_name(entry: str) -> None:
    with pytest.raises(ValueError, match=r"egress allow list: .*(expected host:port|a glob names a domain)"):
        parse_destination(entry)


def test_a_glob_allows_names_below_its_domain_only() -> None:
    [glob] = parse_allow_list(["*.pythonhosted.org:443"])
    assert glob.matches("files.pythonhosted.org", 443) and glob.matches("a.b.pythonhosted.org", 443)
    assert not glob.matches("pythonhosted.org", 443)
    assert not glob.matches("evilpythonhosted.org", 443)
    assert not glob.matches("files.pythonhosted.org", 80)


_LABELS = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True).filter(lambda s: not s.isdigit())
NAMES = st.lists(_LABELS, min_size=1, max_size=4).map(".".join)
PORTS = st.integers(1, 65535)
ADDRESSES = st.one_of(st.ip_addresses(v=4).map(str), st.ip_addresses(v=6).map(str))


@settings(max_examples=200)
@given(st.one_of(NAMES, NAMES.map(lambda n: f"*.{n}"), ADDRESSES), PORTS)
def test_an_entry_reads_back_as_it_is_written(host: str, port: int) -> None:
    written = Destination(host, port)
    assert parse_destination(str(written)) == written


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_any_request_head_is_read_or_refused_never_crashes(head: bytes) -> None:
    try:
        host, port = parse_connect(head)
    except Refused as refused:
        assert refused.status in (400, 405)
    else:
        assert 1 <= port <= 65535 and host


@settings(max_examples=200)
@given(st.one_of(NAMES, ADDRESSES), PORTS)
def test_a_connect_names_the_host_and_port_it_asks_for(host: str, port: int) -> None:
    target = f"[{host}]" if ":" in host else host
    assert parse_connect(f"CONNECT {target}:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode()) == (host, port)


@settings(max_examples=200)
@given(NAMES, NAMES, PORTS)
def test_a_glob_never_allows_its_own_domain_nor_a_name_that_merely_ends_like_it(
    label: str, domain: str, port: int
) -> None:
    glob = Destination(f"*.{domain}", port)
    assert glob.matches(f"{label}.{domain}", port)
    assert not glob.matches(domain, port)
    assert not glob.matches(f"{label}{domain}", port) or f"{label}{domain}".endswith(f".{domain}")
