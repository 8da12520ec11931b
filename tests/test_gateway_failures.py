"""The gateway when things go wrong (agentd/gateway/server.py; docs/gateway.md): a hook cuts a stream, the
upstream is down, silent or breaks off, the harness goes away, the token is revoked mid-call, a request is
too big or not HTTP, and 200 streams at once. Each ends with a record, no task left running, and the key
in no log line, error or record."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterator

import httpx
import pytest
from fakemodel import FakeModelServer, Hang, Reply
from gatewayrig import KEY, TOKEN, RawUpstream, Recorder, admit, client, serving, stall_after_one_event

from agentd.clock import SystemClock
from agentd.gateway.calls import GO, CallRecord, CallRequest, Route, Verdict
from agentd.gateway.server import Gateway
from agentd.gateway.upstream import Upstream

pytestmark = pytest.mark.asyncio

STREAM = {"model": "claude-sonnet-4-5", "stream": True, "max_tokens": 100}
LONG = Reply("word " * 2000, output_tokens=2000)


@pytest.fixture
def fake() -> Iterator[FakeModelServer]:
    with FakeModelServer(chunk_size=5) as server:
        yield server


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_hook_cuts_a_stream_that_passes_its_cap(fake: FakeModelServer) -> None:
    fake.script(LONG)
    async with serving() as (gateway, url):
        hooks = admit(gateway, fake.url, cut_at=300)
        received = bytearray()
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            with pytest.raises(httpx.RemoteProtocolError):
                async with harness.stream("POST", "/v1/messages", json=STREAM) as answer:
                    assert answer.status_code == 200
                    async for piece in answer.aiter_raw():
                        received += piece
        record = await hooks.record()
    assert b"message_start" in received and b"message_stop" not in received
    assert record.cut and record.status == 200 and record.error is not None and "cut" in record.error
    assert hooks.estimates[-1] >= 300 and all(n < 300 for n in hooks.estimates[:-1])
    assert record.response.size < len("word " * 2000)


async def test_an_upstream_that_is_down_gives_a_502_and_a_record(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with serving() as (gateway, url):
        hooks = admit(gateway, f"http://127.0.0.1:{closed_port()}", "bearer")
        async with client(url, authorization=f"Bearer {TOKEN}") as harness:
            answer = await harness.post("/v1/responses", json={"model": "m", "stream": True})
        record = await hooks.record()
    assert (
        answer.status_code == 502 and "could not connect (ConnectionRefusedError" in answer.json()["error"]["message"]
    )
    assert (record.status, record.forwarded, record.cut) == (502, True, False)
    assert record.error is not None and "could not connect" in record.error
    assert "gateway_upstream_failed" in caplog.text
    assert KEY not in caplog.text + repr(record) + answer.text and TOKEN not in caplog.text


async def test_an_upstream_that_never_answers_gives_a_502_at_the_read_timeout(fake: FakeModelServer) -> None:
    fake.script(Hang())
    gateway = Gateway(SystemClock(), upstream=Upstream(read_s=0.3))
    async with serving(gateway) as (gateway, url):
        hooks = admit(gateway, fake.url)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            answer = await harness.post("/v1/messages", json=STREAM)
        record = await hooks.record()
    assert answer.status_code == 502 and record.status == 502
    assert record.error is not None and "no answer within the read timeout" in record.error


async def test_an_answer_s_head_reaches_the_harness_before_its_first_piece_does() -> None:
    release = asyncio.Event()

    async def head_then_think(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        await writer.drain()
        await release.wait()  # a model thinking before its first token
        writer.write(b'10\r\ndata: {"a": 1}\n\n\r\n0\r\n\r\n')
        await writer.drain()

    async with RawUpstream(head_then_think) as upstream, serving() as (gateway, url):
        admit(gateway, upstream)
        async with (
            client(url, **{"x-api-key": TOKEN}) as harness,
            asyncio.timeout(5),
            harness.stream("POST", "/v1/messages", json=STREAM) as answer,
        ):
            assert answer.status_code == 200  # the head came while the upstream still thinks
            release.set()
            assert await answer.aread() == b'data: {"a": 1}\n\n'


async def test_an_upstream_that_breaks_off_mid_stream_cuts_the_answer_and_says_so() -> None:
    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        writer.write(b'10\r\ndata: {"a": 1}\n\n\r\n')
        await writer.drain()  # and then the connection closes, the stream unended

    async with RawUpstream(half) as upstream, serving() as (gateway, url):
        hooks = admit(gateway, upstream)
        for _ in range(2):  # the gateway goes on serving after one call's upstream broke off
            async with client(url, **{"x-api-key": TOKEN}) as harness:
                with pytest.raises(httpx.RemoteProtocolError):
                    await harness.post("/v1/messages", json=STREAM)
        record = await hooks.record(2)
    assert record.status == 200 and record.cut and record.response.size == 16
    assert record.error == (
        "the upstream failed mid-answer: the answer broke HTTP/1.1 "
        "(peer closed connection without sending complete message body (incomplete chunked read))"
    )


def gateway_tasks() -> dict[asyncio.Task[object], str]:
    """The tasks running the gateway's code (its serve loop, its connections, their watchers), by name."""
    found = {}
    for task in asyncio.all_tasks():
        code = getattr(task.get_coro(), "cr_code", None)
        if task.get_name().startswith("agentd.gateway."):  # anyio names its tasks by their function
            found[task] = ".".join(task.get_name().rsplit(".", 2)[-2:])
        elif code is not None and "agentd/gateway" in code.co_filename:
            found[task] = code.co_qualname
    return found


