"""The tests' name for agentd's fake model server (agentd/services/demomodel, which `agentd demo-model` serves)."""

from agentd.services.demomodel import (
    DEFAULT_CONTEXT_LENGTH,
    NO_TURN_LEFT,
    Fail,
    FakeModelServer,
    Hang,
    RecordedRequest,
    Reply,
    ToolCall,
    Turn,
)

__all__ = [
    "DEFAULT_CONTEXT_LENGTH",
    "NO_TURN_LEFT",
    "Fail",
    "FakeModelServer",
    "Hang",
    "RecordedRequest",
    "Reply",
    "ToolCall",
    "Turn",
]
