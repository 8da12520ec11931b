"""The console's boundary with an agent's attempts, as deployed (docs/web.md, "Who may connect"): `agentd
web` runs as the services' user with the units' capabilities (tests/privsep.py makes the users), the
operator is root, and an attempt is a process of the run user. Whatever the run user does with its
sockets, it is never answered, it never acts, and it never costs the operator a failed login."""

from __future__ import annotations

import json
import os
import pwd
import re
import socket
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from queue import Queue

import privsep
import pytest
from test_entry_points import line_reader
from webrig import Client

pytestmark = [pytest.mark.process, pytest.mark.timeout(180)]
URL = re.compile(r"console and API at (http://127\.0\.0\.1:([0-9]+)/)")
FLOOD = 150  # connections per flood, as issue 38 tried it
MADE_UP = "0123456789ab." + "A" * 43


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


@contextmanager
def console_of(agent: privsep.PrivAgent) -> Iterator[tuple[str, int]]:
    """`agentd web` as the services' user (the units' capabilities), on a port the OS picks: (url, port)."""
    argv = agent.service_argv("web", "--listen", "127.0.0.1:0", delegated=False)
    with subprocess.Popen(argv, env=agent.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as web:
        try:
            lines: Queue[str] = line_reader(web.stdout)
            seen = ""
            while (found := URL.search(seen)) is None:
                seen = lines.get(timeout=60)
                assert "Traceback" not in seen, seen
            yield found.group(1), int(found.group(2))
        finally:
            web.terminate()
            web.wait(timeout=30)


def flood_as(user: str, port: int, request: bytes, count: int = FLOOD) -> None:
    """`count` connections from a child running as `user`, each sending `request` and closing at once,
    before any answer (what an attempt can do: the console then looks at a socket that is gone)."""
    account = pwd.getpwnam(user)
    pid = os.fork()
    if pid == 0:  # the child: sockets only, then _exit
        code = 1
        try:
            os.setgroups([])
            os.setgid(account.pw_gid)
            os.setuid(account.pw_uid)
            for _ in range(count):
                with socket.socket() as conn:  # no name lookup: the run user cannot import this venv's codecs
                    conn.connect(("127.0.0.1", port))
                    conn.sendall(request)
            code = 0
        except BaseException as exc:  # the child says why, then exits
            os.write(2, f"flood_as: {exc!r}\n".encode())
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def request(method: str, path: str, port: int, token: str, body: bytes = b"") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
    return (head + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


@pytest.mark.deep
def test_an_attempt_closing_its_connections_early_neither_locks_the_operator_out_nor_acts() -> None:
    """Issue 38: as the run user, 150 connections each sending a made-up token and closing got root's next
    request a 429 (the console looked the peer up per request, after the close, and the kernel reported
    the orphaned socket as uid 0); with a valid token the same trick paused dispatch."""
    privsep.require()
    with privsep.priv_agent() as agent:
        ok(agent.as_service("init"))
        operator = json.loads(ok(agent.as_operator("web", "token", "add", "root", "--json")))["token"]
        stolen = json.loads(ok(agent.as_operator("web", "token", "add", "leaked", "--json")))["token"]
        with console_of(agent) as (url, port):
            for _ in range(2):
                flood_as(agent.run, port, request("GET", "/api/status", port, MADE_UP))
                answer = Client(url, operator).get("/api/status")
                assert answer.status == 200, (answer.status, answer.text)
            flood_as(agent.run, port, request("POST", "/api/pause", port, stolen, b'{"reason": "from an attempt"}'))
            task = b'{"task_type": "example", "payload": {}}'
            flood_as(agent.run, port, request("POST", "/api/tasks", port, stolen, task))
            assert Client(url, operator).get("/api/status").status == 200
        events = [json.loads(line) for line in ok(agent.as_operator("events", "--json")).splitlines()]
        acted = [e["type"] for e in events if e["type"] in ("dispatch_paused", "task_enqueued")]
        assert acted == [], Counter(acted)
