"""Token usage read from a model provider's own answer, whole or streamed (docs/gateway.md, "What it reads").

Four APIs: Anthropic Messages, OpenAI Responses, OpenAI Chat Completions and Ollama, each as one JSON body
or as the stream it sends (SSE, or Ollama's NDJSON), fed in whatever pieces the network gives. The numbers
are the provider's, each in the provider's own sense (OpenAI's input counts include the cached tokens,
Anthropic's leave them out, as agentd's adapters read them: docs/adapters.md, "Usage and cost"), judged by
agentd.usage's judge so a poisoned number is unknown, never believed. While a stream runs, the reader keeps
an estimate of the output tokens so far, for a caller that cuts a stream crossing a cap.

Pure: no I/O. A reader never raises on what it is fed, and what it ends with does not depend on how the
bytes were cut into pieces (tests/test_gateway_usage.py proves both for any bytes).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Mapping
from typing import Any, Literal

from agentd import frozen_value
from agentd.usage import Usage, judge_number, judge_usage

Protocol = Literal["anthropic", "responses", "chat", "ollama.generate", "ollama.chat"]
Framing = Literal["sse", "ndjson", "json"]

CHARS_PER_TOKEN = 4  # the estimate's rate while a stream runs; the count at its end is the provider's
MAX_EVENT_BYTES = 16 * 1024 * 1024  # one SSE event, NDJSON line or whole body read for usage; beyond: skipped
MODEL_CHARS = 200  # of the model name an answer gives

# (path suffix, protocol) for a POST: the path as the harness sent it, whatever base the route adds.
_SUFFIXES: tuple[tuple[str, Protocol], ...] = (
    ("/v1/messages", "anthropic"),
    ("/responses", "responses"),
    ("/chat/completions", "chat"),
    ("/api/generate", "ollama.generate"),
    ("/api/chat", "ollama.chat"),
)

# Our names → where each API's usage object holds the number (a path into it).
ANTHROPIC_NAMES = {
    "input_tokens": ("input_tokens",),
    "output_tokens": ("output_tokens",),
    "cache_read_tokens": ("cache_read_input_tokens",),
    "cache_write_tokens": ("cache_creation_input_tokens",),
}
RESPONSES_NAMES = {
    "input_tokens": ("input_tokens",),
    "output_tokens": ("output_tokens",),
    "cache_read_tokens": ("input_tokens_details", "cached_tokens"),
}
CHAT_NAMES = {
    "input_tokens": ("prompt_tokens",),
    "output_tokens": ("completion_tokens",),
    "cache_read_tokens": ("prompt_tokens_details", "cached_tokens"),
}
OLLAMA_NAMES = {"input_tokens": ("prompt_eval_count",), "output_tokens": ("eval_count",)}


@frozen_value
class Metered:
    """What one answer said it used: `usage` judged (a number that is not one is None, `problems` says why),
    `model` as the answer names it, and `reported` whether the answer carried usage at all."""

    usage: Usage
    model: str | None = None
    reported: bool = False
    problems: tuple[str, ...] = ()


def protocol_of(method: str, path: str) -> Protocol | None:
    """The API a request speaks, from its method and path (None: not a model call, or not one we meter)."""
    if method != "POST":
        return None
    bare = path.split("?", 1)[0].rstrip("/")
    return next((protocol for suffix, protocol in _SUFFIXES if bare.endswith(suffix)), None)


def framing_of(protocol: Protocol, content_type: str | None) -> Framing:
    """How the answer's body is cut into objects, from its content type."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media == "text/event-stream":
        return "sse"
    if media in ("application/x-ndjson", "application/ndjson", "application/jsonl"):
        return "ndjson"
    if protocol.startswith("ollama") and media != "application/json":
        return "ndjson"  # Ollama streams by default: NDJSON whatever it calls it
    return "json"


def read_usage(protocol: Protocol, content_type: str | None, body: bytes) -> Metered:
    """One whole answer's usage."""
    reader = UsageReader(protocol, framing_of(protocol, content_type))
    reader.feed(body)
    return reader.finish()


class _Found:
    """The numbers and the model an answer gave so far, as it gave them (judged only at the end)."""

    def __init__(self) -> None:
        self.raw: dict[str, Any] = {}
        self.model: str | None = None
        self.reported = False
        self.chars = 0  # of output text, tool arguments and thinking the stream carried so far

    def take(self, usage: Any, names: Mapping[str, tuple[str, ...]]) -> None:
        """The numbers a usage object holds; a later one replaces an earlier one, kind by kind."""
        if not isinstance(usage, dict):
            return
        self.reported = True
        for ours, path in names.items():
            found, value = _dig(usage, path)
            if found:
                self.raw[ours] = value

    def name(self, model: Any) -> None:
        if isinstance(model, str) and model:
            self.model = model[:MODEL_CHARS]

    def count(self, *texts: Any) -> None:
        self.chars += sum(len(text) for text in texts if isinstance(text, str))


