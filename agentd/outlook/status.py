"""The agent's status as an operator reads it (`agentd status`, the service gauges in /metrics): the parts
that read the whole config (the budget's report, the network and governance lines a view of the config
keeps). The snapshot itself is agentd/outlook/snapshot.py's, made from that view without pydantic.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agentd.config import Config
from agentd.config.budget import budget_hold, day_start, unpriced_lines
from agentd.config.gateway import upstream_of
from agentd.config.tool_policy import unenforced_lines
from agentd.outlook.snapshot import (
    VIOLATIONS_SHOWN_FOR as VIOLATIONS_SHOWN_FOR,
)
from agentd.outlook.snapshot import (
    AgentView,
    BudgetOutlook,
    IdleOutlook,
    agent_snapshot,
    budget_report,
    held_call_view,
    idle_outlook,
    read_outlook,
    reset_view,
    violation_view,
)
from agentd.store import Store

__all__ = [
    "BudgetOutlook",
    "IdleOutlook",
    "agent_view",
    "budget_outlook",
    "budget_report",
    "governance",
    "held_call_view",
    "idle_outlook",
    "network_report",
    "read_outlook",
    "reset_view",
    "snapshot",
    "violation_view",
]


def budget_outlook(store: Store, config: Config, now: datetime) -> BudgetOutlook | None:
    """Today's spend against [budget] and what it holds back; None when nothing is capped."""
    if not config.budget.capped:
        return None
    spend = store.spend_since(day_start(now))
    hold = budget_hold(config, spend, now)
    return BudgetOutlook(spend, hold, store.budget_waiting(now, hold) if hold else 0)


def snapshot(config: Config, store: Store, now: datetime) -> dict[str, Any]:
    """`agentd status --json`'s body, for a caller holding the whole config (the API)."""
    return agent_snapshot(agent_view(config), store, now, lambda: config)


def agent_view(config: Config) -> AgentView:
    """What a snapshot says of the agent's config."""
    return AgentView(
        agent_id=config.agent.agent_id,
        database=str(config.db_path),
        state_dir=str(config.paths.state_dir),
        workspace=str(config.paths.workspace),
        run_as=config.dispatch.run_as,
        sensors_run_as=config.sensors.run_as,
        max_pids=config.dispatch.max_pids,
        max_memory_mb=config.dispatch.max_memory_mb,
        budget_capped=config.budget.capped,
        governance=governance(config),
        network=network_report(config),
    )


def network_report(config: Config) -> dict[str, Any]:
    """Where the attempts' model calls go and what network they have, as status says it (docs/gateway.md): the
    gateway (on unless `[gateway] enabled = false`), and a network of the attempt's own, or the host's and why."""
    routed = sorted(i for i, adapter in config.adapters.items() if upstream_of(adapter, {}) is not None)
    separated = config.dispatch.run_as is not None
    own = bool(routed) and config.gateway.network_on(separated)
    found: dict[str, Any] = {"gateway": config.gateway.enabled, "routed": routed, "own_network": own}
    named = f"adapter{'s' if len(routed) > 1 else ''} {', '.join(routed)}"
    if not routed:
        return {**found, "line": "no adapter's model calls leave through a harness: the gateway carries none"}
    if not config.gateway.enabled:
        line = f"{named}: model calls straight to the provider, the key in the attempt's environment"
        return {**found, "line": line + " ([gateway] enabled = false)"}
    line = f"{named}: model calls through agentd's gateway (the attempt holds a token, never the key); "
    if own:
        line += (
            "each attempt in a network of its own: the gateway and its profile's egress.allow hosts its only ways out"
        )
    elif not separated:
        line += "attempts share the host's network: no network of their own in the advisory mode (no [dispatch] run_as)"
    else:
        line += "attempts share the host's network ([gateway] network = false)"
    return {**found, "line": line}


def governance(config: Config) -> list[str]:
    """What holds a running attempt that status must say is missing: adapters a tool policy or a running
    budget cannot reach (docs/policy.md)."""
    return unenforced_lines(config) + unpriced_lines(config)