async def test_a_harness_that_goes_away_mid_stream_closes_the_upstream_request_and_leaves_no_task() -> None:
    up = RawUpstream(lambda reader, writer: stall_after_one_event(reader, writer, up))
    async with up as upstream, serving() as (gateway, url):
        hooks = admit(gateway, upstream)
        async with (
            client(url, **{"x-api-key": TOKEN}) as harness,
            harness.stream("POST", "/v1/messages", json=STREAM) as answer,
        ):
            async for piece in answer.aiter_raw():
                assert b"ping" in piece
                running = {task for task, name in gateway_tasks().items() if name != "Gateway.serve"}
                assert sorted(gateway_tasks().values()) == ["Gateway._connection", "Gateway._watch", "Gateway.serve"]
                break  # and the harness closes its connection
        record = await hooks.record()
        assert gateway.calls_open == 0
        async with asyncio.timeout(5):
            await up.closed.wait()  # the gateway closed its request to the upstream
        await asyncio.wait(running, timeout=5)
        assert all(task.done() for task in running)
        assert list(gateway_tasks().values()) == ["Gateway.serve"]
    assert record.error == "the harness closed its connection before the answer ended"
    assert record.status == 200 and not record.cut
    assert gateway_tasks() == {}


async def test_a_harness_that_goes_away_while_the_hook_waits_is_never_forwarded(fake: FakeModelServer) -> None:
    class Waiting(Recorder):
        async def before(self, call: CallRequest) -> Verdict:
            self.calls.append(call)
            await asyncio.Event().wait()  # a person who never decides
            raise AssertionError("unreachable")

    async with serving() as (gateway, url):
        hooks = Waiting()
        gateway.admit(TOKEN, Route(fake.url, "x-api-key", KEY), hooks)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            with pytest.raises(httpx.ReadTimeout):
                await harness.post("/v1/messages", json=STREAM, timeout=0.3)
        record = await hooks.record()
    assert gateway.calls_open == 0
    assert fake.requests == [] and not record.forwarded and record.status is None
    assert record.error == "the harness closed its connection before the answer ended"


async def test_a_call_waits_for_as_long_as_its_hook_decides(fake: FakeModelServer) -> None:
    asked_a_person, decided = asyncio.Event(), asyncio.Event()

    class Deciding(Recorder):
        async def before(self, call: CallRequest) -> Verdict:
            asked_a_person.set()
            await decided.wait()  # a person, deciding
            return GO

    fake.script(Reply("after the decision"))
    async with serving() as (gateway, url):
        hooks = Deciding()
        gateway.admit(TOKEN, Route(fake.url, "x-api-key", KEY), hooks)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            asked = asyncio.create_task(harness.post("/v1/messages", json=STREAM))
            async with asyncio.timeout(5):
                await asked_a_person.wait()
            assert fake.requests == [] and not asked.done()
            decided.set()
            answer = await asked
    assert answer.status_code == 200 and "after the decision" in answer.text


