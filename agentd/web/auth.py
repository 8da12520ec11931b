"""Who may use the console (docs/web.md, "Tokens and sessions"): bearer tokens per named operator, the
session cookie a console login gets, its CSRF token, and the brake on failed logins.

A token is `<token_id>.<secret>`: the row is found by its id and the secret's SHA-256 compared in constant
time, so a guess learns nothing from timing. Sessions and CSRF tokens are HMACs under a key this process
draws at start: a restart logs everyone out, and nothing secret is stored for them. Each session also has
an id this process keeps while it is live: a logout forgets it, so its cookie is refused at once.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from collections import OrderedDict

from agentd import frozen_value
from agentd.clock import Clock
from agentd.store import WebToken

TOKEN = re.compile(r"^(?P<id>[0-9a-f]{12})\.(?P<secret>[A-Za-z0-9_-]{43})$")
COOKIE = "agentd_session"
THROTTLE_MEMORY = 10_000  # client addresses remembered at once; the oldest is forgotten first
MAX_SESSIONS = 10_000  # console sessions live at once; past it, the oldest ends


@frozen_value
class Operator:
    """Who a request acts for: the token's name (recorded as `by` in every event) and which token."""

    name: str
    token_id: str


def new_token() -> tuple[str, str, str]:
    """(token_id, the secret's SHA-256, the whole token to hand out once)."""
    token_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    return token_id, secret_hash(secret), f"{token_id}.{secret}"


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def split_token(text: str) -> tuple[str, str] | None:
    """(token_id, secret) of a well-formed token; None for anything else."""
    found = TOKEN.fullmatch(text.strip())
    return (found["id"], found["secret"]) if found else None


def token_matches(stored: WebToken | None, secret: str) -> bool:
    """A live token whose secret hashes to the stored hash, compared in constant time. A missing row is
    compared too, against nothing, so an unknown id costs what a wrong secret does."""
    expected = stored.secret_sha256 if stored is not None else "0" * 64
    same = hmac.compare_digest(secret_hash(secret).encode(), expected.encode())
    return same and stored is not None and stored.revoked_at is None


@frozen_value
class Session:
    token_id: str
    nonce: str
    expires: float  # UNIX seconds


class Sessions:
    """Signed session cookies and their CSRF tokens, under a key of this process's own, and the ids of
    the sessions still live (at most MAX_SESSIONS: past it the oldest ends)."""

    def __init__(self, clock: Clock, hours: float, key: bytes | None = None) -> None:
        self.clock, self.lifetime_s = clock, hours * 3600
        self._key = key or secrets.token_bytes(32)
        self._live: OrderedDict[str, float] = OrderedDict()  # session id (nonce) → expires, oldest first

    def issue(self, token_id: str) -> str:
        """A cookie value for a fresh login with `token_id`."""
        now = self.clock.now().timestamp()
        nonce, expires = secrets.token_hex(16), now + self.lifetime_s
        body = {"t": token_id, "n": nonce, "e": expires}
        self._forget_expired(now)
        self._live[nonce] = expires
        while len(self._live) > MAX_SESSIONS:
            self._live.popitem(last=False)
        encoded = base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":")).encode()).decode()
        return f"{encoded}.{self._mac('session', encoded)}"

    def read(self, cookie: str | None) -> Session | None:
        """The session a cookie holds, if its signature is ours, it is live (not logged out) and it has
        not expired."""
        encoded, _, mac = (cookie or "").partition(".")
        if not encoded or not hmac.compare_digest(mac.encode(), self._mac("session", encoded).encode()):
            return None
        try:
            body = json.loads(base64.urlsafe_b64decode(encoded.encode()))
            session = Session(str(body["t"]), str(body["n"]), float(body["e"]))
        except (ValueError, KeyError, TypeError):
            return None
        return session if self.live(session) else None

    def live(self, session: Session) -> bool:
        """Not logged out, not expired: what a live stream opened with it asks again while it runs."""
        return session.nonce in self._live and session.expires > self.clock.now().timestamp()

    def end(self, session: Session) -> None:
        """A logout: the session's cookie (and any stream opened with it) is refused from now on."""
        self._live.pop(session.nonce, None)

    def _forget_expired(self, now: float) -> None:
        """Every session lasts as long, so the oldest expires first."""
        while self._live and next(iter(self._live.values())) <= now:
            self._live.popitem(last=False)

    def csrf(self, session: Session) -> str:
        """The CSRF token every form of this session carries (and no other session's forms can)."""
        return self._mac("csrf", session.nonce)

    def csrf_ok(self, session: Session, given: str | None) -> bool:
        return bool(given) and hmac.compare_digest((given or "").encode(), self.csrf(session).encode())

    def login_csrf(self, nonce: str) -> str:
        """The login form's CSRF token: bound to a nonce in its own cookie (there is no session yet)."""
        return self._mac("login", nonce)

    def login_csrf_ok(self, nonce: str | None, given: str | None) -> bool:
        if not nonce or not given:
            return False
        return hmac.compare_digest(given.encode(), self.login_csrf(nonce).encode())

    def _mac(self, purpose: str, text: str) -> str:
        return hmac.new(self._key, f"{purpose}:{text}".encode(), hashlib.sha256).hexdigest()


class LoginThrottle:
    """At most `failures` failed logins per client per `window_s`, and at most `total` of all clients
    together: past either, the client (or every client) waits out the window (429 with Retry-After),
    right token or not. A success forgets the client's failures, never the total's. A client locked out
    is never the one forgotten to make room (THROTTLE_MEMORY): rotating addresses cannot free it, and
    the total bounds how many can be locked out in one window."""

    def __init__(self, clock: Clock, failures: int, window_s: float, total: int | None = None) -> None:
        self.clock, self.failures, self.window_s = clock, failures, window_s
        self.total = total if total is not None else failures * THROTTLE_MEMORY
        self._seen: OrderedDict[str, tuple[float, int]] = OrderedDict()  # client → (window start, count)
        self._all = (clock.monotonic(), 0)  # every client's failures: (window start, count)

    def retry_after(self, address: str) -> float | None:
        """Seconds the client must wait before it may try again; None if it may try now."""
        waits = [self._wait(self._current(address), self.failures), self._wait(self._all_now(), self.total)]
        found = [wait for wait in waits if wait is not None]
        return max(found) if found else None

    def failed(self, address: str) -> None:
        start, count = self._current(address)
        self._seen[address] = (start, count + 1)
        self._seen.move_to_end(address)
        all_start, all_count = self._all_now()
        self._all = (all_start, all_count + 1)
        if len(self._seen) > THROTTLE_MEMORY:
            self._forget_one()

    def succeeded(self, address: str) -> None:
        self._seen.pop(address, None)

    def _wait(self, window: tuple[float, int], most: int) -> float | None:
        start, count = window
        if count < most:
            return None
        return max(start + self.window_s - self.clock.monotonic(), 0.001)

    def _current(self, address: str) -> tuple[float, int]:
        return self._fresh(self._seen.get(address))

    def _all_now(self) -> tuple[float, int]:
        self._all = self._fresh(self._all)
        return self._all

    def _fresh(self, window: tuple[float, int] | None) -> tuple[float, int]:
        now = self.clock.monotonic()
        start, count = window or (now, 0)
        return (now, 0) if now - start >= self.window_s else (start, count)

    def _forget_one(self) -> None:
        """The oldest client whose window has passed or who is not locked out; none while all are."""
        for address, window in self._seen.items():
            if self._wait(self._fresh(window), self.failures) is None:
                del self._seen[address]
                return
