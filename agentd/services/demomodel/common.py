"""The script (turns a test hands out), recorded requests, and wire helpers shared by the encoders."""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from agentd import frozen_value

DEFAULT_CONTEXT_LENGTH = 262144
NO_TURN_LEFT = "no scripted turn left"
SSE = "text/event-stream"
NDJSON = "application/x-ndjson"
HOST = "127.0.0.1"
_JOIN_TIMEOUT_S = 5.0
_POLL_INTERVAL_S = 0.02
_OLLAMA_VERSION = "0.12.6"
_MODIFIED_AT = "2025-01-01T00:00:00Z"


# --------------------------------------------------------------------------------------------
# The script
# --------------------------------------------------------------------------------------------


@frozen_value
class Reply:
    """A normal assistant text answer. The cache counts go where each API reports them (Ollama reports none)."""

    text: str
    input_tokens: int = 11
    output_tokens: int = 7
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@frozen_value
class ToolCall:
    """The model asks for one tool call. The harness's next request, which carries the result, takes the next turn."""

    name: str
    arguments: dict[str, Any]
    text_before: str = ""
    input_tokens: int = 11
    output_tokens: int = 7
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@frozen_value
class Fail:
    """An HTTP error with `status` for `times` consecutive model calls.

    A 429 gets `retry-after: 0`; with `resets_in_s` it says instead, in the three ways providers do, that the
    limit resets that many seconds from now: `retry-after` (whole seconds, rounded up),
    `anthropic-ratelimit-requests-reset` (an RFC 3339 time) and `x-ratelimit-reset-requests` (a duration such
    as `1m30s`)."""

    status: int
    message: str
    times: int = 1
    resets_in_s: float | None = None

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 599:
            raise ValueError(f"Fail.status must be an HTTP error status, got {self.status}")
        if self.times < 1:
            raise ValueError(f"Fail.times must be at least 1, got {self.times}")
        if self.resets_in_s is not None and not 0 <= self.resets_in_s < 86400:
            raise ValueError(f"Fail.resets_in_s must be from 0 to a day, got {self.resets_in_s}")


@frozen_value
class Hang:
    """Never answer, or (after_headers) send the headers and the protocol's first event, then stall until stop()."""

    after_headers: bool = False


Turn = Reply | ToolCall | Fail | Hang
_Answer = Reply | ToolCall


@frozen_value
class RecordedRequest:
    """One request as the server saw it: `path` without its query string (that is `query`), header names lower-cased.

    `body` is the parsed JSON, None when the body is empty, or the decoded text when it is not JSON.
    `turn` is the turn this request consumed (None for probes, and for a model call with no turn left).
    """

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    protocol: str
    query: str = ""
    turn: Turn | None = None


@dataclass
class _Scripted:
    turn: Turn
    remaining: int


def _answer_parts(turn: _Answer) -> tuple[str, ToolCall | None]:
    """The text to say and the tool call to make (if any)."""
    if isinstance(turn, ToolCall):
        return turn.text_before, turn
    return turn.text, None


_WORD_BOUNDARY = re.compile(r"(?<=\s)(?=\S)")


def _chunks(text: str, words: int) -> list[str]:
    """Split text into deltas of `words` words each, keeping the whitespace, so that joining them gives back `text`."""
    pieces = [piece for piece in _WORD_BOUNDARY.split(text) if piece]
    return ["".join(pieces[start : start + words]) for start in range(0, len(pieces), words)]


def _hex_id() -> str:
    return uuid.uuid4().hex[:24]


@frozen_value
class _Call:
    """One model call being answered: the request's model, the body, and ids that stay the same across its events."""

    model: str
    body: dict[str, Any]
    chunk_size: int
    stream: bool
    tag: str = field(default_factory=_hex_id)
    tool_tag: str = field(default_factory=_hex_id)
    created: int = field(default_factory=lambda: int(time.time()))

    def chunks(self, text: str) -> list[str]:
        return _chunks(text, self.chunk_size)


# --------------------------------------------------------------------------------------------
# Wire helpers
# --------------------------------------------------------------------------------------------


def _json_bytes(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def _sse_data(payload: Any) -> bytes:
    return b"data: " + _json_bytes(payload) + b"\n\n"


def _sse(event: str, payload: Any) -> bytes:
    return f"event: {event}\n".encode() + _sse_data(payload)


def _ndjson(payload: Any) -> bytes:
    return _json_bytes(payload) + b"\n"


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _go_duration(seconds: float) -> str:
    """Seconds as OpenAI's `x-ratelimit-reset-*` headers write them (Go's time.Duration: `1m30s`, `0.5s`, `2h0m0s`)."""
    hours, rest = divmod(seconds, 3600)
    minutes, rest = divmod(rest, 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{int(hours)}h{int(minutes)}m{text}"
    return f"{int(minutes)}m{text}" if minutes else text


def _reset_headers(fail: Fail | None) -> list[tuple[str, str]]:
    """What a 429 says of when to come back (nothing but `retry-after: 0` unless the Fail says when)."""
    if fail is None or fail.resets_in_s is None:
        return [("retry-after", "0")]
    seconds = fail.resets_in_s
    at = datetime.now(UTC) + timedelta(seconds=seconds)
    return [
        ("retry-after", str(math.ceil(seconds))),
        ("anthropic-ratelimit-requests-reset", at.isoformat(timespec="seconds").replace("+00:00", "Z")),
        ("x-ratelimit-reset-requests", _go_duration(seconds)),
    ]


def _openai_error(status: int, message: str) -> dict[str, Any]:
    if status == 429:
        kind, code = "requests", "rate_limit_exceeded"
    elif status >= 500:
        kind, code = "server_error", "server_error"
    else:
        kind, code = "invalid_request_error", None
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


# --------------------------------------------------------------------------------------------
# Encoders: one per protocol
# --------------------------------------------------------------------------------------------
