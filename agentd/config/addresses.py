"""Network addresses in the config: HOST:PORT for a service to listen on, DNS names the console answers
to, and what each means (loopback or not, an IP or a name). The sections in agentd/config/settings.py
check their values with these; the console, the metrics, activation and install read them back."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated

from pydantic import AfterValidator

from agentd.edge import quoted, whole_number


def listen_address(value: str) -> str:
    """HOST:PORT for a metrics endpoint: an IPv4 address, [IPv6] or a host name, and a port 0-65535
    (0: the OS picks one; for tests and one-off runs)."""
    host, sep, port = value.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    bare = host[1:-1] if bracketed else host
    if ":" in bare and not bracketed:
        raise ValueError(f"expected an IPv6 address in brackets (e.g. [::1]:9478), found {quoted(value)}")
    number = whole_number(port)
    if not sep or number is None or number > 65535:
        raise ValueError(f"expected HOST:PORT with a port from 0 to 65535 (e.g. 127.0.0.1:9478), found {quoted(value)}")
    try:
        ipaddress.ip_address(bare)
    except ValueError:
        if ":" in bare or not HOST_NAME.fullmatch(bare):
            raise ValueError(
                f"expected an IP address, [IPv6] or a host name before the port, found {quoted(host)}"
            ) from None
    return value


ListenAddress = Annotated[str, AfterValidator(listen_address)]


def host_name(value: str) -> str:
    """A DNS name the console answers to (`[web] host_names`), in lower case, without a trailing dot."""
    name = value[:-1] if value.endswith(".") else value  # the root's dot: the same name
    if not HOST_NAME.fullmatch(name) or name.replace(".", "").isdigit():  # an IP address is answered anyway
        raise ValueError(f"expected a DNS name like console.example.org (no port, no scheme), found {quoted(value)}")
    return name.lower()  # after the check: str.lower() makes ASCII of some other letters (K, the Kelvin sign)


HostName = Annotated[str, AfterValidator(host_name)]


def listen_parts(listen: str) -> tuple[str, int]:
    """A valid HOST:PORT (listen_address) as its host, without an IPv6 address's brackets, and its port."""
    host, _, port = listen.rpartition(":")
    return host.strip("[]"), int(port)


def ip_of(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address `host` is, or None for a name."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def is_loopback(listen: str) -> bool:
    """HOST:PORT (a valid listen_address) names this host only: 127.0.0.0/8, ::1 (mapped too), localhost."""
    host = listen_parts(listen)[0]
    if host.lower() == "localhost":
        return True
    address = ip_of(host)
    if address is None:
        return False  # another name: where it resolves is not this check's to trust
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return (mapped or address).is_loopback


def exposure_problem(listen: str, beyond_loopback: bool) -> str | None:
    """Why the console may not listen on `listen` (docs/web.md, "Its port"), or None: beyond loopback its
    bearer tokens and session cookies cross the network in clear, unless the operator says a TLS proxy
    in front is why (`[web] beyond_loopback = true`)."""
    if beyond_loopback or is_loopback(listen):
        return None
    return (
        f"{listen} is not a loopback address: tokens and session cookies would cross the network in clear. "
        "Listen on 127.0.0.1 and put a TLS proxy or an SSH tunnel in front (docs/web.md), or set "
        "[web] beyond_loopback = true if a TLS proxy elsewhere is in front already"
    )


HOST_NAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)
