"""The model gateway's rows (issue 51): what a call pays for going through agentd/gateway instead of straight to
its provider, and what 200 held streams cost the gateway's memory.

Three processes, so no measurement shares a GIL with what it measures: the loopback fake model
(tests/fakemodel), a gateway in front of it (the one the dispatcher runs: `Gateway` with hooks that let
every call through), and this process, the harness, with plain `http.client` connections. A non-streaming
call (`POST /v1/messages`, `"stream": false`, on a kept-alive connection) and a streaming call's first body
byte (a new connection each, as the fake closes a stream's) are timed straight to the fake and through the
gateway, one after the other, `calls` times; the overhead is the difference of the two sides' percentiles.
Then `streams` streams are opened through the gateway and held (the fake sends the headers and the first
event, then stalls): the gateway's VmRSS with them open minus before.

    python bench/gateway.py [--calls N] [--streams N]
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOKEN = "bench-gateway-token-0123456789abcdef"
KEY = "sk-bench-provider-key-0123456789"
WARM_UP = 50
REQUEST = json.dumps(
    {"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": [{"role": "user", "content": "hi"}]}
)


@dataclass(frozen=True)
class GatewayNumbers:
    direct_ms: list[float]  # non-streaming calls straight to the fake
    gateway_ms: list[float]  # and through the gateway
    direct_first_byte_ms: list[float]  # a stream's first body byte, straight
    gateway_first_byte_ms: list[float]  # and through the gateway
    streams: int
    rss_before_mb: float
    rss_held_mb: float  # with `streams` streams held open


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile: one of the values taken, never an interpolation."""
    ranked = sorted(values)
    return ranked[max(0, math.ceil(share * len(ranked)) - 1)]


def measure(calls: int, streams: int) -> GatewayNumbers:
    with child("--serve-fake") as fake, child("--serve-gateway", str(fake.port)) as gateway:
        fake_port, gateway_port = fake.port, gateway.port
        direct = http.client.HTTPConnection("127.0.0.1", fake_port)
        through = http.client.HTTPConnection("127.0.0.1", gateway_port)
        for _ in range(WARM_UP):
            whole_call(direct, {})
            whole_call(through, {"x-api-key": TOKEN})
        direct_ms, gateway_ms, direct_first, gateway_first = [], [], [], []
        for n in range(calls):
            sides = [(direct, {}, direct_ms), (through, {"x-api-key": TOKEN}, gateway_ms)]
            for connection, headers, into in sides if n % 2 else reversed(sides):
                into.append(whole_call(connection, headers))
            for port, headers, into in (
                (fake_port, {}, direct_first),
                (gateway_port, {"x-api-key": TOKEN}, gateway_first),
            ):
                into.append(first_byte(port, headers))
        direct.close()
        through.close()
        before = rss_mb(gateway.pid)
        fake.say("hang")
        with held_streams(gateway_port, streams):
            held = rss_mb(gateway.pid)
    return GatewayNumbers(direct_ms, gateway_ms, direct_first, gateway_first, streams, before, held)


def whole_call(connection: http.client.HTTPConnection, headers: dict[str, str]) -> float:
    started = time.perf_counter()
    connection.request(
        "POST", "/v1/messages", body=json.dumps({**json.loads(REQUEST), "stream": False}), headers=headers
    )
    answer = connection.getresponse()
    answer.read()
    assert answer.status == 200, answer.status
    return (time.perf_counter() - started) * 1000


def first_byte(port: int, headers: dict[str, str]) -> float:
    """A new connection, a streaming call, the time to its first body byte; the rest read and closed."""
    connection = http.client.HTTPConnection("127.0.0.1", port)
    started = time.perf_counter()
    connection.request(
        "POST", "/v1/messages", body=json.dumps({**json.loads(REQUEST), "stream": True}), headers=headers
    )
    answer = connection.getresponse()
    answer.read(1)
    elapsed = (time.perf_counter() - started) * 1000
    answer.read()
    connection.close()
    return elapsed


