"""The port scheme: every agent on a VM gets its own pair of metrics ports, 9478/9479, then 9480/9481, and
so on, and its own console port ([web] listen), 9578, then 9579, and so on (docs/web.md, "Its port").

`agentd install` picks the first pair (and the first console port) that no other agent's TOML in
/etc/agentd names and nothing on 127.0.0.1 listens on; `agentd config check` refuses a port another
installed agent's TOML also names.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentd.config.addresses import listen_address, listen_parts
from agentd.config.parsed import read_toml
from agentd.config.settings import MetricsSection, WebSection
from agentd.errors import ConfigError, InputError, Problem

PORT_BASE = 9478
WEB_PORT_BASE = 9578  # the metrics pairs reach it only past fifty agents; both skip what is used
LOOPBACK = "127.0.0.1"
WILDCARDS = frozenset({"0.0.0.0", "::"})  # any address: clashes with every host
LISTENS = ("dispatch_listen", "sensors_listen")


def port_is_free(port: int) -> bool:
    """True if nothing listens on 127.0.0.1:port now. SO_REUSEADDR, as the metrics server sets it, so a
    connection still in TIME_WAIT does not count as a listener."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_pair(
    used: set[int], *, start: int = PORT_BASE, is_free: Callable[[int], bool] = port_is_free
) -> tuple[int, int]:
    """The first (dispatch, sensors) pair start+2k, start+2k+1 that no TOML names and nothing listens on."""
    for port in range(start, 65535, 2):
        pair = (port, port + 1)
        if not used.intersection(pair) and all(map(is_free, pair)):
            return pair
    raise InputError(
        f"no free pair of metrics ports from {start} to 65535 on {LOOPBACK}: free some, then install again"
    )


def free_port(used: set[int], *, start: int = WEB_PORT_BASE, is_free: Callable[[int], bool] = port_is_free) -> int:
    """The first console port from `start` up that no TOML names and nothing listens on."""
    for port in range(start, 65536):
        if port not in used and is_free(port):
            return port
    raise InputError(f"no free console port from {start} to 65535 on {LOOPBACK}: free one, then install again")


def other_agents(config: Path) -> list[Path]:
    """The other agents' TOMLs in the folder the units read theirs from (/etc/agentd/*.toml)."""
    return sorted(p for p in config.parent.glob("*.toml") if p.name != config.name)


def installed_neighbours(config: Path) -> list[Path]:
    """The other installed agents' TOMLs, if `config` is itself one in an etc/agentd folder; none for any
    other config (a checkout's config/ folder holds copies of the example, which never run side by side)."""
    folder = config.resolve().parent
    if (folder.name, folder.parent.name) != ("agentd", "etc"):
        return []
    return other_agents(folder / config.name)


def metrics_of(path: Path) -> MetricsSection:
    """An agent's [metrics] as its services will read them (the defaults where the file says nothing).

    :raises OSError, ValueError: unreadable, not TOML, or a [metrics] that is not valid.
    """
    raw = _section(path, "metrics")
    for key in LISTENS:
        listen_address(str(raw.get(key, getattr(MetricsSection(), key))))  # one clear line, not pydantic's
    return MetricsSection.model_validate(raw)


def _section(path: Path, name: str) -> dict[str, Any]:
    """One table of an agent's TOML ({} where the file has none); ValueError if it is not a table."""
    raw = read_toml(path).get(name, {})  # UnusableFile is a ValueError
    if not isinstance(raw, dict):
        raise ValueError(f"[{name}] is not a table")
    return raw


def web_of(path: Path) -> WebSection:
    """An agent's [web] as its console will read it (the defaults where the file says nothing).

    :raises OSError, ValueError: unreadable, not TOML, or a [web] that is not valid.
    """
    raw = _section(path, "web")
    listen_address(str(raw.get("listen", WebSection().listen)))
    return WebSection.model_validate(raw)


def used_ports(config: Path) -> tuple[set[int], list[str]]:
    """Every port another agent's TOML names (metrics and console, enabled or not: it may be switched on),
    and a warning for each TOML that could not be read, whose ports are then unknown."""
    used: set[int] = set()
    warnings = []
    for path in other_agents(config):
        try:
            metrics, web = metrics_of(path), web_of(path)
        except (OSError, ValueError) as exc:
            warnings.append(f"skipped {path} when picking metrics ports (its ports are unknown): {_one_line(exc)}")
            continue
        used.update(_port(listen) for listen in (*(getattr(metrics, key) for key in LISTENS), web.listen))
    used.discard(0)
    return used, warnings


def refuse_shared_ports(config: Path, metrics: MetricsSection, web: WebSection | None = None) -> None:
    """Refuse an agent whose metrics address another installed agent's TOML also names: the second service to
    start could not listen (installed_neighbours: only those of an etc/agentd folder).

    :raises ConfigError: one problem per clash, naming the other agent's file and the port.
    """
    theirs = {}  # each other agent's TOML read once, whatever the number of our endpoints
    for path in installed_neighbours(config):
        try:
            theirs[path] = _listens_of(path)
        except (OSError, ValueError):
            continue  # that agent's own check reports its file
    ours = enabled_listens(metrics, web)
    problems = [
        Problem(
            str(config),
            key,
            f"{listen} is also {path}'s {their_key}: give each agent its own ports (metrics 9478/9479, "
            "9480/9481, ...; console 9578, 9579, ...)",
        )
        for key, listen in ours.items()
        for path, listens in theirs.items()
        for their_key, other in listens.items()
        if _same_endpoint(listen, other)
    ]
    if problems:
        raise ConfigError(problems)


def enabled_listens(metrics: MetricsSection, web: WebSection | None) -> dict[str, str]:
    """The addresses an agent's enabled endpoints listen on, by key (`metrics.dispatch_listen`, …,
    `web.listen`)."""
    found = {f"metrics.{key}": getattr(metrics, key) for key in LISTENS if metrics.enabled}
    return found | ({"web.listen": web.listen} if web is not None and web.enabled else {})


def _listens_of(path: Path) -> dict[str, str]:
    """The addresses another agent's enabled endpoints listen on, by key."""
    return enabled_listens(metrics_of(path), web_of(path))


def _same_endpoint(one: str, other: str) -> bool:
    (host, port), (other_host, other_port) = listen_parts(one), listen_parts(other)
    if port != other_port or port == 0:
        return False
    return host == other_host or bool(WILDCARDS.intersection((host, other_host)))


def _port(listen: str) -> int:
    return listen_parts(listen)[1]


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
