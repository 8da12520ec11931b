"""The listening sockets systemd hands a service (socket activation, sd_listen_fds(3)).

`agentd install` writes a .socket unit for each of an agent's ports (the console's, and each metrics
port), so systemd binds them at boot, before any service of any agent starts, and holds them across
the services' restarts. No other user on the machine, an attempt of this agent or another's among them,
can take a port while its service is down and answer in its place: a console on a port an attempt took
would collect the operator's token (docs/install-and-deploy.md, "Ports held by systemd").

A service takes the socket whose address is its configured one; a service that was given sockets but
none on its address refuses to start (the TOML and the socket unit disagree: `agentd install` again).
Without systemd (`agentd run`, a test) nothing is passed and each service binds its own port.
"""

from __future__ import annotations

import functools
import os
import socket

from agentd.config.addresses import listen_parts
from agentd.edge import whole_number
from agentd.errors import InputError

LISTEN_FDS_START = 3  # sd_listen_fds(3): the first passed descriptor


@functools.cache
def passed_sockets() -> tuple[socket.socket, ...]:
    """The listening TCP sockets systemd passed this very process (LISTEN_PID is ours), read once. The
    variables are removed, so no child (an attempt, a sensor) takes them for its own."""
    pid, count = whole_number(os.environ.pop("LISTEN_PID", "")), whole_number(os.environ.pop("LISTEN_FDS", ""))
    os.environ.pop("LISTEN_FDNAMES", None)
    if pid != os.getpid() or count is None:
        return ()
    found = []
    for fd in range(LISTEN_FDS_START, LISTEN_FDS_START + min(count, 64)):
        try:
            os.set_inheritable(fd, False)  # sd_listen_fds sets FD_CLOEXEC: an attempt never holds the port
            sock = socket.socket(fileno=fd)
        except OSError:  # a count past what was passed: nothing there to take
            continue
        if sock.type == socket.SOCK_STREAM and sock.family in (socket.AF_INET, socket.AF_INET6):
            found.append(sock)
    return tuple(found)


def passed_socket(listen: str, key: str) -> socket.socket | None:
    """The socket systemd passed for HOST:PORT (`key` names the setting, for the error), or None when
    systemd passed none at all.

    :raises InputError: sockets were passed, none on this address (the TOML changed since `agentd
        install` wrote the socket units).
    """
    passed = passed_sockets()
    if not passed:
        return None
    host, port = listen_parts(listen)
    wanted = _addresses(host)
    for sock in passed:
        bound_host, bound_port = sock.getsockname()[:2]
        if bound_host in wanted and port in (0, bound_port):
            return sock
    given = ", ".join(_address(sock) for sock in passed)
    raise InputError(
        f"{key}: systemd passed a socket on {given}, but {key} is {listen}: the socket unit and the TOML "
        "disagree; run `agentd install` again (it rewrites the socket units from the TOML) and restart"
    )


def _addresses(host: str) -> set[str]:
    """The addresses a listen host names (a name resolves to each of its addresses)."""
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)}
    except OSError:
        return {host}


def _address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
