"""The model gateway forwards an attempt's calls (agentd/gateway/server.py; docs/gateway.md): for each API,
streamed and whole, the harness gets exactly the bytes the upstream sent, the upstream sees the real key
and never the token, and the record holds the usage the upstream answered. Real sockets on 127.0.0.1,
the loopback fake model as the upstream."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from fakemodel import Fail, FakeModelServer, Reply
from gatewayrig import KEY, TOKEN, Recorder, Tap, admit, client, serving

from agentd.clock import SystemClock
from agentd.gateway.calls import Route, refusal
from agentd.gateway.server import Gateway
from agentd.redaction import MARK, Redactor
from agentd.usage import Usage

pytestmark = pytest.mark.asyncio

# (path, body, how the API's clients send their key)
CALLS: dict[str, tuple[str, dict[str, Any], str]] = {
    "anthropic": ("/v1/messages?beta=true", {"model": "claude-sonnet-4-5", "max_tokens": 64000}, "x-api-key"),
    "responses": ("/v1/responses", {"model": "gpt-5.5", "input": "hi", "max_output_tokens": 900}, "bearer"),
    "chat": ("/v1/chat/completions", {"model": "fake-model", "stream_options": {"include_usage": True}}, "bearer"),
    "ollama.generate": ("/api/generate", {"model": "fake:latest", "prompt": "hi"}, "none"),
    "ollama.chat": ("/api/chat", {"model": "fake:latest", "options": {"num_predict": 77}}, "none"),
}
LIMITS = {"anthropic": 64000, "responses": 900, "chat": None, "ollama.generate": None, "ollama.chat": 77}
TURN = Reply("Hello through the gateway, word by word.", input_tokens=21, output_tokens=13, cache_read_tokens=4)


@pytest.fixture
def fake() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


def token_headers(style: str) -> dict[str, str]:
    """Where each kind of client puts its API key (an Ollama client puts none: the token goes in the path)."""
    if style == "none":
        return {}
    return {"x-api-key": TOKEN} if style == "x-api-key" else {"authorization": f"Bearer {TOKEN}"}


def expected_usage(api: str) -> Usage:
    cached = 4 if api in ("anthropic", "responses", "chat") else None
    return Usage(21, 13, cached, 0 if api == "anthropic" else None)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("api", list(CALLS))
async def test_a_call_goes_through_with_the_real_key_and_its_usage_recorded(
    fake: FakeModelServer, api: str, stream: bool
) -> None:
    fake.script(TURN)
    path, body, style = CALLS[api]
    tap = Tap(fake.port)
    async with tap as upstream, serving() as (gateway, url):
        hooks = admit(gateway, upstream, style)
        prefix = f"/t/{TOKEN}" if style == "none" else ""
        async with client(url, **token_headers(style)) as harness:
            answer = await harness.post(prefix + path, json={**body, "stream": stream})
        record = await hooks.record()
    [sent] = tap.bodies()
    assert answer.status_code == 200
    assert answer.content == sent  # exactly the upstream's bytes
    [seen] = fake.requests
    assert seen.path == path.split("?")[0] and seen.body == {**body, "stream": stream}
    credentials = {name: seen.headers.get(name) for name in ("x-api-key", "authorization")}
    assert credentials == {
        "x-api-key": {"x-api-key": KEY}.get(style),
        "authorization": {"bearer": f"Bearer {KEY}"}.get(style),
    }
    assert TOKEN not in json.dumps(seen.headers) + seen.path + seen.query
    assert seen.headers["host"] == upstream.removeprefix("http://")
    [call] = hooks.calls
    assert (call.api, call.path, call.stream, call.max_output_tokens) == (api, path, stream, LIMITS[api])
    assert call.model == body["model"] and call.usage_expected
    assert (record.status, record.forwarded, record.cut, record.error, record.reset_at) == (
        200,
        True,
        False,
        None,
        None,
    )
    assert record.metered.usage == expected_usage(api) and record.metered.model == body["model"]
    assert record.response.sha256 == hashlib.sha256(sent).hexdigest() and record.response.kept == sent
    assert record.request.size == len(seen_body := answer.request.content) and record.request.kept == seen_body
    assert record.first_byte_ms is not None and 0 < record.first_byte_ms <= record.latency_ms


async def test_the_upstream_s_base_path_comes_before_the_request_s_path(fake: FakeModelServer) -> None:
    fake.script(Reply("hi"))
    async with serving() as (gateway, url):
        admit(gateway, fake.url + "/api", "bearer")
        async with client(url, authorization=f"Bearer {TOKEN}") as harness:
            answer = await harness.post("/v1/chat/completions", json={"model": "m"})
    assert answer.status_code == 200
    assert [r.path for r in fake.requests] == ["/api/v1/chat/completions"]


async def test_a_429_s_reset_is_recorded_and_its_headers_reach_the_harness(fake: FakeModelServer) -> None:
    fake.script(Fail(429, "slow down", resets_in_s=120))
    async with serving() as (gateway, url):
        hooks = admit(gateway, fake.url)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            answer = await harness.post("/v1/messages", json={"model": "m", "stream": True})
        record = await hooks.record()
    assert answer.status_code == 429 and answer.headers["retry-after"] == "120"
    assert answer.json()["error"]["type"] == "rate_limit_error"
    assert record.status == 429 and record.reset_at is not None
    assert abs(record.reset_at - (datetime.now(UTC) + timedelta(seconds=120))) < timedelta(seconds=5)
    assert record.metered.usage == Usage() and not record.metered.reported


async def test_an_unknown_token_gets_a_401_and_never_reaches_the_upstream(fake: FakeModelServer) -> None:
    async with serving() as (gateway, url):
        hooks = admit(gateway, fake.url)
        for headers in ({}, {"x-api-key": "someone-elses-token-000"}, {"authorization": "Bearer nope-nope-nope"}):
            async with client(url, **headers) as harness:
                answer = await harness.post("/v1/messages", json={"model": "m"})
            assert answer.status_code == 401, headers
            assert answer.json()["error"]["type"] == "authentication_error"
        gateway.revoke(TOKEN)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            revoked = await harness.post("/v1/messages", json={"model": "m"})
        async with client(url) as harness:
            warm_up = await harness.head("/")  # claude's, before its first call: no key, not counted
    assert revoked.status_code == 401 and warm_up.status_code == 401
    assert fake.requests == [] and hooks.calls == [] and hooks.records == []
    assert gateway.refused == 4


async def test_two_different_admitted_tokens_in_one_request_are_refused(fake: FakeModelServer) -> None:
    async with serving() as (gateway, url):
        hooks = admit(gateway, fake.url)
        other = Recorder()
        gateway.admit("another-attempts-token-000", Route(fake.url, "x-api-key", "sk-other-key"), other)
        async with client(url, **{"x-api-key": TOKEN, "authorization": "Bearer another-attempts-token-000"}) as h:
            answer = await h.post("/v1/messages", json={"model": "m"})
    assert answer.status_code == 401 and fake.requests == [] and hooks.calls == other.calls == []


async def test_a_refusal_before_the_call_answers_the_harness_and_the_upstream_sees_nothing(
    fake: FakeModelServer,
) -> None:
    verdict = refusal(429, "the attempt's budget is spent", "budget_exceeded", **{"retry-after": "3600"})
    async with serving() as (gateway, url):
        hooks = admit(gateway, fake.url, verdict=verdict)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            answer = await harness.post("/v1/messages", json={"model": "m", "stream": True})
        record = await hooks.record()
    assert fake.requests == []
    assert answer.status_code == 429 and answer.headers["retry-after"] == "3600"
    assert answer.json()["error"] == {
        "type": "budget_exceeded",
        "code": "budget_exceeded",
        "message": "the attempt's budget is spent",
    }
    assert (record.status, record.forwarded, record.response.size) == (429, False, 0)


async def test_a_hook_that_fails_refuses_the_call(fake: FakeModelServer) -> None:
    async with serving() as (gateway, url):
        hooks = admit(gateway, fake.url, before_fails=True)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            answer = await harness.post("/v1/messages", json={"model": "m"})
        record = await hooks.record()
    assert answer.status_code == 503 and fake.requests == []
    assert (record.status, record.forwarded) == (503, False)


async def test_a_body_writing_a_key_twice_is_refused_unforwarded(fake: FakeModelServer) -> None:
    async with serving() as (gateway, url):
        hooks = admit(gateway, fake.url)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            answer = await harness.post("/v1/messages", content=b'{"model": "cheap", "model": "dear"}')
    assert answer.status_code == 400 and "written twice" in answer.json()["error"]["message"]
    assert fake.requests == [] and hooks.calls == []


async def test_hop_by_hop_headers_stop_at_the_gateway_and_the_rest_go_on(fake: FakeModelServer) -> None:
    fake.script(Reply("hi"))
    headers = {
        "x-api-key": TOKEN,
        "connection": "keep-alive, x-private-hop",
        "x-private-hop": "1",
        "te": "trailers",
        "proxy-authorization": "Basic abc",
        "api-key": "azure-style-key",
        "anthropic-version": "2023-06-01",
        "accept-encoding": "gzip, br",
    }
    async with serving() as (gateway, url):
        admit(gateway, fake.url)
        async with client(url, **headers) as harness:
            answer = await harness.post("/v1/messages", json={"model": "m", "stream": True})
    assert answer.status_code == 200
    [seen] = fake.requests
    for gone in ("x-private-hop", "te", "proxy-authorization", "api-key", "connection"):
        assert gone not in seen.headers, gone
    assert seen.headers["anthropic-version"] == "2023-06-01" and seen.headers["accept-encoding"] == "identity"
    assert seen.headers["x-api-key"] == KEY
    assert "connection" not in answer.headers or answer.headers["connection"] != "close"  # the fake's, not ours


async def test_kept_bodies_are_redacted_and_a_long_one_is_hashed_whole_and_cut(fake: FakeModelServer) -> None:
    fake.script(Reply("the secret is hunter2-secret " + "x" * 3000))
    route = Route(fake.url, "x-api-key", KEY, Redactor(["hunter2-secret"]))
    async with serving(Gateway(SystemClock(), keep_bytes=1000)) as (gateway, url):
        hooks = Recorder()
        gateway.admit(TOKEN, route, hooks)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            answer = await harness.post("/v1/messages", json={"model": "m", "prompt": "hunter2-secret"})
        record = await hooks.record()
    assert b"hunter2-secret" in answer.content  # the harness gets what the upstream said
    assert record.request.whole and MARK.encode() in record.request.kept and b"hunter2" not in record.request.kept
    assert record.response.sha256 == hashlib.sha256(answer.content).hexdigest()
    assert record.response.size == len(answer.content) > 3000
    assert not record.response.whole and len(record.response.kept) == 1000
    assert b"hunter2" not in record.response.kept


async def test_a_keep_alive_connection_carries_calls_one_after_another(fake: FakeModelServer) -> None:
    fake.script(Reply("one"), Reply("two"), Reply("three"))
    async with serving() as (gateway, url):
        hooks = admit(gateway, fake.url, "bearer")
        async with client(url, authorization=f"Bearer {TOKEN}") as harness:
            texts = []
            for stream in (False, True, False):
                answer = await harness.post("/v1/chat/completions", json={"model": "m", "stream": stream})
                texts.append(answer.text)
        await hooks.record(3)
    assert "one" in texts[0] and "two" in texts[1] and "three" in texts[2]
    assert [r.status for r in hooks.records] == [200, 200, 200]


async def test_calls_that_are_not_model_calls_go_through_unmetered(fake: FakeModelServer) -> None:
    async with serving() as (gateway, url):
        hooks = admit(gateway, fake.url)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            models = await harness.get("/v1/models")
            head = await harness.head("/")
        await hooks.record(2)
    assert models.status_code == 200 and models.json()["data"] and head.status_code == 200
    assert [(c.api, c.method, c.usage_expected) for c in hooks.calls] == [(None, "GET", False), (None, "HEAD", False)]
    assert [(r.method, r.path) for r in fake.requests] == [("GET", "/v1/models"), ("HEAD", "/")]


async def test_a_route_never_shows_its_key_and_refuses_one_a_header_cannot_carry() -> None:
    route = Route("https://api.anthropic.com/", "x-api-key", KEY)
    assert KEY not in repr(route) and route.upstream == "https://api.anthropic.com"
    with pytest.raises(ValueError, match="printable") as refused:
        Route("https://api.anthropic.com", "bearer", "sk-abc\r\nx-evil: 1")
    assert "sk-abc" not in str(refused.value)
    for upstream in ("ftp://x", "https://", "https://h/p?q=1", "api.anthropic.com"):
        with pytest.raises(ValueError, match="upstream"):
            Route(upstream, "none", "")
    with pytest.raises(ValueError, match="16 characters"):
        Gateway(SystemClock()).admit("short", Route("http://h", "none", ""), None)  # type: ignore[arg-type]