@contextmanager
def held_streams(port: int, count: int) -> Iterator[None]:
    """`count` streams open through the gateway, each past its first event, until the block ends."""
    body = json.dumps({**json.loads(REQUEST), "stream": True}).encode()
    head = (
        f"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\nx-api-key: {TOKEN}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    opened = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port))
            opened.append(sock)
            sock.sendall(head + body)
            seen = b""
            while b"message_start" not in seen:
                piece = sock.recv(65536)
                assert piece, "the gateway closed a held stream"
                seen += piece
        yield
    finally:
        for sock in opened:
            sock.close()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


@dataclass(frozen=True)
class Child:
    process: subprocess.Popen[str]
    port: int

    @property
    def pid(self) -> int:
        return self.process.pid

    def say(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()


@contextmanager
def child(*args: str) -> Iterator[Child]:
    """This script in a process of its own, serving; it prints its port and ends when its stdin does."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    process = subprocess.Popen(
        [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert process.stdout is not None
        yield Child(process, int(process.stdout.readline()))
    finally:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(30)


def serve_fake() -> None:
    from fakemodel import FakeModelServer, Hang, Reply

    answer = Reply("Hello from the fake model, a short answer.", input_tokens=20, output_tokens=9)
    with FakeModelServer(default=answer) as fake:
        print(fake.port, flush=True)
        for line in sys.stdin:  # "hang": the next calls stall after their first event
            fake.default = Hang(after_headers=True) if line.strip() == "hang" else answer


def serve_gateway(fake_port: int) -> None:
    import asyncio
    import threading

    from agentd.clock import SystemClock
    from agentd.gateway.calls import GO, CallRecord, CallRequest, Route, Verdict
    from agentd.gateway.server import Gateway

    class LetThrough:
        async def before(self, call: CallRequest) -> Verdict:
            return GO

        def on_progress(self, call: CallRequest, output_tokens: int) -> bool:
            return True

        async def after(self, record: CallRecord) -> None:
            return None

    async def run() -> None:
        gateway = Gateway(SystemClock())
        gateway.admit(TOKEN, Route(f"http://127.0.0.1:{fake_port}", "x-api-key", KEY), LetThrough())
        listener = socket.create_server(("127.0.0.1", 0))
        print(listener.getsockname()[1], flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)), daemon=True).start()
        serving = asyncio.create_task(gateway.serve(listener))
        await stop.wait()
        serving.cancel()
        await gateway.aclose()

    asyncio.run(run())


def report(numbers: GatewayNumbers) -> list[str]:
    def side(values: list[float]) -> str:
        return f"p50 {percentile(values, 0.5):.3f} ms, p99 {percentile(values, 0.99):.3f} ms"

    overhead = [percentile(numbers.gateway_ms, share) - percentile(numbers.direct_ms, share) for share in (0.5, 0.99)]
    first = percentile(numbers.gateway_first_byte_ms, 0.5) - percentile(numbers.direct_first_byte_ms, 0.5)
    return [
        f"non-streaming call, straight: {side(numbers.direct_ms)}; through the gateway: {side(numbers.gateway_ms)}",
        f"gateway overhead: p50 {overhead[0]:.3f} ms, p99 {overhead[1]:.3f} ms (goals: 1 ms, 5 ms)",
        f"stream's first byte, straight: {side(numbers.direct_first_byte_ms)}; "
        f"through the gateway: {side(numbers.gateway_first_byte_ms)}",
        f"gateway first byte overhead: p50 {first:.3f} ms (goal: 2 ms)",
        f"gateway RSS: {numbers.rss_before_mb:.1f} MB, with {numbers.streams} streams held "
        f"{numbers.rss_held_mb:.1f} MB: +{numbers.rss_held_mb - numbers.rss_before_mb:.1f} MB (goal: 50 MB)",
    ]


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--serve-fake":
        serve_fake()
        return 0
    if len(sys.argv) > 2 and sys.argv[1] == "--serve-gateway":
        serve_gateway(int(sys.argv[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--streams", type=int, default=200)
    args = parser.parse_args()
    for line in report(measure(args.calls, args.streams)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
