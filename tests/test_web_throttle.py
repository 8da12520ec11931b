"""The login brake (docs/web.md, "Tokens and sessions"): failed logins counted per client (a local
user, whatever 127.x.y.z it comes from; any other client by its address) and, beside that, for all
clients together; a client locked out is never the one forgotten to make room (issue 44)."""

from __future__ import annotations

import http.client
from urllib.parse import urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from webrig import WebRig

from agentd.clock import FakeClock
from agentd.web import auth
from agentd.web.auth import LoginThrottle

pytestmark = pytest.mark.timeout(60)
MADE_UP = "Bearer 0123456789ab." + "A" * 43


def status_from(source: str, web: WebRig, authorization: str) -> int:
    """GET /api/status from the local address `source` (any of 127.0.0.0/8 is this machine)."""
    parts = urlsplit(web.url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=20, source_address=(source, 0))
    try:
        conn.request("GET", "/api/status", headers={"Authorization": authorization})
        return conn.getresponse().status
    finally:
        conn.close()


def test_rotating_loopback_addresses_does_not_escape_the_brake(web: WebRig) -> None:
    """10,000 wrong tokens from rotated 127.x.y.z addresses all got 401, never 429 (~1,000 guesses/s):
    each address was a client of its own, though every one is this machine and the same user."""
    limit = web.rig.config.web.login_failures
    seen = [status_from(f"127.0.{n // 250}.{n % 250 + 2}", web, MADE_UP) for n in range(limit + 5)]
    assert seen == [401] * limit + [429] * 5
    good = f"Bearer {web.token('alice')}"
    assert status_from("127.9.9.9", web, good) == 429, "the same user waits, from any address"
    web.rig.clock.advance(web.rig.config.web.login_window_s)
    assert status_from("127.9.9.9", web, good) == 200


def test_failures_of_all_clients_together_have_a_budget_too() -> None:
    """Clients on other machines are their addresses: rotating them spends only the global budget."""
    clock = FakeClock()
    throttle = LoginThrottle(clock, failures=5, window_s=60, total=50)
    for n in range(50):
        assert throttle.retry_after(f"203.0.113.{n}") is None
        throttle.failed(f"203.0.113.{n}")
    assert throttle.retry_after("198.51.100.7") == pytest.approx(60), "every client waits out the window"
    throttle.succeeded("203.0.113.1")
    assert throttle.retry_after("203.0.113.1") is not None, "a success forgets the client's, not the total"
    clock.advance(60)
    assert throttle.retry_after("198.51.100.7") is None


def test_a_locked_out_client_is_never_the_one_forgotten(monkeypatch: pytest.MonkeyPatch) -> None:
    """The 10,000-entry table forgot the oldest address first, locked out or not: enough new addresses
    freed a locked-out one at once."""
    monkeypatch.setattr(auth, "THROTTLE_MEMORY", 100)
    clock = FakeClock()
    throttle = LoginThrottle(clock, failures=5, window_s=60, total=10_000)
    for _ in range(5):
        throttle.failed("198.51.100.7")
    for n in range(300):
        throttle.failed(f"10.0.{n // 250}.{n % 250}")
    assert throttle.retry_after("198.51.100.7") is not None
    assert len(throttle._seen) <= 101
    clock.advance(60)
    throttle.failed("10.9.9.9")
    assert throttle.retry_after("198.51.100.7") is None


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.booleans(), st.floats(0, 30)), max_size=60))
def test_the_brake_never_lets_more_failures_through_than_either_budget(moves: list[tuple[str, bool, float]]) -> None:
    clock = FakeClock()
    throttle = LoginThrottle(clock, failures=3, window_s=60, total=7)
    let_fail: list[tuple[float, str]] = []
    for client, right, wait_s in moves:
        clock.advance(wait_s)
        if throttle.retry_after(client) is not None:
            continue
        if right:
            throttle.succeeded(client)
        else:
            throttle.failed(client)
            let_fail.append((clock.monotonic(), client))
    for start, _ in let_fail:
        window = [c for t, c in let_fail if start <= t < start + 60]
        assert len(window) <= 7 * 2, "no more than the total in any window (two fixed windows at most)"
