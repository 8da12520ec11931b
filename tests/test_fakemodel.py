"""The loopback fake model server: every protocol it speaks, its script, its request log and its shutdown."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fakemodel import NO_TURN_LEFT, Fail, FakeModelServer, Hang, Reply, ToolCall
from support import run_in_threads

from agentd.services.demomodel.common import _go_duration

pytestmark = pytest.mark.process

SHORT = httpx.Timeout(0.15)
TEXT = "Hello from the fake model, with a few more words to split."


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as fake:
        yield fake


@pytest.fixture
def client(server: FakeModelServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=2.0, trust_env=False) as opened:
        yield opened


def sse_events(text: str) -> list[tuple[str | None, Any]]:
    """(event name or None, parsed data) for each SSE event; the `[DONE]` sentinel stays a string."""
    events: list[tuple[str | None, Any]] = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data.append(line.removeprefix("data: "))
        payload = "\n".join(data)
        events.append((name, payload if payload == "[DONE]" else json.loads(payload)))
    return events


def ndjson(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def data_of(events: list[tuple[str | None, Any]], name: str) -> list[Any]:
    return [data for event, data in events if event == name]


def assert_event_names_match_types(events: list[tuple[str | None, Any]]) -> None:
    for name, data in events:
        assert data["type"] == name


# One request per protocol: (path, body); all ask to stream.
REQUESTS: dict[str, tuple[str, dict[str, Any]]] = {
    "anthropic": (
        "/v1/messages?beta=true",
        {
            "model": "claude-sonnet-4-5",
            "stream": True,
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}],
        },
    ),
    "responses": ("/v1/responses", {"model": "gpt-5.5", "stream": True, "input": "hi"}),
    "chat": (
        "/v1/chat/completions",
        {"model": "fake-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    ),
    "ollama.generate": ("/api/generate", {"model": "fake:latest", "prompt": "hi"}),
    "ollama.chat": ("/api/chat", {"model": "fake:latest", "messages": [{"role": "user", "content": "hi"}]}),
}
PROTOCOLS = list(REQUESTS)


def call(client: httpx.Client, protocol: str, **overrides: Any) -> httpx.Response:
    path, body = REQUESTS[protocol]
    return client.post(path, json={**body, **overrides})


def check_first_event(protocol: str, raw: bytes) -> None:
    if protocol.startswith("ollama"):
        (line,) = ndjson(raw.decode())
        assert line["done"] is False
        assert line["model"] == "fake:latest"
        return
    ((name, data),) = sse_events(raw.decode())
    if protocol == "anthropic":
        assert name == "message_start"
        assert data["message"]["model"] == "claude-sonnet-4-5"
    elif protocol == "responses":
        assert (name, data["type"], data["sequence_number"]) == ("response.created", "response.created", 0)
    else:
        assert data["choices"][0]["delta"]["role"] == "assistant"


def error_message(protocol: str, status: int, payload: dict[str, Any]) -> str:
    if protocol == "anthropic":
        assert payload["type"] == "error"
        assert payload["error"]["type"] == {500: "api_error", 429: "rate_limit_error"}[status]
        return str(payload["error"]["message"])
    if protocol in ("responses", "chat"):
        assert set(payload["error"]) >= {"message", "type", "code"}
        return str(payload["error"]["message"])
    assert isinstance(payload["error"], str)
    return payload["error"]


# --------------------------------------------------------------------------------------------
# Anthropic Messages
# --------------------------------------------------------------------------------------------


def test_anthropic_streams_text(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(Reply(TEXT, input_tokens=13, output_tokens=5))
    response = call(client, "anthropic")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    events = sse_events(response.text)
    assert_event_names_match_types(events)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    (start,) = data_of(events, "message_start")
    message = start["message"]
    assert message["id"].startswith("msg_")
    assert (message["model"], message["role"], message["usage"]["input_tokens"]) == (
        "claude-sonnet-4-5",
        "assistant",
        13,
    )
    deltas = data_of(events, "content_block_delta")
    assert len(deltas) > 1
    assert "".join(d["delta"]["text"] for d in deltas if d["delta"]["type"] == "text_delta") == TEXT
    (delta,) = data_of(events, "message_delta")
    assert delta["delta"]["stop_reason"] == "end_turn"
    assert delta["usage"]["output_tokens"] == 5


def test_anthropic_answers_one_message_without_stream(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(Reply(TEXT))
    response = call(client, "anthropic", stream=False)
    assert response.headers["content-type"] == "application/json"
    message = response.json()
    assert message["type"] == "message"
    assert message["content"] == [{"type": "text", "text": TEXT}]
    assert message["stop_reason"] == "end_turn"
    assert (message["usage"]["input_tokens"], message["usage"]["output_tokens"]) == (11, 7)


def test_anthropic_tool_call_then_reply(server: FakeModelServer, client: httpx.Client) -> None:
    arguments = {"command": "echo tool-ran-ok > marker.txt; echo tool-ran-ok", "description": "write marker"}
    server.script(ToolCall("Bash", arguments, text_before="Running a command."), Reply("Done."))

    events = sse_events(call(client, "anthropic").text)
    blocks = [data["content_block"] for data in data_of(events, "content_block_start")]
    assert [block["type"] for block in blocks] == ["text", "tool_use"]
    tool = blocks[1]
    assert tool["id"].startswith("toolu_")
    assert (tool["name"], tool["input"]) == ("Bash", {})
    deltas = [data for data in data_of(events, "content_block_delta")]
    text = "".join(d["delta"]["text"] for d in deltas if d["index"] == 0)
    partial = "".join(d["delta"]["partial_json"] for d in deltas if d["index"] == 1)
    assert text == "Running a command."
    assert {d["delta"]["type"] for d in deltas if d["index"] == 1} == {"input_json_delta"}
    assert json.loads(partial) == arguments
    assert data_of(events, "message_delta")[0]["delta"]["stop_reason"] == "tool_use"

    follow_up = sse_events(call(client, "anthropic").text)
    assert "".join(d["delta"]["text"] for d in data_of(follow_up, "content_block_delta")) == "Done."
    assert data_of(follow_up, "message_delta")[0]["delta"]["stop_reason"] == "end_turn"
    assert server.turns_left == 0


def test_anthropic_non_streaming_tool_call(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(ToolCall("Bash", {"command": "ls"}))
    message = call(client, "anthropic", stream=False).json()
    (block,) = message["content"]
    assert (block["type"], block["name"], block["input"]) == ("tool_use", "Bash", {"command": "ls"})
    assert message["stop_reason"] == "tool_use"


def test_anthropic_count_tokens_consumes_no_turn(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(Reply("kept"))
    response = client.post("/v1/messages/count_tokens?beta=true", json={"model": "m", "messages": []})
    assert response.json() == {"input_tokens": 10}
    assert server.turns_left == 1
    assert server.requests[-1].protocol == "anthropic.count_tokens"


# --------------------------------------------------------------------------------------------
# OpenAI Responses
# --------------------------------------------------------------------------------------------


def test_responses_streams_text(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(Reply(TEXT, input_tokens=20, output_tokens=9))
    response = call(client, "responses")
    assert response.headers["content-type"] == "text/event-stream"
    events = sse_events(response.text)
    assert_event_names_match_types(events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    names = [name for name, _ in events]
    assert names[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert names[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert data_of(events, "response.created")[0]["response"]["model"] == "gpt-5.5"
    deltas = data_of(events, "response.output_text.delta")
    assert len(deltas) > 1
    assert "".join(d["delta"] for d in deltas) == TEXT
    assert data_of(events, "response.output_text.done")[0]["text"] == TEXT
    (completed,) = data_of(events, "response.completed")
    assert completed["response"]["status"] == "completed"
    assert completed["response"]["output"][0]["content"][0]["text"] == TEXT
    assert completed["response"]["usage"] == {
        "input_tokens": 20,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 29,
    }


def test_responses_answers_one_object_without_stream(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(Reply(TEXT))
    body = call(client, "responses", stream=False).json()
    assert (body["object"], body["status"]) == ("response", "completed")
    (item,) = body["output"]
    assert (item["type"], item["role"], item["content"][0]["text"]) == ("message", "assistant", TEXT)
    assert body["usage"]["total_tokens"] == 18


def test_responses_tool_call_then_reply(server: FakeModelServer, client: httpx.Client) -> None:
    arguments = {"cmd": "echo tool-ran-ok > marker.txt; echo tool-ran-ok"}
    server.script(ToolCall("exec_command", arguments, text_before="Running a command."), Reply("Done."))

    events = sse_events(call(client, "responses").text)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    added = [data["item"] for data in data_of(events, "response.output_item.added")]
    assert [item["type"] for item in added] == ["message", "function_call"]
    streamed = "".join(d["delta"] for d in data_of(events, "response.function_call_arguments.delta"))
    assert json.loads(streamed) == arguments
    done = [data["item"] for data in data_of(events, "response.output_item.done")]
    function_call = done[1]
    assert function_call["name"] == "exec_command"
    assert isinstance(function_call["arguments"], str)
    assert json.loads(function_call["arguments"]) == arguments
    assert function_call["call_id"].startswith("call_")
    (completed,) = data_of(events, "response.completed")
    assert [item["type"] for item in completed["response"]["output"]] == ["message", "function_call"]
    assert "".join(d["delta"] for d in data_of(events, "response.output_text.delta")) == "Running a command."

    tool_output = {"type": "function_call_output", "call_id": function_call["call_id"], "output": "tool-ran-ok"}
    follow_up = sse_events(call(client, "responses", input=[tool_output]).text)
    assert "".join(d["delta"] for d in data_of(follow_up, "response.output_text.delta")) == "Done."
    assert server.requests[-1].body["input"] == [tool_output]


# --------------------------------------------------------------------------------------------
# OpenAI Chat Completions
# --------------------------------------------------------------------------------------------


def chat_text(events: list[tuple[str | None, Any]]) -> str:
    return "".join(
        data["choices"][0]["delta"].get("content") or "" for _, data in events if data != "[DONE]" and data["choices"]
    )


def test_chat_streams_text_with_usage(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(Reply(TEXT, input_tokens=30, output_tokens=4))
    response = call(client, "chat", stream_options={"include_usage": True})
    assert response.headers["content-type"] == "text/event-stream"
    events = sse_events(response.text)
    assert all(name is None for name, _ in events)
    assert events[-1][1] == "[DONE]"
    chunks = [data for _, data in events[:-1]]
    assert all(chunk["object"] == "chat.completion.chunk" and chunk["model"] == "fake-model" for chunk in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chat_text(events) == TEXT
    assert len(chunks) > 4
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_tokens"] == 30
    assert chunks[-1]["usage"]["completion_tokens"] == 4
    assert chunks[-1]["usage"]["total_tokens"] == 34


def test_chat_streams_without_usage_unless_asked(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(Reply("short"))
    events = sse_events(call(client, "chat").text)
    assert all("usage" not in data for _, data in events[:-1])
    assert events[-2][1]["choices"][0]["finish_reason"] == "stop"


def test_chat_answers_one_completion_without_stream(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(Reply(TEXT))
    body = call(client, "chat", stream=False).json()
    assert body["object"] == "chat.completion"
    (choice,) = body["choices"]
    assert choice["message"] == {"role": "assistant", "content": TEXT}
    assert choice["finish_reason"] == "stop"
    assert (body["usage"]["prompt_tokens"], body["usage"]["completion_tokens"]) == (11, 7)


def test_chat_tool_call_then_reply_under_api_v1(server: FakeModelServer, client: httpx.Client) -> None:
    arguments = {"command": "echo tool-ran-ok > marker.txt; echo tool-ran-ok"}
    server.script(ToolCall("terminal", arguments), Reply("Done."))
    body = {**REQUESTS["chat"][1], "stream_options": {"include_usage": True}}

    events = sse_events(client.post("/api/v1/chat/completions", json=body).text)
    calls = [
        tool_call
        for _, data in events
        if data != "[DONE]" and data["choices"]
        for tool_call in data["choices"][0]["delta"].get("tool_calls", [])
    ]
    first = calls[0]
    assert first["id"].startswith("call_")
    assert (first["type"], first["function"]["name"]) == ("function", "terminal")
    assert all(tool_call["index"] == 0 for tool_call in calls)
    assert json.loads("".join(tool_call["function"]["arguments"] for tool_call in calls)) == arguments
    finishes = [data["choices"][0]["finish_reason"] for _, data in events if data != "[DONE]" and data["choices"]]
    assert finishes[-1] == "tool_calls"
    assert events[-2][1]["usage"]["total_tokens"] == 18

    follow_up = sse_events(client.post("/api/v1/chat/completions", json=body).text)
    assert chat_text(follow_up) == "Done."
    assert server.requests[0].protocol == server.requests[1].protocol == "chat"


def test_chat_non_streaming_tool_call(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(ToolCall("terminal", {"command": "ls"}))
    (choice,) = call(client, "chat", stream=False).json()["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (tool_call,) = choice["message"]["tool_calls"]
    assert json.loads(tool_call["function"]["arguments"]) == {"command": "ls"}


# --------------------------------------------------------------------------------------------
# Ollama
# --------------------------------------------------------------------------------------------


def test_ollama_generate_streams_ndjson_by_default() -> None:
    with FakeModelServer(turns=[Reply("one two three four", 5, 3)], chunk_size=1) as fake:
        response = httpx.post(f"{fake.url}/api/generate", json={"model": "llama3", "prompt": "hi"}, trust_env=False)
    assert response.headers["content-type"] == "application/x-ndjson"
    lines = ndjson(response.text)
    assert [line["response"] for line in lines] == ["one ", "two ", "three ", "four", ""]
    assert [line["done"] for line in lines] == [False] * 4 + [True]
    assert all(line["model"] == "llama3" and line["created_at"].endswith("Z") for line in lines)
    final = lines[-1]
    assert (final["done_reason"], final["prompt_eval_count"], final["eval_count"]) == ("stop", 5, 3)
    assert isinstance(final["context"], list)
    assert final["total_duration"] > 0


def test_ollama_generate_answers_one_object_without_stream(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(Reply(TEXT))
    # a chunked request body is read as well as a Content-Length one
    chunks = iter([b'{"model": "fake:latest", ', b'"prompt": "hi", "stream": false}'])
    response = client.post("/api/generate", content=chunks, headers={"content-type": "application/json"})
    body = response.json()
    assert response.headers["content-type"] == "application/json"
    assert (body["response"], body["done"], body["done_reason"]) == (TEXT, True, "stop")
    assert (body["prompt_eval_count"], body["eval_count"]) == (11, 7)
    assert server.requests[-1].headers["transfer-encoding"] == "chunked"
    assert server.requests[-1].body["stream"] is False


def test_ollama_generate_cannot_carry_a_tool_call(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(ToolCall("terminal", {"command": "ls"}))
    response = call(client, "ollama.generate")
    assert response.status_code == 500
    assert "ToolCall" in response.json()["error"]


def test_ollama_chat_streams_then_tool_call(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(Reply(TEXT), ToolCall("terminal", {"command": "ls"}, text_before="Looking."), Reply("Done."))

    lines = ndjson(call(client, "ollama.chat").text)
    assert "".join(line["message"]["content"] for line in lines) == TEXT
    assert lines[-1]["done"] is True
    assert all(line["message"]["role"] == "assistant" for line in lines)

    lines = ndjson(call(client, "ollama.chat").text)
    assert "".join(line["message"]["content"] for line in lines) == "Looking."
    (tool_call,) = [tc for line in lines for tc in line["message"].get("tool_calls", [])]
    assert tool_call["function"] == {"index": 0, "name": "terminal", "arguments": {"command": "ls"}}

    body = call(client, "ollama.chat", stream=False).json()
    assert (body["message"]["content"], body["done"], body["eval_count"]) == ("Done.", True, 7)


def test_ollama_chat_non_streaming_tool_call(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(ToolCall("terminal", {"command": "ls"}))
    message = call(client, "ollama.chat", stream=False).json()["message"]
    assert message["tool_calls"][0]["function"]["arguments"] == {"command": "ls"}


# --------------------------------------------------------------------------------------------
# Every protocol: errors and hangs
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("status", [500, 429])
def test_fail_answers_the_status_then_recovers(
    server: FakeModelServer, client: httpx.Client, protocol: str, status: int
) -> None:
    server.script(Fail(status, f"injected {status}", times=2), Reply("recovered"))
    for _ in range(2):
        response = call(client, protocol)
        assert response.status_code == status
        assert response.headers["content-type"] == "application/json"
        assert error_message(protocol, status, response.json()) == f"injected {status}"
        assert response.headers.get("retry-after") == ("0" if status == 429 else None)
    recovered = call(client, protocol)
    assert recovered.status_code == 200
    assert "recovered" in recovered.text
    assert [request.turn for request in server.requests] == [Fail(status, f"injected {status}", 2)] * 2 + [
        Reply("recovered")
    ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_429_can_say_when_its_limit_resets_in_three_ways(
    server: FakeModelServer, client: httpx.Client, protocol: str
) -> None:
    server.script(Fail(429, "slow down", resets_in_s=90.5))
    before = datetime.now(UTC)
    response = call(client, protocol)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "91"
    assert response.headers["x-ratelimit-reset-requests"] == "1m30.5s"
    at = datetime.fromisoformat(response.headers["anthropic-ratelimit-requests-reset"])
    assert before + timedelta(seconds=89) <= at <= datetime.now(UTC) + timedelta(seconds=91)


def test_a_reset_duration_is_written_as_go_writes_one() -> None:
    assert [_go_duration(s) for s in (0, 0.02, 1, 59.5, 60, 360, 3723.5)] == [
        "0s", "0.02s", "1s", "59.5s", "1m0s", "6m0s", "1h2m3.5s",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="resets_in_s"):
        Fail(429, "x", resets_in_s=-1)


ANTHROPIC_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def usage_places(protocol: str, body: dict[str, Any]) -> tuple[Any, ...]:
    """The usage numbers a whole answer carries, where its API puts them."""
    if protocol == "anthropic":
        return tuple(body["usage"][key] for key in ANTHROPIC_KEYS)
    if protocol.startswith("ollama"):
        return body["prompt_eval_count"], body["eval_count"]
    usage = body["usage"]
    if protocol == "responses":
        return usage["input_tokens"], usage["output_tokens"], usage["input_tokens_details"]["cached_tokens"]
    return usage["prompt_tokens"], usage["completion_tokens"], usage["prompt_tokens_details"]["cached_tokens"]


USAGE_EXPECTED = {"anthropic": (5, 6, 3, 4), "responses": (5, 6, 3), "chat": (5, 6, 3), "ollama.generate": (5, 6)}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_whole_answer_carries_the_scripted_usage_and_cache_counts(
    server: FakeModelServer, client: httpx.Client, protocol: str
) -> None:
    server.script(Reply("hi", input_tokens=5, output_tokens=6, cache_read_tokens=3, cache_write_tokens=4))
    response = call(client, protocol, stream=False)
    assert usage_places(protocol, response.json()) == USAGE_EXPECTED.get(protocol, (5, 6))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_hang_never_answers(server: FakeModelServer, protocol: str) -> None:
    server.script(Hang())
    path, body = REQUESTS[protocol]
    with (
        httpx.Client(base_url=server.url, timeout=SHORT, trust_env=False) as client,
        pytest.raises(httpx.ReadTimeout),
    ):
        client.post(path, json=body)
    assert server.requests[0].turn == Hang()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_hang_after_headers_sends_the_first_event_then_stalls(server: FakeModelServer, protocol: str) -> None:
    server.script(Hang(after_headers=True))
    path, body = REQUESTS[protocol]
    terminator = b"\n" if protocol.startswith("ollama") else b"\n\n"
    with (
        httpx.Client(base_url=server.url, timeout=SHORT, trust_env=False) as client,
        client.stream("POST", path, json=body) as response,
    ):
        assert response.status_code == 200
        chunks = response.iter_bytes()
        received = b""
        while terminator not in received:
            received += next(chunks)
        check_first_event(protocol, received)
        with pytest.raises(httpx.ReadTimeout):
            next(chunks)


def test_hang_after_headers_on_a_non_streaming_request_sends_headers_only(server: FakeModelServer) -> None:
    server.script(Hang(after_headers=True))
    with (
        httpx.Client(base_url=server.url, timeout=SHORT, trust_env=False) as client,
        client.stream("POST", "/v1/chat/completions", json={"model": "m", "messages": []}) as response,
    ):
        assert response.headers["content-type"] == "application/json"
        with pytest.raises(httpx.ReadTimeout):
            response.read()


# --------------------------------------------------------------------------------------------
# Script: order, default, validation
# --------------------------------------------------------------------------------------------


def test_turns_are_shared_across_protocols_in_order(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(Reply("a"), Reply("b"))
    server.script(Reply("c"))
    assert server.turns_left == 3
    assert call(client, "anthropic", stream=False).json()["content"][0]["text"] == "a"
    assert call(client, "chat", stream=False).json()["choices"][0]["message"]["content"] == "b"
    assert call(client, "ollama.generate", stream=False).json()["response"] == "c"
    empty = call(client, "responses", stream=False)
    assert empty.status_code == 500
    assert empty.json()["error"]["message"] == NO_TURN_LEFT
    assert [request.protocol for request in server.requests] == ["anthropic", "chat", "ollama.generate", "responses"]
    assert server.requests[-1].turn is None


def test_default_answers_once_the_queue_is_empty() -> None:
    with (
        FakeModelServer(turns=[Reply("first")], default=Reply("again")) as fake,
        httpx.Client(base_url=fake.url, timeout=2.0, trust_env=False) as client,
    ):
        texts = [call(client, "ollama.generate", stream=False).json()["response"] for _ in range(3)]
    assert texts == ["first", "again", "again"]


def test_concurrent_calls_each_take_one_turn(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(*(Reply(f"r{n}") for n in range(8)))
    texts: list[str] = []
    lock = threading.Lock()

    def one() -> None:
        text = call(client, "ollama.generate", stream=False).json()["response"]
        with lock:
            texts.append(text)

    run_in_threads(one, [()] * 8, 5)
    assert sorted(texts) == sorted(f"r{n}" for n in range(8))
    assert server.turns_left == 0


def test_script_validation() -> None:
    with pytest.raises(ValueError):
        Fail(200, "not an error")
    with pytest.raises(ValueError):
        Fail(500, "never", times=0)
    with pytest.raises(TypeError):
        FakeModelServer().script("hello")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        FakeModelServer(chunk_size=0)
    with pytest.raises(RuntimeError):
        _ = FakeModelServer().url


def test_invalid_json_is_a_400_and_consumes_no_turn(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(Reply("kept"))
    response = client.post("/v1/messages", content=b"not json", headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["type"] == "error"
    assert server.turns_left == 1
    assert server.requests[0].body == "not json"


# --------------------------------------------------------------------------------------------
# Probes
# --------------------------------------------------------------------------------------------


def test_probes_answer_without_consuming_turns() -> None:
    with FakeModelServer(turns=[Reply("kept")], models=("fake-model", "other:7b")) as fake:
        with httpx.Client(base_url=fake.url, timeout=2.0, trust_env=False) as probe:
            for path in ("/v1/models", "/api/v1/models"):
                listing = probe.get(path).json()
                assert listing["object"] == "list"
                assert [model["id"] for model in listing["data"]] == ["fake-model", "other:7b"]
                assert all(model["object"] == "model" for model in listing["data"])
                assert all(model["context_length"] == 262144 for model in listing["data"])
            tags = probe.get("/api/tags").json()
            assert [model["name"] for model in tags["models"]] == ["fake-model:latest", "other:7b"]
            show = probe.post("/api/show", json={"model": "fake-model"}).json()
            assert show["model_info"]["general.context_length"] >= 262144
            assert show["model_info"]["llama.context_length"] >= 262144
            assert show["details"]["format"] == "gguf"
            assert probe.get("/api/version").json()["version"]
            assert probe.post("/v1/messages/count_tokens", json={}).json() == {"input_tokens": 10}
            assert fake.turns_left == 1
            assert call(probe, "ollama.generate", stream=False).json()["response"] == "kept"
        protocols = [request.protocol for request in fake.requests]
    assert protocols == [
        "models",
        "models",
        "ollama.tags",
        "ollama.show",
        "ollama.version",
        "anthropic.count_tokens",
        "ollama.generate",
    ]


def test_unknown_paths_are_404_and_recorded(server: FakeModelServer, client: httpx.Client) -> None:
    missing = client.get("/v2/nothing?x=1")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "not_found_error"
    wrong_method = client.get("/v1/messages")
    assert wrong_method.status_code == 405
    assert [(r.method, r.path, r.query, r.protocol) for r in server.requests] == [
        ("GET", "/v2/nothing", "x=1", "unknown"),
        ("GET", "/v1/messages", "", "unknown"),
    ]


# --------------------------------------------------------------------------------------------
# Request log, waiting, stopping
# --------------------------------------------------------------------------------------------


def test_request_log_keeps_method_path_headers_and_body(server: FakeModelServer, client: httpx.Client) -> None:
    server.script(Reply("ok"))
    path, body = REQUESTS["anthropic"]
    client.post(path, json=body, headers={"X-Api-Key": "anything", "anthropic-version": "2023-06-01"})
    (request,) = server.requests
    assert (request.method, request.path, request.query, request.protocol) == (
        "POST",
        "/v1/messages",
        "beta=true",
        "anthropic",
    )
    assert request.headers["x-api-key"] == "anything"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.body == body
    assert request.turn == Reply("ok")
    assert server.requests is not server.requests  # a snapshot each time


def test_wait_for_requests(server: FakeModelServer) -> None:
    with pytest.raises(TimeoutError):
        server.wait_for_requests(1, timeout=0.01)
    server.script(Hang())
    outcome: list[BaseException] = []

    def hung_call() -> None:
        try:
            with httpx.Client(base_url=server.url, timeout=5.0, trust_env=False) as client:
                call(client, "chat")
        except httpx.HTTPError as error:
            outcome.append(error)

    thread = threading.Thread(target=hung_call)
    thread.start()
    (request,) = server.wait_for_requests(1, timeout=2.0)
    assert (request.protocol, request.turn) == ("chat", Hang())
    server.stop()
    thread.join(2.0)
    assert not thread.is_alive()
    assert len(outcome) == 1


def test_stop_releases_hung_handlers_and_idle_connections() -> None:
    fake = FakeModelServer(turns=[Hang(), Hang(after_headers=True)])
    fake.start()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def hung_call(protocol: str) -> None:
        try:
            with httpx.Client(base_url=fake.url, timeout=5.0, trust_env=False) as client:
                call(client, protocol)
        except httpx.HTTPError as error:
            with lock:
                errors.append(error)

    callers = [threading.Thread(target=hung_call, args=(protocol,)) for protocol in ("anthropic", "responses")]
    with httpx.Client(base_url=fake.url, timeout=2.0, trust_env=False) as idle:
        assert idle.get("/api/version").status_code == 200  # leaves a keep-alive connection open
        for caller in callers:
            caller.start()
        fake.wait_for_requests(3, timeout=2.0)
        started = time.monotonic()
        fake.stop()
        assert time.monotonic() - started < 1.0
        for caller in callers:
            caller.join(2.0)
    assert not any(caller.is_alive() for caller in callers)
    assert len(errors) == 2
    assert not [thread for thread in threading.enumerate() if thread.name.startswith("fakemodel")]
    fake.stop()  # idempotent
