"""[gateway]: the model gateway and the attempt's network (docs/gateway.md). Each defaults to on where attempts
run as their own user ([dispatch] run_as), and off in the advisory mode, where the attempt could reach the
dispatcher's key and database anyway."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GatewaySection(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)

    enabled: bool | None = Field(
        default=None, description="model calls go through agentd's gateway, which holds the key (unset: with run_as)"
    )
    network: bool | None = Field(
        default=None, description="each attempt in a network of its own, only agentd's ways out (unset: with run_as)"
    )
    upstream_timeout_s: float = Field(default=600.0, gt=0, le=3600, description="one model call's upper bound")

    def gateway_on(self, separated: bool) -> bool:
        """Whether attempts' model calls go through the gateway (`separated`: they run as their own user)."""
        return self.enabled if self.enabled is not None else separated

    def network_on(self, separated: bool) -> bool:
        """Whether each attempt gets a network namespace of its own."""
        return self.network if self.network is not None else (separated and self.gateway_on(separated))
