"""The ports a service process listens on, bound before any service starts its work (docs/configuration.md,
`[metrics]`): a port in use is one line naming the setting to change, exit 2, and nothing half-started (no
boot sweep, no sensor run, no console without its dispatcher).

`free=True` (`agentd run --free-ports`, what `make run` runs) moves a port in use to one the OS picks on the
same host instead, and says so: a demo starts beside whatever else the machine runs.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Iterator

from agentd import frozen_value
from agentd.config import Config
from agentd.config.addresses import exposure_problem, listen_parts
from agentd.errors import InputError
from agentd.process.activation import passed_socket


@frozen_value
class Port:
    """One listening port of the process: the setting that names it and what it serves."""

    key: str  # "dispatch", "sensors" or "web": what the service asks for
    setting: str  # the TOML's words, "[metrics] dispatch_listen"
    env: str  # the variable that overrides it, AGENTD_METRICS__DISPATCH_LISTEN
    what: str  # "the dispatcher's /metrics"
    listen: str


@frozen_value
class Held:
    """A port bound for a service, and the address it was configured with (`moved`: it was in use)."""

    port: Port
    sock: socket.socket
    moved: bool = False

    @property
    def address(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class PortInUse(InputError):
    """A configured port something else listens on."""


def ports_of(config: Config, services: tuple[str, ...]) -> list[Port]:
    """The ports `services` ("dispatch", "sensors", "web") listen on under this config: a metrics port
    only while [metrics] enabled, the console's only while [web] enabled."""
    metrics = config.metrics
    found = []
    if metrics.enabled:
        for name, listen, what in (
            ("dispatch", metrics.dispatch_listen, "the dispatcher's /metrics"),
            ("sensors", metrics.sensors_listen, "the sensor service's /metrics"),
        ):
            if name in services:
                found.append(
                    Port(name, f"[metrics] {name}_listen", f"AGENTD_METRICS__{name.upper()}_LISTEN", what, listen)
                )
    if "web" in services and config.web.enabled:
        if (problem := exposure_problem(config.web.listen, config.web.beyond_loopback)) is not None:
            raise InputError(f"web.listen: {problem}")  # refused before anything is bound (docs/web.md)
        found.append(Port("web", "[web] listen", "AGENTD_WEB__LISTEN", "the console", config.web.listen))
    return found


def hold_ports(ports: list[Port], config_path: str, *, free: bool = False, offer_free: bool = False) -> dict[str, Held]:
    """Bind each port (the socket systemd passed for it, if it did), all or none.

    :raises PortInUse: one is in use (and not `free`): the message names the port, the setting and how to
        change it, on one line.
    :raises InputError: an address that cannot be bound at all (not on this machine, say).
    """
    held: dict[str, Held] = {}
    with _closed_on_error(held):
        for port in ports:
            held[port.key] = _hold(port, config_path, free, offer_free)
    return held


def _hold(port: Port, config_path: str, free: bool, offer_free: bool) -> Held:
    if (passed := passed_socket(port.listen, port.setting)) is not None:
        return Held(port, passed)
    host, number = listen_parts(port.listen)
    try:
        return Held(port, bound(host, number))
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise InputError(f"{port.setting}: cannot listen on {port.listen} ({exc.strerror or exc})") from None
        if not free:
            raise PortInUse(in_use(port, config_path, offer_free)) from None
    return Held(port, bound(host, 0), moved=True)


def in_use(port: Port, config_path: str, offer_free: bool = False) -> str:
    """The one line a port in use is: which port, whose, the setting and how to change it (`offer_free`:
    and `agentd run --free-ports`, for the command that has it)."""
    host, number = listen_parts(port.listen)
    free = ", or `agentd run --free-ports` (moves each port in use)" if offer_free else ""
    return (
        f"port {number} is in use ({port.listen}, {port.what}): set {port.setting} to a free port in {config_path}, "
        f'or start with {port.env}="{_bracketed(host)}:0" (any free port){free}'
    )


def bound(host: str, number: int) -> socket.socket:
    """A listening TCP socket on host:number (0: one the OS picks), closed again if it cannot listen."""
    family, kind, proto, _, address = socket.getaddrinfo(host, number, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port of our own in TIME_WAIT is free
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@contextlib.contextmanager
def _closed_on_error(held: dict[str, Held]) -> Iterator[None]:
    try:
        yield
    except BaseException:
        for each in held.values():
            each.sock.close()
        raise
