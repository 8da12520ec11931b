"""The gateway's side toward the providers (agentd/gateway/upstream.py): connections kept alive and reused,
never one the provider closed or marked for closing, and TLS that trusts only what it is told to trust.
Real sockets on 127.0.0.1; the TLS server's certificate is made here with openssl."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakemodel import FakeModelServer, Reply
from gatewayrig import KEY, TOKEN, RawUpstream, Recorder, Tap, admit, client, serving
from support import missing

from agentd.clock import SystemClock
from agentd.gateway.calls import Route
from agentd.gateway.server import Gateway
from agentd.gateway.upstream import Upstream, origin_of

pytestmark = pytest.mark.asyncio

WHOLE = {"model": "m", "stream": False}


@pytest.fixture
def fake() -> Iterator[FakeModelServer]:
    with FakeModelServer(default=Reply("again")) as server:
        yield server


async def test_a_kept_alive_connection_carries_the_next_call(fake: FakeModelServer) -> None:
    tap = Tap(fake.port)
    async with tap as upstream, serving() as (gateway, url):
        admit(gateway, upstream)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            for _ in range(3):
                assert (await harness.post("/v1/messages", json=WHOLE)).status_code == 200
    assert len(tap.answers) == 1 and len(fake.requests) == 3


async def test_a_connection_the_answer_closes_or_left_idle_too_long_is_not_reused(fake: FakeModelServer) -> None:
    tap = Tap(fake.port)
    async with tap as upstream, serving(Gateway(SystemClock(), upstream=Upstream(idle_s=0))) as (gateway, url):
        admit(gateway, upstream)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            for body in ({"model": "m", "stream": True}, WHOLE, WHOLE):  # the fake closes after a stream
                assert (await harness.post("/v1/messages", json=body)).status_code == 200
    assert len(tap.answers) == 3


async def test_a_connection_the_provider_closed_while_idle_is_dropped_not_used() -> None:
    async def answer_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
        await writer.drain()  # kept alive, as far as the head says; then closed all the same

    up = RawUpstream(answer_then_close)
    async with up as upstream, serving() as (gateway, url):
        hooks = admit(gateway, upstream)
        async with client(url, **{"x-api-key": TOKEN}) as harness:
            answers = [await harness.post("/v1/messages", json=WHOLE) for _ in range(2)]
        await hooks.record(2)
    assert [a.status_code for a in answers] == [200, 200] and up.requests == 2
    assert [r.error for r in hooks.records] == [None, None]


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (and its key), made with openssl."""
    if shutil.which("openssl") is None:
        missing("OPENSSL", "openssl is not installed: the gateway's TLS tests make their certificate with it")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


async def tls_upstream(certificate: tuple[Path, Path]) -> tuple[asyncio.Server, str]:
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(*certificate)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        body = b'{"type": "message", "model": "m", "usage": {"input_tokens": 4, "output_tokens": 2}}'
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=served)
    return server, f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def call_over_tls(certificate: tuple[Path, Path], made: Gateway | None) -> tuple[Any, Any]:
    """One call through `made` (or a gateway with the system's trust) to an upstream serving `certificate`."""
    server, origin = await tls_upstream(certificate)
    try:
        async with serving(made) as (gateway, url):
            hooks = Recorder()
            gateway.admit(TOKEN, Route(origin, "x-api-key", KEY), hooks)
            async with client(url, **{"x-api-key": TOKEN}) as harness:
                answer = await harness.post("/v1/messages", json=WHOLE)
            return answer, await hooks.record()
    finally:
        server.close()


async def test_an_https_upstream_is_reached_over_tls_it_trusts(certificate: tuple[Path, Path]) -> None:
    trusted = ssl.create_default_context(cafile=str(certificate[0]))
    answer, record = await call_over_tls(certificate, Gateway(SystemClock(), upstream=Upstream(tls=trusted)))
    assert answer.status_code == 200 and record.metered.usage.input_tokens == 4


async def test_an_https_upstream_whose_certificate_is_not_trusted_is_never_sent_the_call(
    certificate: tuple[Path, Path],
) -> None:
    answer, record = await call_over_tls(certificate, None)  # the system's trust: it never heard of this certificate
    assert answer.status_code == 502 and record.error is not None
    assert "could not connect (SSLCertVerificationError" in record.error


async def test_an_origin_names_its_host_header_and_base_path() -> None:
    assert origin_of("https://api.anthropic.com") == origin_of("https://api.anthropic.com:443")
    found = origin_of("http://[::1]:8080/api")
    assert (found.host, found.port, found.host_header, found.base_path) == ("::1", 8080, b"[::1]:8080", "/api")
    assert origin_of("http://127.0.0.1:80/").host_header == b"127.0.0.1"
