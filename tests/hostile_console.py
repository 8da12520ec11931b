"""A hostile console client for the chaos harness (tests/chaos.py, issue 38): beside the run, as the agent's
run user (what an attempt is), floods of connections to `agentd web`, each sending a request and closing
before its answer: made-up tokens (to lock the operator out), and a stolen valid token's `POST /api/pause`
and `POST /api/tasks` (to act as the operator). After each flood the operator (root) asks with its own
token and must be answered. What succeeded is listed by `problems`: 0 is the only passing count."""

from __future__ import annotations

import http.client
import json
import os
import pwd
import random
import socket
import sqlite3
from contextlib import closing
from pathlib import Path

MADE_UP = "0123456789ab." + "A" * 43
KINDS = ("made-up token", "stolen token: pause", "stolen token: add a task")


class HostileConsoleClient:
    """Floods as `run_user` against the console at `port`; `operator` is root's token, `stolen` a valid
    token of the operator `leaked` that the run user somehow holds."""

    def __init__(self, run_user: str, port: int, operator: str, stolen: str) -> None:
        self.account = pwd.getpwnam(run_user)
        self.port, self.operator, self.stolen = port, operator, stolen
        self.sent = 0
        self.seen: list[str] = []  # what went wrong, as it was seen

    def flood(self, rng: random.Random) -> int:
        """One flood of one kind (20-60 connections), then the operator's probe; the connections sent."""
        kind = rng.choice(KINDS)
        count = rng.randint(20, 60)
        request = self._request(kind)
        if not self._as_run_user(request, count):
            self.seen.append(f"a flood ({kind}) could not be sent as {self.account.pw_name}")
        self.sent += count
        status = self._operator_status()
        if status != 200:
            self.seen.append(f"after a flood ({kind}) the operator's own request got {status}")
        return count

    def problems(self, db_path: Path) -> list[str]:
        """What the run user achieved: the operator refused, or an act done with the stolen token."""
        with closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as conn:
            by_leaked = "json_extract(payload, '$.by') = 'leaked'"
            paused = conn.execute(f"SELECT count(*) FROM events WHERE type = 'dispatch_paused' AND {by_leaked}")
            added = conn.execute("SELECT count(*) FROM tasks WHERE source = 'web:leaked'")
            paused, added = paused.fetchone()[0], added.fetchone()[0]
        acts = [f"{paused} pause(s) by the stolen token"] * bool(paused) + [f"{added} task(s) by it"] * bool(added)
        return self.seen + acts

    def _request(self, kind: str) -> bytes:
        if kind == "made-up token":
            return self._head("GET", "/api/status", MADE_UP, b"")
        if kind == "stolen token: pause":
            return self._head("POST", "/api/pause", self.stolen, b'{"reason": "an attempt"}')
        return self._head("POST", "/api/tasks", self.stolen, b'{"task_type": "example", "payload": {}}')

    def _head(self, method: str, path: str, token: str, body: bytes) -> bytes:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nAuthorization: Bearer {token}\r\n"
        return (head + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body

    def _as_run_user(self, request: bytes, count: int) -> bool:
        """A forked child as the run user: `count` connections, each sent `request` and closed at once."""
        pid = os.fork()
        if pid == 0:  # sockets only, no name lookup (the run user cannot import this venv's codecs), then _exit
            code = 1
            try:
                os.setgroups([])
                os.setgid(self.account.pw_gid)
                os.setuid(self.account.pw_uid)
                for _ in range(count):
                    with socket.socket() as conn:
                        conn.connect(("127.0.0.1", self.port))
                        conn.sendall(request)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status) == 0

    def _operator_status(self) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", "/api/status", headers={"Authorization": f"Bearer {self.operator}"})
            answer = conn.getresponse()
            json.loads(answer.read() or b"{}")
            return answer.status
        except OSError as exc:
            self.seen.append(f"the operator's probe failed: {exc!r}")
            return 0
        finally:
            conn.close()
