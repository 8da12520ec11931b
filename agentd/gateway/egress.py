"""The egress proxy: an attempt's one way to the hosts it may reach (docs/gateway.md, "The network an attempt
can reach").

The dispatcher serves it on a listener inside the attempt's own network (agentd/process/netns.py), which the
attempt finds as HTTPS_PROXY. It takes HTTP `CONNECT host:port`, allows only the pairs its allow list names
(an exact host or a `*.domain` glob, and the port), resolves and connects from the host's network, answers
200 and splices bytes both ways until both sides have closed (or neither sent a byte for `idle_s`). Anything
else (another method, a host not allowed, a malformed request) gets 405, 403 or 400 and is closed. Every
connection, allowed or refused, becomes one EgressRecord for the caller. What one attempt can make it hold is
bounded: connections at once, the request head's size and time, and each tunnel's idleness.
"""

from __future__ import annotations

import ipaddress
import logging
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import anyio
import anyio.abc

from agentd import frozen_value
from agentd.clock import Clock, format_ts
from agentd.errors import contained

logger = logging.getLogger(__name__)

CHUNK_BYTES = 64 * 1024
ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"
REASONS = {400: "Bad Request", 403: "Forbidden", 405: "Method Not Allowed", 408: "Request Timeout"}
REASONS |= {502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout"}
# What a side that went away raises: a reset, a write to a closed socket, a read after close.
GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
PORT = re.compile(r"[0-9]{1,5}")


@frozen_value
class EgressLimits:
    """What one attempt's connections may hold of the dispatcher at once."""

    max_connections: int = 32  # open at once; one more is answered 503 and closed
    head_max_bytes: int = 8192  # of the request line and headers
    head_s: float = 10.0  # to send them in
    connect_s: float = 10.0  # to resolve the host and connect to it
    idle_s: float = 300.0  # a tunnel that carries no byte either way for this long is closed


@frozen_value
class Destination:
    """One entry of an allow list: `host:port`, the host exact (a name or an IP address) or `*.domain` (any
    name below that domain, not the domain itself)."""

    host: str  # lower case, no trailing dot; an IP address in its canonical form
    port: int

    def matches(self, host: str, port: int) -> bool:
        if port != self.port:
            return False
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        return host == self.host

    @property
    def names_this_machine(self) -> bool:
        """An entry that names an address (or localhost) itself may reach it, loopback or not; a name may not."""
        return self.host == "localhost" or _address(self.host) is not None

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_allow_list(entries: Iterable[str]) -> tuple[Destination, ...]:
    """The allow list from its entries (`github.com:443`, `*.pythonhosted.org:443`, `127.0.0.1:8080`,
    `[::1]:8080`). ValueError names the first entry that is none."""
    return tuple(parse_destination(entry) for entry in entries)


def parse_destination(text: str) -> Destination:
    """One allow-list entry; ValueError says what is wrong with it."""
    glob = text.startswith("*.")
    try:
        host, port = split_authority(text[2:] if glob else text)
    except ValueError as exc:
        raise ValueError(
            f"egress allow list: {text!r}: {exc}; expected host:port, *.domain:port or [v6]:port"
        ) from None
    if glob and _address(host) is not None:
        raise ValueError(f"egress allow list: {text!r}: a glob names a domain, not an address")
    return Destination(f"*.{host}" if glob else host, port)


def split_authority(text: str) -> tuple[str, int]:
    """`host:port` (as a CONNECT request names it) as the host in canonical form and the port; ValueError
    for anything else: no port, a port outside 1..65535, a host that is no DNS name or IP address."""
    host, colon, port = text.rpartition(":")
    if not colon or not PORT.fullmatch(port) or not 1 <= int(port) <= 65535:
        raise ValueError("no port 1..65535 after the host")
    if host.startswith("[") and host.endswith("]"):
        address = _address(host[1:-1])
        if address is None or address.version != 6:
            raise ValueError("not an IPv6 address between [ and ]")
        return str(address), int(port)
    return _host(host), int(port)


def _host(text: str) -> str:
    name = text.lower().removesuffix(".")
    if (address := _address(name)) is not None and address.version == 4:
        return str(address)
    if len(name) > 253 or not HOSTNAME.fullmatch(name) or name.replace(".", "").isdigit():
        raise ValueError("not a DNS name or an IPv4 address")
    return name


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def allowing(allow: Iterable[Destination], host: str, port: int) -> Destination | None:
    """The first entry of the allow list that allows host:port, or None."""
    return next((entry for entry in allow if entry.matches(host, port)), None)


@frozen_value
class EgressRecord:
    """One connection to the proxy, as the caller records it."""

    at: str  # when it was accepted (UTC)
    host: str | None  # as the request named it (None: no readable request)
    port: int | None
    allowed: bool  # a tunnel was opened
    reason: str | None  # why not; or, for a tunnel, how it ended ("closed", "idle", "stopped", "broken")
    status: int  # what the proxy answered (200: the tunnel)
    bytes_up: int  # from the attempt to the host
    bytes_down: int  # from the host to the attempt
    duration_s: float


class Refused(Exception):
    """A request answered with an error status and closed."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(status, reason)
        self.status, self.reason = status, reason


def parse_connect(head: bytes) -> tuple[str, int]:
    """The host and port a request head (its request line and headers, up to the empty line) asks to CONNECT
    to; Refused (400 malformed, 405 not CONNECT) otherwise."""
    line = head.split(b"\r\n", 1)[0]
    parts = line.split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1.") or not parts[0].isalpha():
        raise Refused(400, "malformed request line")
    if parts[0] != b"CONNECT":
        raise Refused(405, "not a CONNECT request")
    try:
        return split_authority(parts[1].decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refused(400, f"malformed CONNECT target: {exc}") from None


@dataclass
class _Connection:
    """What one connection has done so far (the record is made of it when it ends)."""

    at: str
    started: float
    host: str | None = None
    port: int | None = None
    status: int = 0
    reason: str | None = "stopped"  # until it says otherwise: the proxy was stopped (its attempt ended) first
    up: int = 0
    down: int = 0


class EgressProxy:
    """One attempt's egress proxy: its allow list, its limits, and where its records go."""

    def __init__(
        self,
        allow: Iterable[Destination],
        record: Callable[[EgressRecord], None],
        clock: Clock,
        limits: EgressLimits | None = None,
    ) -> None:
        self.allow = tuple(allow)
        self.record, self.clock = record, clock
        self.limits = limits or EgressLimits()
        self._open = 0

    async def serve(self, listener: socket.socket) -> None:
        """Serve CONNECT requests on `listener` until cancelled (the attempt has ended); closes it then."""
        served = await anyio.abc.SocketListener.from_socket(listener)
        async with served:
            await served.serve(self.connection)

    async def connection(self, client: anyio.abc.SocketStream) -> None:
        """One connection, from accept to its record: whatever it raises is its own failure, logged."""
        seen = _Connection(format_ts(self.clock.now()), self.clock.monotonic())
        self._open += 1
        try:
            with contained(logger, "egress_connection_failed") as failed:
                async with client:
                    try:
                        await self._answer(client, seen)
                    except GONE:
                        seen.reason = "closed" if seen.status == 200 else "the client went away"
            if failed.error is not None:
                seen.reason = f"failed: {failed.error}"
        finally:
            self._open -= 1
            self._record(seen)

    async def _answer(self, client: anyio.abc.SocketStream, seen: _Connection) -> None:
        try:
            if self._open > self.limits.max_connections:
                raise Refused(503, f"more than {self.limits.max_connections} connections at once")
            head, rest = await self._head(client)
            seen.host, seen.port = parse_connect(head)
            entry = allowing(self.allow, seen.host, seen.port)
            if entry is None:
                raise Refused(403, "not in the allow list")
            upstream = await self._connect(entry, seen.host, seen.port)
        except Refused as refused:
            seen.status, seen.reason = refused.status, refused.reason
            await _say(client, refused)
            return
        seen.status = 200
        async with upstream:
            await client.send(ESTABLISHED)
            seen.reason = await self._splice(client, upstream, rest, seen)

    async def _head(self, client: anyio.abc.SocketStream) -> tuple[bytes, bytes]:
        """The request head and whatever the client sent after it; Refused when it is too long or too slow."""
        limit, data = self.limits.head_max_bytes, b""
        with anyio.move_on_after(self.limits.head_s):
            while (end := data.find(b"\r\n\r\n")) < 0:
                if len(data) > limit:
                    raise Refused(400, f"request head over {limit} bytes")
                try:
                    data += await client.receive(CHUNK_BYTES)
                except anyio.EndOfStream:
                    raise Refused(400, "closed before the request head ended") from None
            if end + 4 > limit:
                raise Refused(400, f"request head over {limit} bytes")
            return data[: end + 4], data[end + 4 :]
        raise Refused(408, f"no whole request head within {self.limits.head_s:g}s")

    async def _connect(self, entry: Destination, host: str, port: int) -> anyio.abc.SocketStream:
        """A connection to host:port from the host's network: to an address the name resolves to that is not of
        this machine or its link, unless the entry names such an address (or localhost) itself."""
        with anyio.move_on_after(self.limits.connect_s):
            try:
                found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError as exc:
                raise Refused(502, f"cannot resolve {host}: {exc}") from None
            addresses = [str(info[4][0]) for info in found]
            reachable = [a for a in addresses if entry.names_this_machine or not _of_this_machine(a)]
            if not reachable:
                raise Refused(403, f"{host} resolves only to addresses of this machine or its link ({addresses[0]})")
            return await _first_to_answer(reachable, port)
        raise Refused(504, f"cannot connect to {host}:{port} within {self.limits.connect_s:g}s")

    async def _splice(
        self, client: anyio.abc.SocketStream, upstream: anyio.abc.SocketStream, rest: bytes, seen: _Connection
    ) -> str:
        """Bytes both ways until both sides have closed (or one broke), or none moved for `idle_s`: "closed" or
        "idle"."""
        broken: list[bool] = []
        async with anyio.create_task_group() as pumps:
            idle = pumps.cancel_scope
            idle.deadline = anyio.current_time() + self.limits.idle_s

            def moved(up: int, down: int) -> None:
                seen.up, seen.down = seen.up + up, seen.down + down
                idle.deadline = anyio.current_time() + self.limits.idle_s

            if rest:
                await upstream.send(rest)
                moved(len(rest), 0)
            pumps.start_soon(_pump, client, upstream, lambda n: moved(n, 0), broken, idle)
            pumps.start_soon(_pump, upstream, client, lambda n: moved(0, n), broken, idle)
        return "idle" if idle.cancelled_caught and not broken else "closed"

    def _record(self, seen: _Connection) -> None:
        tunnel = seen.status == 200
        duration = max(self.clock.monotonic() - seen.started, 0.0)
        made = EgressRecord(
            seen.at, seen.host, seen.port, tunnel, seen.reason, seen.status, seen.up, seen.down, duration
        )
        logger.debug(
            "egress_connection host=%s port=%s status=%s reason=%s", seen.host, seen.port, seen.status, seen.reason
        )
        with contained(logger, "egress_record_failed host=%s", seen.host):
            self.record(made)


def _of_this_machine(address: str) -> bool:
    """Loopback, link-local (a cloud's metadata service at 169.254.169.254), unspecified or multicast."""
    found = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(found, ipaddress.IPv6Address) and found.ipv4_mapped is not None:
        found = found.ipv4_mapped
    return found.is_loopback or found.is_link_local or found.is_unspecified or found.is_multicast


async def _first_to_answer(addresses: list[str], port: int) -> anyio.abc.SocketStream:
    """A connection to the first of `addresses` that takes one; Refused (502) when none does."""
    last: OSError | None = None
    for address in addresses:
        try:
            return await anyio.connect_tcp(address, port)
        except OSError as exc:
            last = exc
    raise Refused(502, f"cannot connect to port {port}: {last}")


async def _pump(
    source: anyio.abc.SocketStream,
    sink: anyio.abc.SocketStream,
    moved: Callable[[int], None],
    broken: list[bool],
    both: anyio.CancelScope,
) -> None:
    """Bytes from source to sink until source closes (then sink is told so: a half-close); a side that breaks
    ends both ways."""
    try:
        while True:
            chunk = await source.receive(CHUNK_BYTES)
            await sink.send(chunk)
            moved(len(chunk))
    except anyio.EndOfStream:
        try:
            await sink.send_eof()
            return
        except GONE:
            pass
    except GONE:
        pass
    broken.append(True)
    both.cancel()


async def _say(client: anyio.abc.SocketStream, refused: Refused) -> None:
    """The error answer, sent if the client takes it within a second (it is closed after, either way)."""
    body = f"{refused.reason}\n".encode()
    allow = b"Allow: CONNECT\r\n" if refused.status == 405 else b""
    head = f"HTTP/1.1 {refused.status} {REASONS[refused.status]}\r\nContent-Type: text/plain\r\n".encode()
    sized = f"Content-Length: {len(body)}\r\nConnection: close\r\n".encode()
    with anyio.move_on_after(1.0):
        try:
            await client.send(head + allow + sized + b"\r\n" + body)
        except GONE:
            return
