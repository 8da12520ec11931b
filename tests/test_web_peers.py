"""Who may connect to the console (docs/web.md, "Who may connect"). Every client on this machine comes from
127.0.0.1: the operator's browser or SSH tunnel, and the agent's own attempts. The console tells them apart
by the user owning the client's socket (agentd/web/peers.py asks the kernel): a socket of an agent's run
user is refused outright, and failed logins are counted per user, so no other local user's guesses can
lock the operator out.

The other users are real: a forked child switches to a uid of its own (root only; the suite's CI runs as
root, elsewhere these skip with the reason, or fail under AGENTD_REQUIRE_PRIVSEP=1)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rig import Rig
from support import REPO, port_of, wait_until
from webrig import WebRig, serving

from agentd.web.peers import REMOTE, UNKNOWN, PeerBook, PeerSocket, cannot_tell_apart, local_peer_uid

pytestmark = pytest.mark.timeout(60)
NOBODY = 65534  # the account `nobody`: a run user of some agent in these tests
STRANGER = 64999  # a uid with no account: another local user


def needs_root() -> None:
    if os.geteuid() == 0:
        return
    if os.environ.get("AGENTD_REQUIRE_PRIVSEP"):
        pytest.fail("AGENTD_REQUIRE_PRIVSEP is set but the suite is not root: these tests switch users")
    pytest.skip("not root: the tests of who may connect switch a child to other users")


def as_user(uid: int, port: int, requests: list[bytes]) -> list[int]:
    """Each request sent on its own connection by a forked child running as `uid`; their statuses."""
    return [status for status, _ in answers_as(uid, port, requests)]


def answers_as(uid: int, port: int, requests: list[bytes]) -> list[tuple[int, str]]:
    """Each request sent on its own connection by a forked child running as `uid`; each status and body."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only sockets and a pipe, then _exit (nothing of the parent's threads runs)
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            replies = []
            for request in requests:
                with socket.create_connection(("127.0.0.1", port), timeout=20) as conn:
                    conn.sendall(request)
                    reply = b""
                    while chunk := conn.recv(65536):
                        reply += chunk
                replies.append(reply)
            os.write(write_end, b"\0".join(replies))
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        said = pipe.read()
    os.waitpid(pid, 0)
    replies = [reply.decode() for reply in said.split(b"\0")] if said else []
    return [(int(reply.split(" ", 2)[1]), reply.partition("\r\n\r\n")[2]) for reply in replies]


