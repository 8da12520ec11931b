"""The vocabulary every record shares: the Record base, timestamps, ids and status words."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, WithJsonSchema

from agentd.clock import format_ts, parse_ts, to_utc
from agentd.edge import check_value
from agentd.vocabulary import TASK_STATUSES as TASK_STATUSES  # the status words live below the records
from agentd.vocabulary import TERMINAL_STATUSES as TERMINAL_STATUSES
from agentd.vocabulary import MachineStatus as MachineStatus
from agentd.vocabulary import OutcomeStatus as OutcomeStatus
from agentd.vocabulary import TaskStatus as TaskStatus


def _to_utc(value: Any) -> Any:
    if isinstance(value, str):
        return parse_ts(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("a timestamp needs a time zone; write it in UTC with a trailing Z")
        return to_utc(value)
    return value


Timestamp = Annotated[
    datetime,
    BeforeValidator(_to_utc),
    PlainSerializer(format_ts, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
Priority = Annotated[int, Field(ge=1, le=10, description="1 is the most urgent, 10 the least")]
Identifier = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")]


def _storable(value: dict[str, Any]) -> dict[str, Any]:
    check_value(value, "value")  # NaN, lone surrogates, depth, int64: refused at the record's edge
    return value


JsonObject = Annotated[dict[str, Any], AfterValidator(_storable)]

Sandbox = Literal["read-only", "workspace-write", "danger-full-access"]
ArtifactRole = Literal["plan", "execute-report", "verify-report", "output", "snapshot", "adapter-audit"]


class Record(BaseModel):
    """Common base: unknown fields are refused, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)
    schema_id: ClassVar[str]
    # Records written by people (config, sensors) export their validation schema; records
    # agentd writes export what it serializes.
    schema_mode: ClassVar[Literal["validation", "serialization"]] = "serialization"
