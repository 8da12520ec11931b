"""The gateway and the network of one running attempt (docs/gateway.md): its token admitted while it runs and
revoked when it ends, its listeners served by the dispatcher (on the host's loopback, or inside the attempt's own
network with the egress proxy beside the gateway), and each connection the proxy made recorded."""

from __future__ import annotations

import contextlib
import logging
import socket
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

import anyio.abc

from agentd.adapters.base import AttemptContext
from agentd.attempt.model_calls import ModelCalls
from agentd.attempt.prepare import Prepared
from agentd.attempt.routing import GATEWAY_PORT, PROXY_PORT, Routed
from agentd.clock import Clock
from agentd.gateway.egress import EgressProxy, EgressRecord, parse_allow_list
from agentd.process.netns import Netns
from agentd.store import AsyncStore, Store

if TYPE_CHECKING:  # the runner imports the gateway's server (and h11) for the first attempt that uses it
    from agentd.gateway.server import Gateway

logger = logging.getLogger(__name__)

MAX_EGRESS_EVENTS = 200  # egress_connection events per attempt; the rest are counted in its diagnostics


class ServedAttempt:
    def __init__(self, gateway: Gateway, prepared: Prepared, calls: ModelCalls, db: AsyncStore, clock: Clock) -> None:
        assert prepared.routed is not None
        self.gateway, self.prepared, self.calls, self.db, self.clock = gateway, prepared, calls, db, clock
        self.routed: Routed = prepared.routed
        self.listeners: list[socket.socket] = [self.routed.listener] if self.routed.listener else []
        self.egress: list[EgressRecord] = []
        self.connections = 0

    def start(self, group: anyio.abc.TaskGroup) -> AttemptContext:
        """Admit the attempt's token and serve its gateway; the context it runs with (with a network of its own,
        the listeners inside it are served as soon as the attempt's process hands them over)."""
        self.gateway.admit(self.routed.access.token, self.routed.route, self.calls)
        for listener in self.listeners:
            group.start_soon(self.gateway.serve, listener)
        if not self.routed.netns:
            return self.prepared.ctx
        proxy = EgressProxy(parse_allow_list(self.routed.egress), self._connected, self.clock)

        def listening(inside: tuple[socket.socket, ...]) -> None:
            self.listeners += inside
            gateway, egress = inside
            group.start_soon(self.gateway.serve, gateway)
            group.start_soon(proxy.serve, egress)

        return replace(self.prepared.ctx, netns=Netns((GATEWAY_PORT, PROXY_PORT), listening))

    async def close(self) -> None:
        """The attempt ended: its token is worthless from now, its listeners closed, its connections said."""
        self.gateway.revoke(self.routed.access.token)
        for listener in self.listeners:
            with contextlib.suppress(OSError):
                listener.close()
        task_id, attempt_id = self.prepared.task.task_id, self.prepared.attempt_id
        for record in self.egress:
            payload = {k: v for k, v in asdict(record).items() if v is not None}
            await self.db.call(Store.record_egress, task_id, attempt_id, payload, self.clock.now())

    def findings(self) -> dict[str, Any]:
        found = self.calls.findings()
        if self.routed.netns:
            found["network"] = "its own: the gateway and the egress proxy its only ways out"
            found["egress_connections"] = self.connections
        return found

    def _connected(self, record: EgressRecord) -> None:
        self.connections += 1
        if len(self.egress) < MAX_EGRESS_EVENTS:
            self.egress.append(record)