async def test_hooks_that_fail_while_a_stream_runs_or_after_it_cut_or_are_logged(
    fake: FakeModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    class Failing(Recorder):
        def on_progress(self, call: CallRequest, output_tokens: int) -> bool:
            raise RuntimeError("the budget's arithmetic failed")

        async def after(self, record: CallRecord) -> None:
            await super().after(record)
            raise RuntimeError("the event log is full")

    fake.script(LONG, Reply("next"))
    async with serving() as (gateway, url):
        hooks = Failing()
        gateway.admit(TOKEN, Route(fake.url, "x-api-key", KEY), hooks)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            with pytest.raises(httpx.RemoteProtocolError):
                await harness.post("/v1/messages", json=STREAM)
            assert (await harness.post("/v1/messages", json={"model": "m"})).status_code == 200
        record = await hooks.record()
    assert record.cut and record.error == "cut: the output passed what the caller allows"
    assert "gateway_hook_failed hook=on_progress" in caplog.text and "gateway_hook_failed hook=after" in caplog.text


async def test_revoking_a_token_cuts_its_call_under_way() -> None:
    up = RawUpstream(lambda reader, writer: stall_after_one_event(reader, writer, up))
    async with up as upstream, serving() as (gateway, url):
        hooks = admit(gateway, upstream)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            with pytest.raises(httpx.RemoteProtocolError):
                async with harness.stream("POST", "/v1/messages", json=STREAM) as answer:
                    async for _ in answer.aiter_raw():
                        gateway.revoke(TOKEN)
        record = await hooks.record()
        async with asyncio.timeout(5):
            await up.closed.wait()
    assert record.cut and record.error == "the token was revoked while the call was under way"


async def test_a_failure_inside_one_connection_ends_that_connection_only(
    fake: FakeModelServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake.script(Reply("still serving"))
    async with serving() as (gateway, url):
        hooks = admit(gateway, fake.url, verdict="not a verdict")  # a caller's bug: `before` answers nonsense
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            with pytest.raises(httpx.RemoteProtocolError):
                await harness.post("/v1/messages", json=STREAM)
        record = await hooks.record()
        hooks.verdict = GO
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            answer = await harness.post("/v1/messages", json=STREAM)
    assert record.error is not None and record.error.startswith("the gateway failed: AttributeError") and record.cut
    assert "gateway_connection_failed" in caplog.text
    assert answer.status_code == 200 and "still serving" in answer.text and len(fake.requests) == 1


async def test_a_connection_idle_too_long_is_closed_quietly(caplog: pytest.LogCaptureFixture) -> None:
    async with serving(Gateway(SystemClock(), idle_s=0.2)) as (_, url):
        reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
        async with asyncio.timeout(5):
            assert await reader.read() == b""  # closed by the gateway, nothing said
        writer.close()
    assert "gateway_connection_failed" not in caplog.text


async def test_a_request_too_big_is_refused_413(fake: FakeModelServer) -> None:
    async with serving(Gateway(SystemClock(), max_request_bytes=1000)) as (gateway, url):
        admit(gateway, fake.url)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            answer = await harness.post("/v1/messages", content=b"{" + b" " * 2000 + b"}")
    assert answer.status_code == 413 and fake.requests == []


async def test_what_is_not_http_gets_a_400_and_the_connection_closed(fake: FakeModelServer) -> None:
    async with serving() as (gateway, url):
        admit(gateway, fake.url)
        reader, writer = await asyncio.open_connection("127.0.0.1", int(url.rsplit(":", 1)[1]))
        writer.write(b"HELLO THERE\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 5)
        writer.close()
    assert answer.startswith(b"HTTP/1.1 400 ") and fake.requests == []


async def test_two_hundred_streams_at_once_all_complete(fake: FakeModelServer) -> None:
    fake.default = Reply("a short answer for each of them", input_tokens=3, output_tokens=5)
    async with serving() as (gateway, url):
        hooks = admit(gateway, fake.url)
        limits = httpx.Limits(max_connections=None)
        async with httpx.AsyncClient(base_url=url, headers={"x-api-key": TOKEN}, limits=limits, timeout=30) as harness:

            async def one() -> bytes:
                return (await harness.post("/v1/messages", json=STREAM)).content

            answers = await asyncio.gather(*(one() for _ in range(200)))
        await hooks.record(200, within_s=30)
    assert all(b"event: message_stop" in answer for answer in answers)
    assert {(r.status, r.metered.usage.output_tokens, r.cut) for r in hooks.records} == {(200, 5, False)}
    assert len(fake.requests) == 200
