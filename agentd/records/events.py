"""Runtime events (seed 000 §14 names, seed 002 envelope), chained by hash (docs/design.md, "Events"): the
names here, the record agentd/records/stored.py's `RuntimeEvent`."""

from __future__ import annotations

from agentd.records.event_names import AGENTD_EVENT_TYPES as AGENTD_EVENT_TYPES
from agentd.records.event_names import EVENT_TYPES as EVENT_TYPES
from agentd.records.event_names import LIVE_EVENT_TYPES as LIVE_EVENT_TYPES
from agentd.records.event_names import SEED_EVENT_TYPES as SEED_EVENT_TYPES
from agentd.records.stored import RuntimeEvent as RuntimeEvent
