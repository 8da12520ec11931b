"""The vocabulary every record shares: the Record base, timestamps, ids and status words."""

from __future__ import annotations

import shlex
from datetime import UTC, date, datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    Strict,
    WithJsonSchema,
)

from agentd.clock import format_ts, parse_ts, to_utc
from agentd.edge import check_value, quoted
from agentd.vocabulary import TASK_STATUSES as TASK_STATUSES  # the status words live below the records
from agentd.vocabulary import TERMINAL_STATUSES as TERMINAL_STATUSES
from agentd.vocabulary import MachineStatus as MachineStatus
from agentd.vocabulary import OutcomeStatus as OutcomeStatus
from agentd.vocabulary import TaskStatus as TaskStatus


def _to_utc(value: Any) -> Any:
    if isinstance(value, str):
        return parse_ts(value)
    if isinstance(value, datetime):
        return _aware(value)
    if isinstance(value, date):  # e.g. TOML's `revised_at = 2026-01-01`, which pydantic would make a naive midnight
        raise ValueError(f"a timestamp needs a time and a time zone, found the date {value}; write {value}T00:00:00Z")
    # A number would be seconds since 1970 to pydantic (0 is 1970-01-01): the schema says text.
    raise ValueError(f"expected a time as text like 2026-11-22T10:00:00Z, found {_json_kind(value)}")


def _aware(value: datetime) -> datetime:
    """Whatever pydantic made of the input (a number is seconds since the epoch, in UTC), a Timestamp is
    never naive: a naive time compared with an aware one raises, far from where it came in."""
    if value.tzinfo is None:
        raise ValueError(f"a timestamp needs a time zone, found {value.isoformat()}; write it in UTC with a trailing Z")
    return value if value.tzinfo is UTC else to_utc(value)


Timestamp = Annotated[
    datetime,
    BeforeValidator(_to_utc),
    AfterValidator(_aware),
    PlainSerializer(format_ts, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


def _json_number(value: Any) -> Any:
    """A number field of a record people or agents send as JSON takes a JSON number, as the schema agentd
    publishes says: pydantic alone would take true as 1 and the text "1_0" as 10 (docs/decisions.md,
    Numbers). A float goes on to the field's own check (3.0 is the integer 3, as in JSON Schema)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a JSON number, found {_json_kind(value)}")
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"the text {quoted(value, 40)}"
    if isinstance(value, int | float):
        return f"the number {quoted(value, 40)}"
    return {dict: "an object", list: "an array", type(None): "null"}.get(type(value), type(value).__name__)


# The number and boolean fields of what comes in as JSON (task intents, sensor events, outcomes, schedules).
JsonInt = Annotated[int, BeforeValidator(_json_number)]
JsonFloat = Annotated[float, BeforeValidator(_json_number)]
JsonBool = Annotated[bool, Strict()]  # true or false: not 1, "yes" or "off"
Priority = Annotated[  # the bounds on the int itself (not on JsonInt), so the schema says minimum and maximum
    int, Field(ge=1, le=10, description="1 is the most urgent, 10 the least"), BeforeValidator(_json_number)
]


def command_argv(command: list[str] | str) -> list[str]:
    """A configured command's argv: a list as it is, a string split as a shell would split it (it is
    never run by one). ValueError if there is no argv to run: nothing, or a quote left open."""
    try:
        argv = list(command) if isinstance(command, list) else shlex.split(command)
    except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
        raise ValueError(f"cannot split {quoted(command)} into an argv: {str(exc).lower()}") from None
    if not argv or not argv[0]:
        raise ValueError(f"expected an argv, found {quoted(command)}")
    return argv


def _runnable(command: list[str] | str) -> list[str] | str:
    command_argv(command)
    return command


Command = Annotated[list[str] | str, AfterValidator(_runnable)]  # an argv, or a string split into one


def _settable(variables: dict[str, str]) -> dict[str, str]:
    for name in variables:
        if not name or "=" in name or "\x00" in name:
            raise ValueError(f"expected variable names without '=' or NUL, found {quoted(name)}")
    return variables


# Variables a child process is given: each name one exec can set (not empty, no '=' or NUL).
EnvVars = Annotated[dict[str, str], AfterValidator(_settable)]
IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
IDENTIFIER_MAX = 128
IDENTIFIER_WORDS = "letters, digits and . _ : - (starting with a letter or digit)"
Identifier = Annotated[str, Field(min_length=1, max_length=IDENTIFIER_MAX, pattern=IDENTIFIER_PATTERN)]


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
