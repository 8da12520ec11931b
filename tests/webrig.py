"""The console under test: a migrated agent (tests/rig.py) and `agentd web` serving it on 127.0.0.1 port 0
in a thread of its own (an anyio portal), and a small HTTP client that speaks to it over a real socket."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

from anyio.from_thread import start_blocking_portal
from rig import Rig

from agentd.clock import FakeClock
from agentd.store import AsyncStore, open_store
from agentd.web.auth import new_token
from agentd.web.service import WebService


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    set_cookies: list[str] = field(default_factory=list)  # every Set-Cookie (headers keeps only the last)

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()

    def error_at(self) -> str:
        """Where a JSON error says the problem is."""
        return str(self.json()["error"]["where"])


@dataclass
class Client:
    """HTTP/1.1 to the service; a token (Authorization: Bearer) and cookies if it has them."""

    base: str
    token: str | None = None
    cookies: dict[str, str] = field(default_factory=dict)

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> Answer:
        parts = urlsplit(self.base)
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=20)
        sent = dict(headers or {})
        if self.token is not None and "authorization" not in {k.lower() for k in sent}:
            sent["Authorization"] = f"Bearer {self.token}"
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        try:
            conn.request(method, path, body=body, headers=sent)
            reply = conn.getresponse()
            found = reply.getheaders()
            cookies = [v for k, v in found if k.lower() == "set-cookie"]
            answer = Answer(reply.status, {k.lower(): v for k, v in found}, reply.read(), cookies)
        finally:
            conn.close()
        for name, value in reply.getheaders():
            if name.lower() == "set-cookie":
                key, _, rest = value.partition("=")
                self.cookies[key] = rest.split(";", 1)[0]
        return answer

    def get(self, path: str, **query: Any) -> Answer:
        return self.request("GET", path + (f"?{urlencode(query, doseq=True)}" if query else ""))

    def post(
        self, path: str, body: Any = None, *, raw: bytes | None = None, content_type: str = "application/json"
    ) -> Answer:
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        return self.request("POST", path, data, {"Content-Type": content_type})

    def form(self, path: str, fields: dict[str, str]) -> Answer:
        return self.request(
            "POST", path, urlencode(fields).encode(), {"Content-Type": "application/x-www-form-urlencoded"}
        )


class WebRig:
    """A Rig plus the web service; `token(name)` issues an operator's token through the store's own verb."""

    def __init__(self, rig: Rig, service: WebService) -> None:
        self.rig, self.service = rig, service

    @property
    def url(self) -> str:
        return self.service.url

    def token(self, name: str = "alice") -> str:
        token_id, hashed, whole = new_token()
        self.rig.store.add_web_token(token_id, name, hashed, "test", self.rig.clock.now(), replace=True)
        return whole

    def client(self, name: str | None = "alice") -> Client:
        return Client(self.url, self.token(name) if name else None)


@contextmanager
def serving(
    rig: Rig,
    clock: FakeClock | None = None,
    *,
    listen: str = "127.0.0.1:0",
    run_users: Callable[[], Iterable[tuple[str | None, str]]] = tuple,
) -> Iterator[WebRig]:
    """The web service on its own connection, listening on `listen`, stopped (and joined) at the end."""
    db = AsyncStore(open_store(rig.config.db_path, rig.clock))
    service = WebService(rig.config, db, clock=clock or rig.clock, listen=listen, run_users=run_users)
    service_poll(service)
    try:
        with start_blocking_portal() as portal:
            done = portal.start_task_soon(service.run)
            if not service.ready.wait(20):
                raise AssertionError("the web service did not start listening within 20 s")
            try:
                yield WebRig(rig, service)
            finally:
                portal.call(service.request_stop)
                done.result(timeout=20)
    finally:
        db.close()


def service_poll(service: WebService) -> None:
    """Streams poll the database often in tests, so an appended event shows within a few ms."""
    service.stream_poll_s = 0.02
    service.handoff_poll_s = 0.02
