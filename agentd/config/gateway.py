"""[gateway]: the model gateway and the attempt's network (docs/gateway.md), and the provider each adapter's
harness calls (`upstream_of`: what the gateway carries for it). The gateway is on by default,
the advisory mode included: the usage it reads and the budget it holds at each call are worth having there
too. The attempt's own network needs a user of its own ([dispatch] run_as) to mean anything, and follows it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agentd import frozen_value
from agentd.records import AdapterConfig, ClaudeCodeAdapterConfig, CodexAdapterConfig, HermesAgentAdapterConfig

KeyStyle = Literal["x-api-key", "bearer"]
ANTHROPIC = "https://api.anthropic.com"
OPENAI = "https://api.openai.com/v1"


class GatewaySection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    enabled: bool = Field(default=True, description="model calls go through agentd's gateway, which holds the key")
    network: bool | None = Field(
        default=None, description="each attempt in a network of its own, only agentd's ways out (unset: with run_as)"
    )
    upstream_timeout_s: float = Field(default=600.0, gt=0, le=3600, description="one model call's upper bound")

    @model_validator(mode="after")
    def _network_needs_the_gateway(self) -> GatewaySection:
        if self.network and not self.enabled:
            raise ValueError(
                "network = true needs enabled = true: in a network of its own the gateway is the attempt's only way"
                " to its model"
            )
        return self

    def network_on(self, separated: bool) -> bool:
        """Whether each attempt gets a network namespace of its own (`separated`: it runs as its own user)."""
        return self.enabled and (self.network if self.network is not None else separated)


@frozen_value
class Upstream:
    """An adapter's provider: its base URL and the variable of its env_file that holds the key."""

    base_url: str
    key_var: str | None  # None: the provider takes no key (a local model server)
    key_style: KeyStyle
    base_var: str | None = None  # the variable the harness reads the base URL from, if it reads one


def upstream_of(adapter: AdapterConfig, secrets: Mapping[str, str]) -> Upstream | None:
    """The provider `adapter`'s harness calls, with the key variable it uses (`secrets`: its env_file); None for
    a kind whose calls do not leave through a harness of the attempt's (a script, agentd's own ollama client)."""
    if isinstance(adapter, ClaudeCodeAdapterConfig):
        base = (adapter.env or {}).get("ANTHROPIC_BASE_URL") or secrets.get("ANTHROPIC_BASE_URL") or ANTHROPIC
        if "ANTHROPIC_API_KEY" not in secrets and "ANTHROPIC_AUTH_TOKEN" in secrets:
            return Upstream(base, "ANTHROPIC_AUTH_TOKEN", "bearer", "ANTHROPIC_BASE_URL")
        return Upstream(base, "ANTHROPIC_API_KEY", "x-api-key", "ANTHROPIC_BASE_URL")
    if isinstance(adapter, CodexAdapterConfig):
        provider = adapter.provider
        base = provider.base_url if provider and provider.base_url else OPENAI
        return Upstream(base, (provider.env_key if provider else None) or "OPENAI_API_KEY", "bearer")
    if isinstance(adapter, HermesAgentAdapterConfig) and adapter.base_url:
        return Upstream(adapter.base_url, adapter.api_key_env, "bearer")
    return None
