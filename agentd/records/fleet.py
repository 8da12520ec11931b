"""A fleet task's origin (docs/fleet.md): who submitted it and seed 003 §7's dispatch context."""

from __future__ import annotations

from pydantic import Field

from agentd.records.base import Record
from agentd.vocabulary import DispatchMode, OriginSurface


class DispatchContext(Record):
    """Seed 003 §7's AgentDispatchContext, in its field names: where the execution originated. agentd
    adds the surface `cli` (`agentd fleet submit` typed by a person)."""

    schema_id = "agent-runtime/dispatch.context/v1"
    originSurface: OriginSurface
    originProductId: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")
    dispatchMode: DispatchMode
    initiatedAt: str = Field(min_length=1, max_length=64, pattern=r"^[0-9T:.+\-Z]+$")


class FleetOrigin(Record):
    """Stored with the fleet's row and with the local task that runs it. Whatever a fleet row holds is
    judged again at intake (anyone with the DSN can write one), so a local record never holds what this
    model would refuse."""

    schema_id = "agent-runtime/fleet.origin/v1"
    submitted_by: str = Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")
    dispatch_context: DispatchContext
