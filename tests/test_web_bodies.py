"""An early refusal never wedges its connection (issue 38): a request refused before its body was read
(413 too large, 401 no token, 400 a host the console does not answer to) is answered, the rest of its
body is read and dropped (within a bound), and the connection is closed; a client that reads only after
sending gets its answer; the service stops cleanly with such a connection open."""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import pytest
from rig import Rig
from webrig import WebRig, serving

from agentd.web import bodies
from agentd.web.inputs import MAX_BODY_BYTES

pytestmark = pytest.mark.timeout(90)
MiB = 1 << 20
ANSWER_S = 15.0  # a wedged connection never answers: this is how long a test waits to say so


def connect(web: WebRig) -> socket.socket:
    parts = urlsplit(web.url)
    conn = socket.create_connection((parts.hostname or "", parts.port or 0), timeout=ANSWER_S)
    return conn


def head(web: WebRig, method: str, path: str, length: int, *, token: str | None, host: str | None = None) -> bytes:
    port = urlsplit(web.url).port
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}", "Content-Type: application/json"]
    lines += [f"Authorization: Bearer {token}"] * (token is not None) + [f"Content-Length: {length}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_answer(conn: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 answer (its status, headers and Content-Length body) off the connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        assert chunk, f"the connection closed before an answer: {data!r}"
        data += chunk
    top, _, body = data.partition(b"\r\n\r\n")
    status_line, *fields = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (f.partition(":") for f in fields)}
    while len(body) < int(headers.get("content-length", "0")):
        body += conn.recv(65536)
    return int(status_line.split()[1]), headers, body


def rest_of(conn: socket.socket) -> bytes:
    """What the connection still sends until the console closes it (a timeout: it never does)."""
    data = b""
    try:
        while chunk := conn.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    return data


CASES = {
    "too large": ({"token": "alice"}, 413),
    "no token": ({"token": None}, 401),
    "a host it does not answer to": ({"token": "alice", "host": "rebound.example.com"}, 400),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_early_refusal_is_answered_and_its_connection_closed_not_left_idle(web: WebRig, case: str) -> None:
    """A 1 MiB body got its 413, but the rest was never read and the connection never closed: the
    client's next request on it never got an answer (8 of 8 idle)."""
    how, status = CASES[case]
    token = web.token("alice") if how["token"] else None
    with connect(web) as conn:
        conn.sendall(head(web, "POST", "/api/tasks", MiB, token=token, host=how.get("host")) + b" " * MiB)
        answered, headers, _ = read_answer(conn)
        assert answered == status
        assert headers.get("connection") == "close"
        try:
            conn.sendall(head(web, "GET", "/api/status", 0, token=token))
        except (BrokenPipeError, ConnectionResetError):
            return  # closed already: nothing is left waiting
        try:
            after = rest_of(conn)
        except TimeoutError:
            pytest.fail(f"the connection was left open and idle for {ANSWER_S:.0f} s after the {status}")
        assert after == b"", after[:200]


def test_a_client_that_reads_only_after_sending_8_mib_gets_its_413(web: WebRig) -> None:
    """An 8 MiB body from a client that reads only once it has sent it all got no answer at all."""
    with connect(web) as conn:
        body = 8 * MiB
        try:
            conn.sendall(head(web, "POST", "/api/tasks", body, token=web.token("alice")) + b" " * body)
        except TimeoutError:
            pytest.fail(f"the console stopped reading: the body could not be sent within {ANSWER_S:.0f} s")
        answered, _, said = read_answer(conn)
        assert answered == 413 and str(MAX_BODY_BYTES).encode() in said, said
        assert rest_of(conn) == b""


@pytest.mark.deep
def test_the_service_stops_cleanly_with_a_refused_body_still_arriving(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopping `agentd web` with such a connection open logged a traceback."""
    caplog.set_level(logging.INFO)
    sending = threading.Event()
    with serving(rig) as web, connect(web) as conn:
        conn.sendall(head(web, "POST", "/api/tasks", 64 * MiB, token=web.token("alice")) + b" " * MiB)
        assert read_answer(conn)[0] == 413
        sending.set()
        started = time.monotonic()
    assert sending.is_set() and time.monotonic() - started < 10
    tracebacks = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert tracebacks == [], [r.getMessage() for r in tracebacks]


def send_until_refused(conn: socket.socket, total: int, pause_s: float = 0.0) -> tuple[int, OSError | None]:
    """Send `total` bytes in 64 KiB writes from a thread (pausing `pause_s` between them) until the
    connection refuses more: the bytes sent, and how it refused them."""
    sent: list[Any] = [0, None]

    def keep_sending() -> None:
        chunk = b" " * 65536
        try:
            while sent[0] < total:
                sent[0] += conn.send(chunk)
                if pause_s:
                    time.sleep(pause_s)  # a slow client, on purpose
        except OSError as exc:
            sent[1] = exc

    thread = threading.Thread(target=keep_sending, daemon=True)
    thread.start()
    thread.join(ANSWER_S + 5)
    assert not thread.is_alive(), f"the console read on and on: {sent[0]} bytes of {total}"
    return sent[0], sent[1]


@pytest.mark.parametrize(("size", "pause_s"), [(256 * MiB, 0.0), (64 * MiB, 0.01)], ids=["too much", "too slow"])
def test_a_refused_body_past_the_bounds_is_cut_off(
    web: WebRig, monkeypatch: pytest.MonkeyPatch, size: int, pause_s: float
) -> None:
    """The drain is bounded: a refused body of more than DRAIN_BYTES, or one still arriving after DRAIN_S,
    ends its connection; the console does not read it to its end, nor stop reading and leave it open."""
    monkeypatch.setattr(bodies, "DRAIN_S", 1.0)
    with connect(web) as conn:
        conn.sendall(head(web, "POST", "/api/tasks", size, token=web.token("alice")))
        started = time.monotonic()
        sent, refused = send_until_refused(conn, size, pause_s)
        assert isinstance(refused, ConnectionError), f"{refused!r} after {sent} bytes"
        assert time.monotonic() - started < bodies.DRAIN_S + bodies.CUT_S + 5
        assert sent <= bodies.DRAIN_BYTES + 16 * MiB, sent  # and what the kernel's buffers hold besides
