"""The dispatcher's side of an attempt in a network of its own, for tests/test_netns.py: it opens a port on the
host's 127.0.0.1 (which the attempt must not reach) and an HTTPS server standing in for an allowed host, starts
tests/netns_probe.py through `run_process` with `ProcessSpec.netns` (a gateway stand-in on 127.0.0.1:8080 inside,
the egress proxy on 127.0.0.1:3128), serves both listeners from its own event loop, and returns what the probe
found, what the gateway stand-in was told and the proxy's records.

Called in the test's own process (as root), or run as a script (`python netns_attempt.py CONFIG`) where the
dispatcher must be another process: as the services' user with the units' capabilities (the attempt as the run
user), or inside a user and network namespace of its own (as tests/harness/isolated.sh runs the harness tests)."""

from __future__ import annotations

import json
import socket
import ssl
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.tls import TLSListener

from agentd.clock import SystemClock
from agentd.gateway.egress import EgressProxy, EgressRecord, parse_allow_list
from agentd.process import containment
from agentd.process.netns import Netns
from agentd.process.privilege import run_user
from agentd.process.runner import ProcessSpec, run_process

PROBE = Path(__file__).with_name("netns_probe.py")
GATEWAY_PORT, PROXY_PORT = 8080, 3128  # inside the attempt's own network: nothing else is there to take them


async def attempt(config: dict[str, Any]) -> dict[str, Any]:
    """One attempt as `config` says (python, workdir, cert, key; user, state_dir, kill_all), and what came of it."""
    host_port = socket.create_server(("127.0.0.1", 0))
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(config["cert"], config["key"])
    https = TLSListener(await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0), tls)
    https_port = https.listener.extra(anyio.abc.SocketAttribute.local_port)
    told: list[str] = []
    records: list[EgressRecord] = []
    proxy = EgressProxy(parse_allow_list([f"localhost:{https_port}"]), records.append, SystemClock())
    with host_port:
        async with https, anyio.create_task_group() as serving:
            serving.start_soon(https.serve, _hello)

            def listening(listeners: tuple[socket.socket, ...]) -> None:
                serving.start_soon(_gateway, listeners[0], told)
                serving.start_soon(proxy.serve, listeners[1])

            probe = {
                "host_port": host_port.getsockname()[1],
                "served_port": GATEWAY_PORT,
                "proxy_port": PROXY_PORT,
                "https_port": https_port,
                "cacert": config["cert"],
                "kill_all": config.get("kill_all", False),
            }
            result = await run_process(_spec(config, probe, Netns((GATEWAY_PORT, PROXY_PORT), listening)))
            serving.cancel_scope.cancel()
    found = _output(config, "probe.out").read_text()
    return {
        "result": result.describe(),
        "stderr": _output(config, "probe.err").read_text()[-2000:],
        "probe": json.loads(found) if result.ok else found,
        "told": told,
        "records": [[r.host, r.port, r.allowed, r.status, r.bytes_up > 0, r.bytes_down > 0] for r in records],
    }


def _spec(config: dict[str, Any], probe: dict[str, Any], netns: Netns) -> ProcessSpec:
    workdir, user = Path(config["workdir"]), run_user(config.get("user"))
    group = containment.attempt_group(Path(config["state_dir"]), "netns") if config.get("state_dir") else None
    return ProcessSpec(
        argv=[config["python"], "-I", str(PROBE), json.dumps(probe)],
        cwd=workdir,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        stdout_path=_output(config, "probe.out"),
        stderr_path=_output(config, "probe.err"),
        timeout_s=120.0,
        kill_grace_s=1.0,
        group=group,
        user=user,
        netns=netns,
    )


def _output(config: dict[str, Any], name: str) -> Path:
    """Where the probe's output goes: `output_dir` (the services' user's own) or its workdir."""
    return Path(config.get("output_dir", config["workdir"]), name)


async def _gateway(listener: socket.socket, told: list[str]) -> None:
    """The model gateway's stand-in: answers each line with `pong:` and the line."""

    async def answer(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            line = b""
            while not line.endswith(b"\n"):
                line += await stream.receive()
            told.append(line.decode().strip())
            await stream.send(b"pong:" + line)

    served = await anyio.abc.SocketListener.from_socket(listener)
    async with served:
        await served.serve(answer)


async def _hello(stream: anyio.abc.ByteStream) -> None:
    """The allowed host: one HTTP answer to whatever it is asked."""
    async with stream:
        try:
            await stream.receive()
            await stream.send(b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\nConnection: close\r\n\r\nhello from host")
        except (anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError, OSError):
            return


def main() -> None:
    config = json.loads(sys.argv[1])
    found = anyio.run(attempt, config)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
