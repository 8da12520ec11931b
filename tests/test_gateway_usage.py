"""The gateway reads usage from the provider's own answer (agentd/gateway/usage.py): for each API, whole and
streamed, exactly what the loopback fake model (tests/fakemodel/encoders.py) sends; any bytes in any pieces
never raise; an answer cut into pieces reads as it reads whole; poisoned numbers are unknown, never believed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fakemodel import Reply, ToolCall
from hypothesis import given, settings
from hypothesis import strategies as st
from support import examples

from agentd.gateway.usage import (
    CHARS_PER_TOKEN,
    MAX_EVENT_BYTES,
    Metered,
    Protocol,
    UsageReader,
    framing_of,
    protocol_of,
    read_usage,
)
from agentd.services.demomodel.common import _Answer, _Call
from agentd.services.demomodel.encoders import (
    _Anthropic,
    _ChatCompletions,
    _Encoder,
    _OllamaChat,
    _OllamaGenerate,
    _Responses,
)
from agentd.usage import Usage

ENCODERS: dict[Protocol, _Encoder] = {
    "anthropic": _Anthropic(),
    "responses": _Responses(),
    "chat": _ChatCompletions(),
    "ollama.generate": _OllamaGenerate(),
    "ollama.chat": _OllamaChat(),
}
PROTOCOLS: list[Protocol] = list(ENCODERS)
CACHE_READ = {"anthropic": True, "responses": True, "chat": True, "ollama.generate": False, "ollama.chat": False}


def answer(protocol: Protocol, turn: _Answer, stream: bool, model: str = "m-1") -> tuple[bytes, str]:
    """The bytes the fake sends for `turn` and their content type (a chat stream asks for its usage)."""
    encoder = ENCODERS[protocol]
    body = {"stream_options": {"include_usage": True}} if protocol == "chat" else {}
    call = _Call(model=model, body=body, chunk_size=2, stream=stream)
    if stream:
        return b"".join(encoder.stream(turn, call)), encoder.media_type
    return json.dumps(encoder.complete(turn, call)).encode(), "application/json"


def expected(protocol: Protocol, turn: _Answer) -> Usage:
    cached = CACHE_READ[protocol]
    return Usage(
        input_tokens=turn.input_tokens,
        output_tokens=turn.output_tokens,
        cache_read_tokens=turn.cache_read_tokens if cached else None,
        cache_write_tokens=turn.cache_write_tokens if protocol == "anthropic" else None,
    )


def fed(protocol: Protocol, content_type: str, pieces: list[bytes]) -> Metered:
    reader = UsageReader(protocol, framing_of(protocol, content_type))
    for piece in pieces:
        reader.feed(piece)
    return reader.finish()


def cut(data: bytes, at: list[int]) -> list[bytes]:
    points = sorted({min(point, len(data)) for point in at})
    return [data[start:end] for start, end in zip([0, *points], [*points, len(data)], strict=True)]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_each_api_s_usage_and_model_are_read_as_the_fake_sends_them(protocol: Protocol, stream: bool) -> None:
    turn = Reply("a few words here", input_tokens=120, output_tokens=33, cache_read_tokens=5, cache_write_tokens=9)
    body, media = answer(protocol, turn, stream, model="claude-x")
    metered = read_usage(protocol, media, body)
    assert metered == Metered(expected(protocol, turn), "claude-x", reported=True)


@pytest.mark.parametrize("protocol", ["anthropic", "responses", "chat", "ollama.chat"])
def test_a_tool_call_s_usage_is_read_too(protocol: Protocol) -> None:
    turn = ToolCall("Bash", {"command": "ls -la " * 20}, text_before="Running.", input_tokens=40, output_tokens=50)
    body, media = answer(protocol, turn, stream=True)
    assert read_usage(protocol, media, body).usage == expected(protocol, turn)


def test_a_chat_stream_that_did_not_ask_for_usage_reports_none() -> None:
    call = _Call(model="m", body={}, chunk_size=2, stream=True)
    body = b"".join(_ChatCompletions().stream(Reply("hello there"), call))
    assert read_usage("chat", "text/event-stream", body) == Metered(Usage(), "m", reported=False)


def test_anthropic_s_final_count_replaces_the_opening_one_and_the_estimate_runs_ahead_of_it() -> None:
    turn = Reply("word " * 400, input_tokens=10, output_tokens=401)
    body, _ = answer("anthropic", turn, stream=True)
    reader = UsageReader("anthropic", "sse")
    estimates = []
    for event in body.split(b"\n\n"):
        reader.feed(event + b"\n\n")
        estimates.append(reader.output_estimate)
    assert estimates == sorted(estimates)  # never goes back
    assert estimates[1] == 1  # message_start says 1
    assert estimates[-3] >= len("word " * 400) // CHARS_PER_TOKEN  # the text so far, before message_delta
    assert reader.output_estimate == 500  # 2,000 characters counted; the provider's 401 is lower
    assert reader.finish().usage.output_tokens == 401  # the count is the provider's


@pytest.mark.parametrize("protocol", ["responses", "chat", "ollama.generate"])
def test_the_estimate_grows_with_the_text_while_the_stream_runs(protocol: Protocol) -> None:
    body, media = answer(protocol, Reply("token " * 200), stream=True)
    reader = UsageReader(protocol, framing_of(protocol, media))
    reader.feed(body[: len(body) // 2])
    half = reader.output_estimate
    reader.feed(body[len(body) // 2 :])
    assert 0 < half < reader.output_estimate


POISON: list[tuple[Any, str]] = [
    (-5, "at least 0"),
    (1.5, "whole number"),
    ("12", "expected a number"),
    (2**70, "at most"),
    (True, "expected a number"),
    ([1], "expected a number"),
]


@pytest.mark.parametrize(("value", "why"), POISON)
def test_a_poisoned_count_is_unknown_and_the_rest_stands(value: Any, why: str) -> None:
    body = {"type": "message", "model": "m", "usage": {"input_tokens": value, "output_tokens": 7}}
    metered = read_usage("anthropic", "application/json", json.dumps(body).encode())
    assert metered.usage == Usage(input_tokens=None, output_tokens=7)
    assert len(metered.problems) == 1 and why in metered.problems[0], metered.problems


def test_infinity_and_nan_in_a_stream_are_unknown() -> None:
    line = b'{"model":"m","done":true,"prompt_eval_count":NaN,"eval_count":Infinity}\n'
    metered = read_usage("ollama.generate", "application/x-ndjson", line)
    assert metered.usage == Usage() and len(metered.problems) == 2


def test_an_answer_that_is_not_json_reports_no_usage_and_says_so() -> None:
    metered = read_usage("responses", "application/json", b"<html>bad gateway</html>")
    assert metered == Metered(Usage(), None, False, ("1 part(s) of the answer not JSON",))


def test_a_line_longer_than_the_bound_is_skipped_and_the_rest_is_read() -> None:
    reader = UsageReader("ollama.generate", "ndjson")
    reader.feed(b'{"response": "' + b"x" * (MAX_EVENT_BYTES + 10))
    reader.feed(b'"}\n{"done": true, "prompt_eval_count": 3, "eval_count": 4}\n')
    metered = reader.finish()
    assert metered.usage == Usage(input_tokens=3, output_tokens=4)
    assert metered.problems == (f"1 part(s) of the answer longer than {MAX_EVENT_BYTES} bytes not read",)


def test_sse_with_crlf_lines_and_comments_reads_the_same() -> None:
    body, _ = answer("responses", Reply("hi", input_tokens=3, output_tokens=2), stream=True)
    crlf = b": keep-alive\r\n\r\n" + body.replace(b"\n", b"\r\n")
    assert read_usage("responses", "text/event-stream", crlf).usage == Usage(3, 2, 0)


@pytest.mark.parametrize(
    ("method", "path", "protocol"),
    [
        ("POST", "/v1/messages?beta=true", "anthropic"),
        ("POST", "/v1/messages/count_tokens", None),
        ("GET", "/v1/messages", None),
        ("POST", "/v1/responses", "responses"),
        ("POST", "/openai/v1/responses/", "responses"),
        ("POST", "/v1/chat/completions", "chat"),
        ("POST", "/api/v1/chat/completions", "chat"),
        ("POST", "/api/generate", "ollama.generate"),
        ("POST", "/api/chat", "ollama.chat"),
        ("GET", "/v1/models", None),
        ("HEAD", "/", None),
    ],
)
def test_the_api_is_known_from_the_method_and_the_path(method: str, path: str, protocol: str | None) -> None:
    assert protocol_of(method, path) == protocol


def test_the_framing_comes_from_the_content_type() -> None:
    assert framing_of("anthropic", "text/event-stream; charset=utf-8") == "sse"
    assert framing_of("chat", "application/json") == "json"
    assert framing_of("ollama.chat", "application/x-ndjson") == "ndjson"
    assert framing_of("ollama.chat", "application/json; charset=utf-8") == "json"
    assert framing_of("ollama.generate", None) == "ndjson"


# --- properties ----------------------------------------------------------------------------------------

counts = st.integers(min_value=0, max_value=2**40)
turns = st.builds(
    Reply,
    text=st.text(max_size=80),
    input_tokens=counts,
    output_tokens=counts,
    cache_read_tokens=counts,
    cache_write_tokens=counts,
)
JSONISH = '{}[]":,\n\r datype0123456789usage_tokens.-'  # text that is often nearly an answer
points = st.lists(st.integers(min_value=0, max_value=4000), max_size=30)


@settings(max_examples=examples(300))
@given(protocol=st.sampled_from(PROTOCOLS), stream=st.booleans(), turn=turns, at=points)
def test_an_answer_cut_into_any_pieces_reads_as_it_reads_whole(
    protocol: Protocol, stream: bool, turn: Reply, at: list[int]
) -> None:
    body, media = answer(protocol, turn, stream)
    whole = read_usage(protocol, media, body)
    assert whole.usage == expected(protocol, turn)
    assert fed(protocol, media, cut(body, at)) == whole
    assert fed(protocol, media, [body[i : i + 1] for i in range(len(body))]) == whole


@settings(max_examples=examples(300))
@given(
    protocol=st.sampled_from(PROTOCOLS),
    media=st.sampled_from(["text/event-stream", "application/x-ndjson", "application/json", None]),
    data=st.binary(max_size=600) | st.text(alphabet=JSONISH, max_size=400).map(str.encode),
    at=points,
)
def test_any_bytes_in_any_pieces_never_raise_and_read_the_same(
    protocol: Protocol, media: str | None, data: bytes, at: list[int]
) -> None:
    whole = read_usage(protocol, media, data)
    reader = UsageReader(protocol, framing_of(protocol, media))
    for piece in cut(data, at):
        reader.feed(piece)
        assert reader.output_estimate >= 0
    assert reader.finish() == whole


@settings(max_examples=examples(200))
@given(
    protocol=st.sampled_from(PROTOCOLS),
    value=st.one_of(
        st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5), st.booleans(), st.none()
    ),
)
def test_any_value_in_a_count_s_place_is_a_count_or_unknown(protocol: Protocol, value: Any) -> None:
    body, media = answer(protocol, Reply("x", input_tokens=987654321), stream=False)
    body = body.replace(b"987654321", json.dumps(value).encode(), 1)  # the input count's place, whatever it holds
    metered = read_usage(protocol, media, body)
    assert metered.usage.input_tokens is None or metered.usage.input_tokens == value
    assert isinstance(metered.usage.input_tokens, int | None)
