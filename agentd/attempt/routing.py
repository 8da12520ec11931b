"""An attempt's model calls routed through agentd's gateway, and its network (docs/gateway.md): decided when the
attempt is prepared, served while it runs.

Under the gateway the attempt's environment holds a token where the provider's key was and the gateway's address
where the provider's was (agentd/adapters/routes.py); the key goes into the dispatcher's `Route` alone. With a
network of its own (agentd/process/netns.py) the attempt reaches the gateway and the egress proxy at fixed ports
of that network, which nothing else is in; without one, on a loopback port of the host's picked for it.
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Mapping
from dataclasses import field

from agentd import frozen_value
from agentd.adapters.base import GatewayAccess
from agentd.adapters.routes import attempt_environment, origin_of
from agentd.config import Config
from agentd.config.gateway import upstream_of
from agentd.gateway.calls import Route
from agentd.records import AdapterConfig, SubagentProfile
from agentd.redaction import Redactor

GATEWAY_PORT = 4100  # inside the attempt's own network: nothing else is there to take it
PROXY_PORT = 4101
LOOPBACK = "127.0.0.1"


@frozen_value
class Routed:
    """What the attempt is given of the gateway (`access`, in its context), what the dispatcher keeps (`route`,
    with the key), and where it is served: `listener` on the host's loopback, or (`netns`) inside the attempt's
    own network, whose only other way out is the egress proxy for the hosts of `egress`."""

    access: GatewayAccess
    route: Route = field(repr=False)
    netns: bool
    egress: tuple[str, ...] = ()
    listener: socket.socket | None = field(default=None, repr=False, compare=False)


def route_attempt(
    config: Config,
    adapter: AdapterConfig,
    profile: SubagentProfile,
    secrets_given: Mapping[str, str],
    redactor: Redactor,
    *,
    separated: bool,
) -> Routed | None:
    """The attempt's route through the gateway, or None: the gateway is off ([gateway] enabled), or its adapter's
    calls do not leave through a harness of the attempt's."""
    upstream = upstream_of(adapter, secrets_given) if config.gateway.enabled else None
    if upstream is None:
        return None
    key = secrets_given.get(upstream.key_var, "") if upstream.key_var else ""
    route = Route(origin_of(upstream.base_url), upstream.key_style if key else "none", key, redactor)
    token = "agentd-" + secrets.token_urlsafe(32)
    if config.gateway.network_on(separated):
        access = GatewayAccess(f"http://{LOOPBACK}:{GATEWAY_PORT}", token)
        return Routed(access, route, netns=True, egress=tuple(profile.egress.allow))
    listener = loopback_listener()
    access = GatewayAccess(f"http://{LOOPBACK}:{listener.getsockname()[1]}", token)
    return Routed(access, route, netns=False, listener=listener)


def routed_environment(env: Mapping[str, str], adapter: AdapterConfig, routed: Routed) -> dict[str, str]:
    """The attempt's environment under the gateway: the token where the key was, the gateway where the provider
    was; with a network of its own, the egress proxy as HTTPS_PROXY (never for the gateway: NO_PROXY)."""
    upstream = upstream_of(adapter, env)
    assert upstream is not None
    given = attempt_environment(env, upstream, routed.access.origin, routed.access.token)
    if routed.netns:
        proxy = f"http://{LOOPBACK}:{PROXY_PORT}"
        given.update(
            HTTPS_PROXY=proxy, https_proxy=proxy, NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost"
        )
        for plain in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            given.pop(plain, None)
    return given


def loopback_listener() -> socket.socket:
    """A listening socket on the host's loopback, on a port the kernel picks: the gateway for an attempt that
    shares the host's network (its token is all that keeps others out)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        listener.bind((LOOPBACK, 0))
        listener.listen(64)
    except BaseException:
        listener.close()
        raise
    return listener