def get(path: str, port: int, token: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{auth}Connection: close\r\n\r\n".encode()


@pytest.mark.parametrize(("family", "host"), [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")])
def test_the_kernel_names_the_owner_of_a_local_clients_socket(family: socket.AddressFamily, host: str) -> None:
    with socket.socket(family) as server:
        server.bind((host, 0))
        server.listen()
        with socket.socket(family) as client:
            client.connect(server.getsockname()[:2])
            accepted, peer = server.accept()
            with accepted:
                assert local_peer_uid(peer[:2], accepted.getsockname()[:2]) == os.geteuid()
                assert local_peer_uid((host, peer[1] ^ 1), accepted.getsockname()[:2]) is None, "no such socket"
    assert local_peer_uid(None, None) is None and local_peer_uid(("not an address", 1), (host, 2)) is None


def test_an_ipv4_client_of_a_dual_stack_server_is_found_too() -> None:
    with socket.socket(socket.AF_INET6) as server:
        server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        server.bind(("::", 0))
        server.listen()
        with socket.create_connection(("127.0.0.1", server.getsockname()[1])):
            accepted, peer = server.accept()
            with accepted:
                assert peer[0] == "::ffff:127.0.0.1"
                assert local_peer_uid(peer[:2], accepted.getsockname()[:2]) == os.geteuid()


def test_another_users_socket_is_that_users() -> None:
    needs_root()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.setgid(STRANGER)
                os.setuid(STRANGER)
                with socket.create_connection(server.getsockname()):
                    os.read(read_end, 1)  # held open until the parent has looked
            finally:
                os._exit(0)
        accepted, peer = server.accept()
        with accepted:
            assert local_peer_uid(peer, accepted.getsockname()) == STRANGER
        os.write(write_end, b"x")
        os.waitpid(pid, 0)


@pytest.fixture
def guarded(rig_factory: Callable[..., Rig], tmp_path: Path) -> Callable[[str], AbstractContextManager[WebRig]]:
    """The console of an agent whose run user (`whose` "run"), whose sensor user ("sensors") or another
    installed agent's run user ("other") is `nobody`."""
    needs_root()

    def make(whose: str) -> AbstractContextManager[WebRig]:
        def own_user(raw: dict[str, Any]) -> None:
            if whose == "sensors":
                raw.setdefault("sensors", {})["run_as"] = "nobody"
                return
            raw["dispatch"]["run_as"] = "nobody"
            raw["paths"]["run_dir"] = str(tmp_path / "runs")  # outside the state dir, as the boundary asks

        if whose == "other":
            return serving(rig_factory(), run_users=lambda: [("nobody", "/etc/agentd/other.toml's run user")])
        return serving(rig_factory(own_user))

    return make


WHOSE = {
    "run": "this agent's run user",
    "sensors": "this agent's sensor user",
    "other": "/etc/agentd/other.toml's run user",
}


@pytest.mark.parametrize("whose", list(WHOSE))
def test_a_run_or_sensor_users_socket_is_refused_whatever_it_asks(
    guarded: Callable[[str], AbstractContextManager[WebRig]], whose: str
) -> None:
    """An attempt (or a sensor) reached the login form and the API like any local client, its token
    guesses counted against 127.0.0.1 as the operator's are."""
    with guarded(whose) as web:
        port, token = port_of(web), web.token("alice")
        asked = [get("/login", port), get("/api/status", port, token), get("/static/console.js", port)]
        answers = answers_as(NOBODY, port, asked)
        assert [status for status, _ in answers] == [403, 403, 403]
        assert f'"what":"the console does not answer {WHOSE[whose]} nobody' in answers[0][1], answers[0][1]
        assert '"where":"client"' in answers[0][1]
        assert as_user(STRANGER, port, asked) == [200, 200, 200], "the control: another user is answered"
        assert web.client("alice").get("/api/status").status == 200, "and so is the operator"


def test_another_local_users_failed_logins_cost_the_operator_nothing(rig_factory: Callable[..., Rig]) -> None:
    """Failed logins were counted per address, and every local client is 127.0.0.1: any user on the
    machine could lock the operator out of the console, the right token refused with 429."""
    needs_root()
    with serving(rig_factory()) as web:
        port, limit = port_of(web), web.rig.config.web.login_failures
        guesses = [get("/api/status", port, "0123456789ab." + "A" * 43)] * (limit + 1)
        assert as_user(STRANGER, port, guesses) == [401] * limit + [429]
        assert web.client("alice").get("/api/status").status == 200
        assert as_user(STRANGER, port, [get("/api/status", port, web.token("bob"))]) == [429], "it still waits"


@pytest.mark.process  # starts a child process (docs/testing.md, "The tiers")
def test_this_process_can_tell_local_clients_apart_and_a_user_namespace_could_not() -> None:
    """Why the console's unit has no PrivateUsers= and allows AF_NETLINK: in a user namespace of its own
    every other user's uid reads as 65534 (the run user's and the operator's alike), and without netlink
    nothing is read at all; either way the run users would not be refused. The service says so at start."""
    assert cannot_tell_apart() is None
    unit = (REPO / "units" / "agentd-web@.service").read_text()
    settings = dict(line.split("=", 1) for line in unit.splitlines() if "=" in line and not line.startswith("#"))
    assert "PrivateUsers" not in settings and "AF_NETLINK" in settings["RestrictAddressFamilies"].split()
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("unshare (util-linux) is not installed: the user-namespace half is not tried here")
    inside = subprocess.run(
        [unshare, "--user", "--map-current-user", sys.executable, "-c",
         "from agentd.web.peers import cannot_tell_apart; print(cannot_tell_apart())"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if inside.returncode != 0 and "unshare" in inside.stderr:
        pytest.skip(f"this machine allows no user namespace here: {inside.stderr.strip()[:120]}")
    assert "user namespace" in inside.stdout, inside.stdout + inside.stderr


@given(
    st.tuples(st.text(max_size=20) | st.ip_addresses().map(str), st.integers(-5, 70_000)),
    st.tuples(st.ip_addresses().map(str), st.integers(-5, 70_000)),
)
def test_any_pair_of_ends_is_looked_up_without_raising(client: tuple[str, int], server: tuple[str, int]) -> None:
    """What an ASGI server puts in a scope is not this module's to trust: a port past 16 bits raised
    struct.error from the request's own lookup (a 500 instead of an answer)."""
    found = local_peer_uid(client, server)
    assert found is None or isinstance(found, int)
    never_accepted = PeerBook(enabled=True).owner(client, server)
    assert never_accepted.unknown and PeerBook(enabled=False).owner(client, server) == REMOTE


def test_the_owner_is_the_one_found_at_accept_and_a_client_gone_by_then_is_unknown() -> None:
    """The kernel still answers for an orphaned socket (its process closed it), with uid 0 once it waits
    in FIN-WAIT-2: that is no one's, not root's."""
    book = PeerBook(enabled=True)
    with PeerSocket.listening(socket.create_server(("127.0.0.1", 0)), book) as server:
        with socket.create_connection(server.getsockname()) as open_one:
            accepted, peer = server.accept()
            with accepted:
                assert book.owner(peer, accepted.getsockname()).uid == os.geteuid()
                open_one.close()
                assert book.owner(peer, accepted.getsockname()).uid == os.geteuid(), "kept, not looked up again"
            del accepted  # as asyncio's transport lets go of a connection it closed
            wait_until(lambda: len(book) == 0, 10, "the closed connection forgotten")
        with socket.create_connection(server.getsockname()) as gone:
            gone.sendall(b"GET / HTTP/1.1\r\n\r\n")
        accepted, peer = server.accept()
        with accepted:
            assert local_peer_uid(peer, accepted.getsockname()) is None, "an orphan is no one's"
            assert book.owner(peer, accepted.getsockname()) == UNKNOWN


def test_an_agent_installed_after_the_console_started_is_refused_once_it_reads_them_again(
    rig_factory: Callable[..., Rig],
) -> None:
    """The other agents' run users were read once, at the console's start: an agent installed later had
    its attempts answered like any local user until the console restarted."""
    needs_root()
    installed: list[tuple[str | None, str]] = []
    with serving(rig_factory(), run_users=lambda: list(installed)) as web:
        port = port_of(web)
        assert as_user(NOBODY, port, [get("/login", port)]) == [200], "no agent runs as nobody yet"
        installed.append(("nobody", "/etc/agentd/later.toml's"))  # `agentd install --agent later`
        assert as_user(NOBODY, port, [get("/login", port)]) == [200], "read again at most once a minute"
        web.rig.clock.advance(60)
        assert as_user(NOBODY, port, [get("/login", port)]) == [403]
        assert web.client("alice").get("/api/status").status == 200, "the operator is answered throughout"


def closing_early(uid: int, port: int, request: bytes, count: int) -> None:
    """`count` connections from a child running as `uid`, each sending `request` and closing before any
    answer: the client's socket is an orphan (FIN-WAIT) by the time the console gets to the request."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            for _ in range(count):
                with socket.socket() as conn:
                    conn.connect(("127.0.0.1", port))
                    conn.sendall(request)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def post(path: str, port: int, token: str, body: bytes) -> bytes:
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
    return (head + f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


@pytest.mark.deep
@pytest.mark.parametrize("whose", ["run", "sensors"])
def test_a_run_user_that_closes_before_its_answer_is_still_refused_and_costs_the_operator_nothing(
    guarded: Callable[[str], AbstractContextManager[WebRig]], whose: str
) -> None:
    """Issue 38: the owner was looked up per request, after the client may have closed; the kernel
    reports an orphaned socket (FIN-WAIT-2) as uid 0, so 150 made-up tokens from the run user, each
    sent on a connection closed at once, were counted against root (whose next request got 429), and a
    valid token's POST acted. The owner is looked up at accept, kept, and an unknown one is refused."""
    with guarded(whose) as web:
        port, stolen = port_of(web), web.token("leaked")
        closing_early(NOBODY, port, get("/api/status", port, "0123456789ab." + "A" * 43), 150)
        assert web.client("alice").get("/api/status").status == 200, "the operator is not locked out"
        closing_early(NOBODY, port, post("/api/pause", port, stolen, b"{}"), 50)
        closing_early(NOBODY, port, post("/api/tasks", port, stolen, b'{"task_type": "example", "payload": {}}'), 50)
        acted = [e.type for e in web.rig.store.read_events(limit=100_000)]
        assert "dispatch_paused" not in acted and "task_enqueued" not in acted, acted[-5:]
        book = web.service._web.peers if web.service._web else None
        wait_until(lambda: book is not None and len(book) == 0, 20, "every closed connection's owner forgotten")