def _dig(value: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return False, None
        value = value[key]
    return True, value


def _field(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


# --- each API: one object of its answer (a stream's event or line, or the whole body) --------------------


def _anthropic_event(found: _Found, event: dict[str, Any]) -> None:
    kind = event.get("type")
    if kind == "message_start":
        message = event.get("message")
        found.name(_field(message, "model"))
        found.take(_field(message, "usage"), ANTHROPIC_NAMES)
    elif kind == "message_delta":
        found.take(event.get("usage"), ANTHROPIC_NAMES)
    elif kind == "content_block_delta":
        delta = event.get("delta")
        found.count(_field(delta, "text"), _field(delta, "partial_json"), _field(delta, "thinking"))
    elif kind == "message":  # the whole answer
        found.name(event.get("model"))
        found.take(event.get("usage"), ANTHROPIC_NAMES)


def _responses_event(found: _Found, event: dict[str, Any]) -> None:
    kind = event.get("type")
    if isinstance(kind, str) and kind.endswith(".delta"):
        found.count(event.get("delta"))
    inner = event.get("response")
    response = inner if isinstance(inner, dict) else event  # a stream's event carries it; a whole answer is it
    found.name(response.get("model"))
    usage = response.get("usage")
    if usage is not None:
        found.take(usage, RESPONSES_NAMES)


def _chat_event(found: _Found, event: dict[str, Any]) -> None:
    found.name(event.get("model"))
    if event.get("usage") is not None:
        found.take(event.get("usage"), CHAT_NAMES)
    choices = event.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        delta = _field(choice, "delta")
        found.count(*(_field(delta, key) for key in ("content", "reasoning", "reasoning_content", "refusal")))
        calls = _field(delta, "tool_calls")
        for call in calls if isinstance(calls, list) else ():
            found.count(_field(_field(call, "function"), "arguments"))


def _ollama_event(found: _Found, event: dict[str, Any]) -> None:
    found.name(event.get("model"))
    message = event.get("message")
    found.count(event.get("response"), event.get("thinking"), _field(message, "content"), _field(message, "thinking"))
    calls = _field(message, "tool_calls")
    if isinstance(calls, list):
        with contextlib.suppress(ValueError, RecursionError):
            found.count(json.dumps(calls))
    if event.get("done") is True or "eval_count" in event or "prompt_eval_count" in event:
        found.take(event, OLLAMA_NAMES)


_READERS: dict[Protocol, Callable[[_Found, dict[str, Any]], None]] = {
    "anthropic": _anthropic_event,
    "responses": _responses_event,
    "chat": _chat_event,
    "ollama.generate": _ollama_event,
    "ollama.chat": _ollama_event,
}


# --- the reader ----------------------------------------------------------------------------------------


class UsageReader:
    """Fed an answer's body as it arrives (`feed`), says the output tokens so far (`output_estimate`) and,
    at the end (`finish`), the usage the answer reported. Memory is bounded: a line, event or whole body
    longer than MAX_EVENT_BYTES is skipped (and said)."""

    def __init__(self, protocol: Protocol, framing: Framing) -> None:
        self.protocol, self.framing = protocol, framing
        self._read = _READERS[protocol]
        self._found = _Found()
        self._pending = bytearray()  # the line (or, for JSON, the body) not yet complete
        self._overlong = False  # the pending line passed MAX_EVENT_BYTES: skipped to its end
        self._data: list[bytes] = []  # the SSE event's data lines so far
        self._data_bytes = 0
        self._skipped = 0  # lines, events or bodies too long to read
        self._unreadable = 0  # objects that are not JSON

    def feed(self, data: bytes) -> None:
        if self.framing == "json":
            if not self._overlong:
                self._pending += data
                if len(self._pending) > MAX_EVENT_BYTES:
                    self._overlong, self._pending = True, bytearray()
            return
        start = 0
        while (end := data.find(b"\n", start)) != -1:
            self._line_part(data[start:end])
            self._line(bytes(self._pending), self._overlong)
            self._pending, self._overlong = bytearray(), False
            start = end + 1
        self._line_part(data[start:])

    @property
    def output_estimate(self) -> int:
        """The output tokens so far: what the stream reported, or more where its text says more."""
        reported, _ = judge_number(self._found.raw.get("output_tokens"), "output_tokens")
        counted = math.ceil(self._found.chars / CHARS_PER_TOKEN)
        return max(reported if isinstance(reported, int) else 0, counted)

    def finish(self) -> Metered:
        """The usage the whole answer reported, judged. The reader is spent."""
        if self.framing == "json":
            if self._overlong:
                self._skipped += 1
            else:
                self._object(bytes(self._pending))
        else:
            if self._pending or self._overlong:
                self._line(bytes(self._pending), self._overlong)
            self._dispatch()
        self._pending = bytearray()
        found = self._found
        usage, problems = judge_usage(found.raw, f"{self.protocol} answer's usage")
        if self._skipped:
            problems.append(f"{self._skipped} part(s) of the answer longer than {MAX_EVENT_BYTES} bytes not read")
        if self._unreadable:
            problems.append(f"{self._unreadable} part(s) of the answer not JSON")
        return Metered(usage, found.model, found.reported, tuple(problems))

    def _line_part(self, part: bytes) -> None:
        if self._overlong or not part:
            return
        self._pending += part
        if len(self._pending) > MAX_EVENT_BYTES:
            self._overlong, self._pending = True, bytearray()

    def _line(self, line: bytes, overlong: bool) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if self.framing == "ndjson":
            if overlong:
                self._skipped += 1
            elif line.strip():
                self._object(line)
            return
        if overlong:  # an SSE line too long to read spoils its event
            self._data, self._data_bytes = [], MAX_EVENT_BYTES + 1
        elif not line:
            self._dispatch()
        elif line.startswith(b"data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)
            self._data_bytes += len(value)
            if self._data_bytes > MAX_EVENT_BYTES:
                self._data = []

    def _dispatch(self) -> None:
        """The SSE event ends (a blank line, or the body's end): its data read as one JSON object."""
        data, size = self._data, self._data_bytes
        self._data, self._data_bytes = [], 0
        if size > MAX_EVENT_BYTES:
            self._skipped += 1
        elif data and data != [b"[DONE]"]:
            self._object(b"\n".join(data))

    def _object(self, text: bytes) -> None:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            self._unreadable += 1
            return
        if isinstance(value, dict):
            self._read(self._found, value)
