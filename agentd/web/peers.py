"""Who is on the other end of a connection from this machine: the user that owns the client's socket, asked
of the kernel by the connection's four numbers (netlink's sock_diag, the interface `ss` uses: one exact
lookup, not a read of every socket's line in /proc/net/tcp, which takes tens of milliseconds on a machine
with a thousand sockets in TIME-WAIT). Every local client connects from 127.0.0.1, the operator's browser
or SSH tunnel and the agent's own attempts alike, so the address alone cannot tell them apart; the
socket's owner can (docs/web.md, "Who may connect").

The owner is looked up once, when the connection is accepted (`PeerSocket`), before the console reads a
byte of it, and kept for the connection (`PeerBook`): a client that closes its end right after sending
leaves an orphan whose owner the kernel no longer knows (it said uid 0, root's), so a lookup made later,
per request, judged the run user's request as root's. A local client whose owner is unknown then is
refused; a client on another machine is its address alone.

Linux only; elsewhere (or in a user namespace) the book is off and every client is its address alone."""

from __future__ import annotations

import functools
import ipaddress
import os
import socket
import struct
import weakref
from pathlib import Path
from typing import Any

from agentd import frozen_value

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
NO_COOKIE = 0xFFFFFFFF
HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
REQUEST = struct.Struct("=BBBBI")  # inet_diag_req_v2: family, protocol, extensions, pad, states
SOCKET_ID = struct.Struct(">HH16s16s")  # inet_diag_sockid: source port, destination port, addresses (network order)
TAIL = struct.Struct("=III")  # the socket id's interface and cookie (no cookie: any socket of these four)
IP = ipaddress.IPv4Address | ipaddress.IPv6Address
UID_AT = HEADER.size + 4 + SOCKET_ID.size + TAIL.size + 12  # inet_diag_msg: ..., expires, rqueue, wqueue, uid, inode


def local_peer_uid(client: tuple[str, int] | None, server: tuple[str, int] | None) -> int | None:
    """The uid owning the client's end of the TCP connection `client` → `server`, when both ends are on
    this machine; None when no such socket is found (another machine's client, not Linux, closed)."""
    if client is None or server is None or not all(0 <= end[1] <= 0xFFFF for end in (client, server)):
        return None
    try:
        source, destination = ipaddress.ip_address(client[0]), ipaddress.ip_address(server[0])
    except ValueError:
        return None
    for family, src, dst in _forms(source, destination):
        uid = _ask(family, src, client[1], dst, server[1])
        if uid is not None:
            return uid
    return None


def cannot_tell_apart() -> str | None:
    """Why this process cannot tell local clients apart, or None when it can: it must see uids as the
    machine does (no user namespace mapping them away, as systemd's PrivateUsers= makes one), and a
    loopback connection to itself must read back as its own uid."""
    try:
        mapping = Path("/proc/self/uid_map").read_text().split()
    except OSError:
        return "/proc/self/uid_map cannot be read (not Linux)"
    if mapping[:3] != ["0", "0", "4294967295"]:
        return "it runs in a user namespace of its own (PrivateUsers=), where every other user's uid reads as 65534"
    with socket.socket() as server, socket.socket() as client:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        client.connect(server.getsockname())
        accepted, peer = server.accept()
        with accepted:
            found = local_peer_uid(peer, accepted.getsockname())
    if found != os.geteuid():
        return "netlink's sock_diag named no owner of a local socket (RestrictAddressFamilies= without AF_NETLINK?)"
    return None


def _forms(source: IP, destination: IP) -> list[tuple[int, bytes, bytes]]:
    """The families and addresses the client's socket may have: a server listening on IPv6 sees an IPv4
    client as ::ffff:a.b.c.d, while the client's own socket is IPv4 (or, rarely, IPv6 to a mapped one)."""
    pair = [_mapped(source), _mapped(destination)]
    forms = [(int(socket.AF_INET6), _v6(source), _v6(destination))]
    if all(isinstance(a, ipaddress.IPv4Address) for a in pair):
        forms.insert(0, (int(socket.AF_INET), pair[0].packed, pair[1].packed))
    return forms


def _mapped(address: IP) -> IP:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _v6(address: IP) -> bytes:
    if isinstance(address, ipaddress.IPv4Address):
        return b"\0" * 10 + b"\xff\xff" + address.packed
    return address.packed


def _ask(family: int, src: bytes, sport: int, dst: bytes, dport: int) -> int | None:
    """One exact lookup (no NLM_F_DUMP: the kernel finds the one socket with these four numbers)."""
    body = (
        REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF)
        + SOCKET_ID.pack(sport, dport, src.ljust(16, b"\0"), dst.ljust(16, b"\0"))
        + TAIL.pack(0, NO_COOKIE, NO_COOKIE)
    )
    message = HEADER.pack(HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0) + body
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as conn:
            conn.settimeout(1.0)
            conn.sendto(message, (0, 0))
            reply = conn.recv(8192)
    except (OSError, AttributeError):  # not Linux (no AF_NETLINK), or the kernel would not say
        return None
    if len(reply) < UID_AT + 8 or HEADER.unpack_from(reply)[1] == NLMSG_ERROR:
        return None  # no such socket (ENOENT): it closed, or it is not on this machine
    uid, inode = struct.unpack_from("=II", reply, UID_AT)
    if inode == 0:
        # An orphan: its process closed it (FIN-WAIT-1/2, CLOSING, LAST-ACK, TIME-WAIT). The kernel
        # still answers for it, with uid 0 once it is a time-wait entry (FIN-WAIT-2 too): no one's.
        return None
    found: int = uid
    return found


