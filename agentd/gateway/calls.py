"""The values a gateway's caller sees (docs/gateway.md): where an attempt's calls go (`Route`), one call as
it was asked (`CallRequest`), what the caller's hooks answer before it is forwarded (`Verdict`), and what
is recorded of it afterwards (`CallRecord`, its two bodies each a `Body`). `Hooks` is what the caller
implements; `Keeper` hashes a body and keeps a bounded, redacted copy of it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import field
from datetime import datetime
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

from agentd import frozen_value
from agentd.edge import Refused, one_of_each
from agentd.gateway.usage import Metered
from agentd.gateway.usage import Protocol as Api
from agentd.redaction import MARK, Redactor
from agentd.usage import judge_number

KeyStyle = Literal["x-api-key", "bearer", "none"]
KEY_STYLES: tuple[KeyStyle, ...] = ("x-api-key", "bearer", "none")
KEEP_BYTES = 16 * 1024 * 1024  # of each body kept for the record; beyond it the body is hashed but cut
MODEL_CHARS = 200
_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")  # what a key may hold to go in a header unchanged


@frozen_value
class Route:
    """Where one attempt's model calls go: `upstream` is an origin with an optional base path
    (`https://api.anthropic.com`, `http://127.0.0.1:11434`, `https://openrouter.ai/api`), the request's own
    path appended to it. `key` goes as `key_style` says (`x-api-key: KEY`, `authorization: Bearer KEY`, or
    nothing, for an Ollama) and is never shown, logged or recorded; `redactor` is applied to the bodies kept."""

    upstream: str
    key_style: KeyStyle
    key: str = field(repr=False)
    redactor: Redactor = field(default_factory=Redactor, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
            raise ValueError(f"a route's upstream is http(s)://host[:port][/base], found {self.upstream[:200]!r}")
        if self.key_style not in KEY_STYLES:
            raise ValueError(f"a route's key_style is one of {', '.join(KEY_STYLES)}, found {self.key_style!r}")
        if self.key_style != "none" and not _HEADER_SAFE.fullmatch(self.key):
            raise ValueError("a route's key must be printable ASCII without spaces (it goes in a header)")
        object.__setattr__(self, "upstream", self.upstream.rstrip("/"))


@frozen_value
class CallRequest:
    """One call as the harness asked it, read before it is forwarded. `path` is as asked (query included),
    less the gateway's `/t/TOKEN` prefix; `api` is the model API it speaks (None: not a model call we meter,
    such as `GET /v1/models`); `model` and `max_output_tokens` as its JSON body names them (`max_tokens`,
    `max_output_tokens`, `max_completion_tokens`, or Ollama's `options.num_predict`); `usage_expected` is
    whether its answer will carry usage (not so for a Chat Completions stream that did not ask for it)."""

    call_id: str
    api: Api | None
    method: str
    path: str
    model: str | None
    max_output_tokens: int | None
    stream: bool
    usage_expected: bool
    body_bytes: int


@frozen_value
class Verdict:
    """The caller's answer before a call is forwarded: go on (`status` None), or answer the harness now
    with `status` and the JSON `body` (and `headers`, such as `retry-after`), the upstream never asked."""

    status: int | None = None
    body: Mapping[str, Any] | None = None
    headers: tuple[tuple[str, str], ...] = ()

    @property
    def forwards(self) -> bool:
        return self.status is None


GO = Verdict()


def refusal(status: int, message: str, kind: str = "request_refused", **more: str) -> Verdict:
    """An answer in the shape both Anthropic's and OpenAI's clients read (`error.type`, `error.message`)."""
    return Verdict(status, error_body(kind, message), tuple(more.items()))


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "code": kind, "message": message}}


@frozen_value
class Body:
    """One body of a call: the sha256 and size of its exact bytes, and `kept`, those bytes redacted by the
    route's Redactor, at most KEEP_BYTES of them (`whole`: nothing was cut)."""

    sha256: str
    size: int
    kept: bytes = field(repr=False)
    whole: bool


EMPTY_BODY = Body(hashlib.sha256(b"").hexdigest(), 0, b"", True)


@frozen_value
class CallRecord:
    """What happened to one call. `status` is the answer the harness got (the upstream's, or the gateway's
    own: a refusal, a 502), None when none was sent (the harness went away first); `forwarded` whether the
    upstream was asked; `metered` the usage the upstream's answer reported; `reset_at` when a limit the
    answer says was reached resets; `cut` that the gateway ended the answer early (a hook said so, or the
    token was revoked); `error` what failed (the upstream, the harness's connection), None when nothing did.
    Times are from the whole request read: `first_byte_ms` to the answer's first body byte forwarded."""

    call: CallRequest
    status: int | None
    forwarded: bool
    started_at: datetime
    latency_ms: float
    first_byte_ms: float | None
    metered: Metered
    reset_at: datetime | None
    request: Body
    response: Body
    cut: bool
    error: str | None


class Hooks(Protocol):
    """What the gateway's caller does around each call of the token it admitted with these hooks."""

    async def before(self, call: CallRequest) -> Verdict:
        """Before the call is forwarded: GO, or the answer to give instead (a budget's refusal). It may take
        as long as it needs (a person deciding); a hook that raises refuses the call (503)."""
        ...

    def on_progress(self, call: CallRequest, output_tokens: int) -> bool:
        """While an answer streams, each time its output estimate grows: False cuts it now."""
        ...

    async def after(self, record: CallRecord) -> None:
        """Once the call is over, whatever became of it."""
        ...


class Keeper:
    """A body as it passes: its sha256 and size over every byte, a copy of its first KEEP_BYTES."""

    def __init__(self, limit: int = KEEP_BYTES) -> None:
        self._digest = hashlib.sha256()
        self._limit = limit
        self._kept = bytearray()
        self.size = 0

    def update(self, data: bytes) -> None:
        self._digest.update(data)
        self.size += len(data)
        if len(self._kept) < self._limit + 4096:  # a little beyond: a secret across the cut is still found
            self._kept += data[: self._limit + 4096 - len(self._kept)]

    def head(self) -> bytes:
        """What is kept so far, unredacted: for reading an error's kind, never for storing."""
        return bytes(self._kept[: self._limit])

    def body(self, redactor: Redactor, key: str) -> Body:
        kept = redactor.raw(bytes(self._kept)) if redactor else bytes(self._kept)
        if len(key) >= 6:
            kept = kept.replace(key.encode(), MARK.encode())
        whole = self.size <= self._limit
        return Body(self._digest.hexdigest(), self.size, kept if whole else kept[: self._limit], whole)


def call_request(call_id: str, api: Api | None, method: str, path: str, body: bytes) -> CallRequest:
    """The call as its JSON body describes it (a body that is not a JSON object describes nothing).

    :raises AmbiguousBody: the body writes a key twice."""
    asked = _json_object(body) if api is not None else {}
    model = asked.get("model")
    options = asked.get("options")
    limits = [asked.get(name) for name in ("max_tokens", "max_output_tokens", "max_completion_tokens")]
    limits.append(options.get("num_predict") if isinstance(options, dict) else None)
    max_output = next((n for v in limits if isinstance(n := judge_number(v, "output_tokens")[0], int)), None)
    default_stream = api is not None and api.startswith("ollama")
    stream = asked.get("stream") is True or (default_stream and "stream" not in asked)
    stream_options = asked.get("stream_options")
    asked_usage = isinstance(stream_options, dict) and stream_options.get("include_usage") is True
    return CallRequest(
        call_id=call_id,
        api=api,
        method=method,
        path=path,
        model=model[:MODEL_CHARS] if isinstance(model, str) else None,
        max_output_tokens=max_output,
        stream=stream,
        usage_expected=api is not None and (api != "chat" or not stream or asked_usage),
        body_bytes=len(body),
    )


class AmbiguousBody(ValueError):
    """A request whose JSON writes a key twice: what the gateway read of it (its model, its limit) and what
    the upstream acts on could differ, so it is refused, never forwarded (the message says which key)."""


def _json_object(body: bytes) -> dict[str, Any]:
    if not body.lstrip().startswith(b"{"):
        return {}
    try:
        value = json.loads(body, object_pairs_hook=one_of_each)
    except Refused as exc:
        raise AmbiguousBody(f"the request's JSON is ambiguous: {exc}") from None
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}
