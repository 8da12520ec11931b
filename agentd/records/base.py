"""The vocabulary every record shares: the Record base, timestamps, ids and status words."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema

from agentd.clock import format_ts, parse_ts


def _to_utc(value: Any) -> Any:
    if isinstance(value, str):
        return parse_ts(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a timestamp needs a time zone; write it in UTC with a trailing Z")
        return value.astimezone(UTC)
    return value


Timestamp = Annotated[
    datetime,
    BeforeValidator(_to_utc),
    PlainSerializer(format_ts, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
Priority = Annotated[int, Field(ge=1, le=10, description="1 is the most urgent, 10 the least")]
Identifier = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")]
JsonObject = dict[str, Any]

Sandbox = Literal["read-only", "workspace-write", "danger-full-access"]
TaskStatus = Literal[
    "pending",
    "running",
    "completed",
    "retryable_failure",
    "permanent_failure",
    "blocked",
    "operator_canceled",
]
TASK_STATUSES: tuple[TaskStatus, ...] = get_args(TaskStatus)
TERMINAL_STATUSES: tuple[TaskStatus, ...] = (
    "completed",
    "permanent_failure",
    "blocked",
    "operator_canceled",
)
OutcomeStatus = Literal["completed", "retryable_failure", "permanent_failure", "blocked", "operator_canceled"]
MachineStatus = Literal["ok", "needs_retry", "blocked", "failed", "canceled"]
ArtifactRole = Literal["plan", "execute-report", "verify-report", "output", "snapshot", "adapter-audit"]


class Record(BaseModel):
    """Common base: unknown fields are refused, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_id: ClassVar[str]
    # Records written by people (config, sensors) export their validation schema; records
    # agentd writes export what it serializes.
    schema_mode: ClassVar[Literal["validation", "serialization"]] = "serialization"