@frozen_value
class Owner:
    """Who a connection is from: `uid` of its socket when on this machine and known; `local` whether
    the client is on this machine (a loopback address, or a socket the kernel found)."""

    uid: int | None
    local: bool

    @property
    def unknown(self) -> bool:
        """A local client whose owner the kernel could not name (it closed before it was accepted)."""
        return self.local and self.uid is None


REMOTE = Owner(None, False)
UNKNOWN = Owner(None, True)
Ends = tuple[tuple[str, int], tuple[str, int]]


def owner_of(client: tuple[str, int], server: tuple[str, int]) -> Owner:
    """The owner of `client`'s socket; a loopback client whose socket is gone (or an orphan) is UNKNOWN."""
    uid = local_peer_uid(client, server)
    if uid is not None:
        return Owner(uid, True)
    try:
        address = _mapped(ipaddress.ip_address(client[0]))
    except ValueError:
        return UNKNOWN
    return UNKNOWN if address.is_loopback else REMOTE


class PeerBook:
    """Each open connection (`Connection`, as `PeerSocket` accepted it) by its ends, with the owner of its
    client's socket as found at accept. `enabled` is False where this process cannot tell local clients
    apart (`cannot_tell_apart`): every client is then its address alone, as docs/web.md says."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._open: dict[Ends, weakref.ref[Connection]] = {}

    def accepted(self, conn: Connection, client: Any) -> None:
        """Look up the owner of a connection just accepted, and keep the connection until it is closed
        (or, should nothing close it, collected)."""
        try:
            conn.ends = _ends(client, conn.getsockname())
        except (OSError, ValueError, TypeError, IndexError):  # gone already, or not an address pair: no one's
            return
        conn.owner = owner_of(*conn.ends) if self.enabled else REMOTE
        conn.book = self
        self._open[conn.ends] = weakref.ref(conn, functools.partial(self._drop_dead, conn.ends))

    def connection(self, client: Any, server: Any) -> Connection | None:
        """The open connection `client` → `server` (as an ASGI scope names its ends), if it is one."""
        try:
            found = self._open.get(_ends(client, server))
        except (ValueError, TypeError, IndexError):
            return None
        return found() if found is not None else None

    def owner(self, client: Any, server: Any) -> Owner:
        """The owner found at accept of the connection `client` → `server`; UNKNOWN for one never looked
        up; REMOTE for all when the book is off."""
        if not self.enabled:
            return REMOTE
        conn = self.connection(client, server)
        return conn.owner if conn is not None else UNKNOWN

    def forget(self, conn: Connection) -> None:
        """The connection is closed: its entry goes (unless a later one on the same ends took its place)."""
        if conn.ends is not None and (found := self._open.get(conn.ends)) is not None and found() is conn:
            del self._open[conn.ends]

    def _drop_dead(self, ends: Ends, _gone: object) -> None:
        found = self._open.get(ends)
        if found is not None and found() is None:
            del self._open[ends]

    def __len__(self) -> int:
        return len(self._open)


def _ends(client: Any, server: Any) -> Ends:
    """(host, port) of each end, as hypercorn puts them in a scope (an IPv6 address's flow and scope ids
    dropped)."""
    return (str(client[0]), int(client[1])), (str(server[0]), int(server[1]))


class PeerSocket(socket.socket):
    """The console's listening socket: each connection's owner is looked up as it is accepted (asyncio's
    server calls `accept` on the very socket it was given), before a byte of it is read."""

    book: PeerBook

    @classmethod
    def listening(cls, sock: socket.socket, book: PeerBook) -> PeerSocket:
        """`sock` (bound and listening), taken over."""
        held = cls(sock.family, sock.type, sock.proto, fileno=sock.detach())
        held.book = book
        return held

    def accept(self) -> tuple[socket.socket, Any]:
        """socket.accept's own steps, the connection made a `Connection` the book keeps."""
        fd, client = self._accept()  # type: ignore[attr-defined]
        conn = Connection(self.family, self.type, self.proto, fileno=fd)
        if socket.getdefaulttimeout() is None and self.gettimeout():
            conn.setblocking(True)
        self.book.accepted(conn, client)
        return conn, client


class Connection(socket.socket):
    """An accepted connection: the owner found at accept, and `cut()`, which ends what the server reads
    of it (asyncio's transport reads through `recv`: from then on it reads the end, and hypercorn closes
    the connection). A close takes it out of the book."""

    owner: Owner = UNKNOWN
    ends: Ends | None = None
    book: PeerBook | None = None
    cut_off = False

    def cut(self) -> None:
        """Read no more of this connection: the server sees its end, whatever the client still sends."""
        self.cut_off = True

    def recv(self, size: int, flags: int = 0) -> bytes:
        return b"" if self.cut_off else super().recv(size, flags)

    def recv_into(self, buffer: Any, size: int = 0, flags: int = 0) -> int:
        return 0 if self.cut_off else super().recv_into(buffer, size, flags)

    def close(self) -> None:
        if self.book is not None:
            self.book.forget(self)
        super().close()
