"""Runtime events (seed 000 §14 names, seed 002 envelope), chained by hash (docs/design.md, "Events")."""

from __future__ import annotations

from typing import Literal

from agentd.records.base import JsonObject, Record, Timestamp
from agentd.records.event_names import AGENTD_EVENT_TYPES as AGENTD_EVENT_TYPES
from agentd.records.event_names import EVENT_TYPES as EVENT_TYPES
from agentd.records.event_names import LIVE_EVENT_TYPES as LIVE_EVENT_TYPES
from agentd.records.event_names import SEED_EVENT_TYPES as SEED_EVENT_TYPES


class RuntimeEvent(Record):
    """seed 000 §14 names in the seed 002 envelope, chained by hash (docs/design.md, "Events")."""

    schema_id = "agent-runtime/runtime.event/v1"
    event_id: str
    type: Literal[EVENT_TYPES]  # type: ignore[valid-type]
    timestamp: Timestamp
    sequence: int
    schema_version: int
    task_id: int | None
    attempt_id: str | None
    workflow_id: int | None
    schedule_id: str | None
    sensor_id: str | None
    payload: JsonObject
    refs: JsonObject
    prev_hash: str
    hash: str
