"""Who is on the other end of a connection from this machine: the user that owns the client's socket, asked
of the kernel by the connection's four numbers (netlink's sock_diag, the interface `ss` uses: one exact
lookup, not a read of every socket's line in /proc/net/tcp, which takes tens of milliseconds on a machine
with a thousand sockets in TIME-WAIT). Every local client connects from 127.0.0.1, the operator's browser
or SSH tunnel and the agent's own attempts alike, so the address alone cannot tell them apart; the
socket's owner can (docs/web.md, "Who may connect").

Linux only; elsewhere, or when the connection is gone before it is looked up, the owner is unknown."""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from pathlib import Path

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
NO_COOKIE = 0xFFFFFFFF
TCP_TIME_WAIT = 6
HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
REQUEST = struct.Struct("=BBBBI")  # inet_diag_req_v2: family, protocol, extensions, pad, states
SOCKET_ID = struct.Struct(">HH16s16s")  # inet_diag_sockid: source port, destination port, addresses (network order)
TAIL = struct.Struct("=III")  # the socket id's interface and cookie (no cookie: any socket of these four)
IP = ipaddress.IPv4Address | ipaddress.IPv6Address
UID_AT = HEADER.size + 4 + SOCKET_ID.size + TAIL.size + 12  # inet_diag_msg: ..., expires, rqueue, wqueue, uid


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
    if len(reply) < UID_AT + 4 or HEADER.unpack_from(reply)[1] == NLMSG_ERROR:
        return None  # no such socket (ENOENT): it closed, or it is not on this machine
    if reply[HEADER.size + 1] == TCP_TIME_WAIT:
        return None  # what is left of a closed socket: the kernel reports uid 0 for it, which is no one's
    uid: int = struct.unpack_from("=I", reply, UID_AT)[0]
    return uid
