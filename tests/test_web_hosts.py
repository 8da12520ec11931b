"""The console answers only to the hosts it is: an IP address, localhost, or a name in `[web] host_names`
(docs/web.md, "Its host"). A page of another site whose DNS name it points at 127.0.0.1 (DNS rebinding)
is the browser's own origin to the browser, and reaches the console with its own name in the Host header:
it must get nothing, not the login form, not a counted failed login that locks the operator out."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rig import Rig
from support import port_of
from test_web_console import csrf_of
from webrig import Client, WebRig, serving

from agentd.errors import ConfigError
from agentd.web.app import answers_to
from agentd.work.validation import load_config

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def web(rig_factory) -> Iterator[WebRig]:  # type: ignore[no-untyped-def]
    rig: Rig = rig_factory(lambda c: c.setdefault("web", {}).update(host_names=["Console.Example.ORG."]))
    with serving(rig) as served:
        yield served


def test_another_sites_host_gets_nothing_and_costs_the_operator_no_login(web: WebRig) -> None:
    port, alice = port_of(web), web.client("alice")
    foreign = Client(web.url)
    for host in (f"rebind.example:{port}", "rebind.example", f"127.0.0.1.rebind.example:{port}", "localhost.example"):
        for method, path in [("GET", "/login"), ("GET", "/"), ("GET", "/static/console.js"), ("GET", "/api/status")]:
            answer = foreign.request(method, path, headers={"Host": host})
            assert answer.status == 400, (host, path, answer.status)
            assert answer.error_at() == "header.host" and host.split(":")[0] in answer.json()["error"]["what"]
            assert answer.headers["x-frame-options"] == "DENY", "a refusal carries the security headers too"
        # with the operator's own token, or guesses at one: refused before the token is looked at
        assert alice.request("GET", "/api/status", headers={"Host": host}).status == 400
        for _ in range(web.rig.config.web.login_failures + 1):
            guess = foreign.request("POST", "/login", b"csrf=x&token=y", {"Host": host})
            assert guess.status == 400
    assert alice.get("/api/status").status == 200, "no failed login was counted against 127.0.0.1"


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:{port}", "127.0.0.1", "localhost:{port}", "LOCALHOST", "localhost.", "agent.localhost:{port}",
     "[::1]:{port}", "[::1]", "10.1.2.3:{port}", "console.example.org", "CONSOLE.example.org.:{port}"],
)  # fmt: skip
def test_its_own_hosts_are_answered(web: WebRig, host: str) -> None:
    alice = web.client("alice")
    answer = alice.request("GET", "/api/status", headers={"Host": host.format(port=port_of(web))})
    assert answer.status == 200, answer.body
    browser = Client(web.url)
    form = browser.request("GET", "/login", headers={"Host": host.format(port=port_of(web))})
    assert form.status == 200 and csrf_of(form.text)


def status_of(port: int, *hosts: bytes) -> bytes:
    """The status of GET /login sent over a raw socket with these Host lines (any bytes, any number)."""
    lines = b"".join(b"Host: " + host + b"\r\n" for host in hosts)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
        conn.sendall(b"GET /login HTTP/1.1\r\n" + lines + b"Connection: close\r\n\r\n")
        reply = b""
        while chunk := conn.recv(65536):
            reply += chunk
    return reply.split(b" ", 2)[1]


@pytest.mark.parametrize(
    "host", ["", "[::1", "[::1]x", "[::1]:x", "127.0.0.1:", "127.0.0.1:-1", "127.0.0.1:１２", "a b", "ｌocalhost"]
)
def test_a_malformed_host_is_refused(web: WebRig, host: str) -> None:
    assert status_of(port_of(web), host.encode()) == b"400", host


def test_two_host_headers_are_refused(web: WebRig) -> None:
    port = port_of(web)
    assert status_of(port, f"127.0.0.1:{port}".encode()) == b"200", "the control: one of its own"
    assert status_of(port, f"127.0.0.1:{port}".encode(), b"rebind.example") == b"400"


@given(st.ip_addresses(), st.integers(0, 65535))
def test_any_ip_address_with_any_port_is_its_own(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int
) -> None:
    literal = f"[{address}]" if address.version == 6 else str(address)
    assert answers_to(f"{literal}:{port}", frozenset())
    assert answers_to(literal, frozenset())


NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,20}){0,3}", fullmatch=True)


@given(NAMES, st.integers(0, 65535))
def test_a_name_is_answered_only_if_it_is_localhost_or_listed(name: str, port: int) -> None:
    own = name == "localhost" or name.endswith(".localhost")
    assert answers_to(f"{name}:{port}", frozenset()) is own
    assert answers_to(f"{name.upper()}:{port}", frozenset({name}))
    assert answers_to(f"{name}.:{port}", frozenset({name}))
    assert answers_to(f"x{name}", frozenset({name})) is (own or f"x{name}".endswith(".localhost"))


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("http://console.example.org", "expected a DNS name"), ("console.example.org:443", "expected a DNS name"),
     ("a b", "expected a DNS name"), ("10.1.2.3", "expected a DNS name"), ("", "expected a DNS name"),
     ("\u212aelvin.example", "expected a DNS name")],
)  # fmt: skip
def test_host_names_are_dns_names(value: str, fragment: str, tmp_path: Path) -> None:
    from support import agent_config

    path = agent_config(tmp_path, lambda c: c.setdefault("web", {}).update(host_names=[value]))
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    assert fragment in str(refused.value) and "host_names" in str(refused.value)


def test_the_name_web_listen_gives_is_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A console told to listen on a name (beyond loopback, behind a proxy) is asked for by that name."""
    from support import agent_config

    monkeypatch.delenv("AGENTD_WEB__LISTEN")  # the suite's own override: the file's listen is the point
    from agentd.web.app import own_names

    def listen_on(name: str) -> Path:
        web = {"listen": f"{name}:9578", "beyond_loopback": True, "host_names": ["proxy.example.org"]}
        return agent_config(tmp_path / name, lambda raw: raw.update(web=web))

    assert own_names(load_config(listen_on("Console.Internal"))) == {"console.internal", "proxy.example.org"}
    assert own_names(load_config(listen_on("10.0.0.5"))) == {"proxy.example.org"}


@given(st.text(max_size=80))
def test_any_host_header_is_judged_without_raising_and_no_name_with_a_dot_slips_in(host: str) -> None:
    """Whatever a client sends as Host, the check answers; text holding a letter outside the listed
    names, localhost and IP literals is never its own (no suffix, prefix or case trick)."""
    allowed = answers_to(host, frozenset({"console.example.org"}))
    bare = host.rpartition(":")[0] if ":" in host and not host.startswith("[") else host
    named = bare.rstrip(".").lower()
    if allowed and any(c.isalpha() for c in named) and not named.startswith("["):
        assert named in ("console.example.org", "localhost") or named.endswith(".localhost"), host
