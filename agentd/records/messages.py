"""External messages (seed 000 §9): the handlers that deliver them (`[[message_handlers]]`, a union over
three kinds) and a message's delivery as the store keeps it. agentd's own records, not the seed's."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, field_validator

from agentd import frozen_value
from agentd.clock import format_ts
from agentd.edge import quoted
from agentd.records.base import EnvVars, Identifier, Record

DAY_S = 86_400.0
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP token (RFC 9110)
SECRET_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")  # ${NAME}: a value from the handler's env_file
OWN_HEADERS = ("idempotency-key", "content-type", "content-length", "host")  # agentd sets these itself


def http_url(value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http:// or https:// URL with a host, found {quoted(value)}")
    return value


class _Handler(Record):
    handler_id: Identifier = Field(
        description="the handler's id (a message or [dispatch] default_message_handler names it)"
    )
    max_attempts: int = Field(default=5, ge=1, le=100, description="attempts before the message is failed")
    backoff_base_s: float = Field(default=10.0, ge=0, le=DAY_S, description="attempt n+1 waits base * 2^(n-1)")
    backoff_max_s: float = Field(default=3600.0, ge=0, le=30 * DAY_S, description="the longest wait between attempts")


class WebhookHandler(_Handler):
    """POST the message as JSON with `Idempotency-Key: <the outbox row's key>`."""

    schema_id = "agentd/message-handler.webhook/v1"
    schema_mode = "validation"
    kind: Literal["webhook"]
    url: Annotated[str, AfterValidator(http_url)] = Field(description="where messages are POSTed")
    timeout_s: float = Field(default=10.0, gt=0, le=600, description="the whole request, connect to last byte")
    headers: dict[str, str] = Field(
        default_factory=dict, description="sent with every request; ${NAME} is NAME's value in env_file"
    )
    env_file: str | None = Field(default=None, description="KEY=VALUE secrets the headers name as ${KEY}")

    @field_validator("headers")
    @classmethod
    def _headers(cls, headers: dict[str, str]) -> dict[str, str]:
        for name, value in headers.items():
            if not HEADER_NAME.fullmatch(name):
                raise ValueError(f"expected a header name (letters, digits, -), found {quoted(name)}")
            if name.lower() in OWN_HEADERS:
                raise ValueError(f"agentd sets {name} itself; remove it from headers")
            if "\r" in value or "\n" in value:
                raise ValueError(f"the value of header {name} contains a line break")
        return headers

    def secret_names(self) -> list[str]:
        return sorted({name for value in self.headers.values() for name in SECRET_REF.findall(value)})


class SpoolHandler(_Handler):
    """Append one JSON line per message to a file, fsynced."""

    schema_id = "agentd/message-handler.spool/v1"
    schema_mode = "validation"
    kind: Literal["spool"]
    path: str = Field(description="the file messages are appended to", min_length=1)


class CommandHandler(_Handler):
    """Run argv (never a shell) with the message JSON on stdin; exit 0 delivers it."""

    schema_id = "agentd/message-handler.command/v1"
    schema_mode = "validation"
    kind: Literal["command"]
    argv: list[Annotated[str, Field(min_length=1)]] = Field(
        min_length=1, description="the command and its arguments (never a shell)"
    )
    timeout_s: float = Field(description="the command's hard timeout", default=30.0, gt=0, le=DAY_S)
    env_file: str | None = Field(default=None, description="KEY=VALUE lines given to the command")
    env: EnvVars | None = Field(default=None, description="more variables for the command")


MessageHandler = Annotated[WebhookHandler | SpoolHandler | CommandHandler, Field(discriminator="kind")]
DeliveryStatus = Literal["pending", "delivered", "failed"]
# What one attempt came to: delivered; retry later; rejected (the receiver refused it for good).
SendOutcome = Literal["delivered", "retry", "rejected"]


@frozen_value
class Delivery:
    """One message with its handler, as the delivery loop reads it."""

    outbox_id: int
    idempotency_key: str
    task_id: int
    handler_id: str
    message: dict[str, Any]
    status: DeliveryStatus
    attempts: int  # attempts started so far (the one in flight included)
    in_flight: bool
    next_attempt_at: datetime | None
    last_error: str | None


@frozen_value
class Sent:
    """What one attempt at sending came to, as the handler saw it."""

    outcome: SendOutcome
    error: str | None = None
    retry_after_s: float | None = None  # the receiver asked for this pause (HTTP Retry-After: seconds)
    retry_at: datetime | None = None  # or not before this moment (Retry-After: an HTTP-date)
    note: str | None = None  # e.g. "already in the spool": found delivered by an earlier, interrupted attempt


@frozen_value
class DeliveryStep:
    """An attempt's end, decided before it is recorded: delivered, retry at `next_attempt_at`, or failed."""

    status: DeliveryStatus
    error: str | None
    next_attempt_at: datetime | None


@frozen_value
class OutboxItem:
    """An outbox row for `agentd outbox list`: its state folds the delivery's in for a message."""

    outbox_id: int
    kind: str
    idempotency_key: str
    task_id: int
    state: str  # pending, applied, refused, awaiting_handler; a message's delivered, failed
    handler_id: str | None
    attempts: int
    next_attempt_at: datetime | None
    last_error: str | None
    reason: str | None
    created_at: datetime
    settled_at: datetime | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "outbox_id": self.outbox_id,
            "kind": self.kind,
            "key": self.idempotency_key,
            "task_id": self.task_id,
            "state": self.state,
            "handler": self.handler_id,
            "attempts": self.attempts,
            "next_attempt_at": format_ts(self.next_attempt_at) if self.next_attempt_at else None,
            "last_error": self.last_error,
            "reason": self.reason,
            "created_at": format_ts(self.created_at),
            "settled_at": format_ts(self.settled_at) if self.settled_at else None,
        }
