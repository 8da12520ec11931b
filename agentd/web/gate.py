"""Who may connect (docs/web.md, "Who may connect"): the console refuses, before any route sees the
request, a connection whose socket an agent's run or sensor user owns, and a local connection whose owner
the kernel could not name when it was accepted (agentd/web/peers.py looks it up then)."""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable, Iterable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from agentd.clock import Clock
from agentd.web.peers import Owner, PeerBook

OPERATOR_SIDE = "a connection from the operator's own user (a browser, an SSH tunnel, curl)"


class AttemptUsers:
    """The run users whose sockets the console refuses: this agent's, and every other installed agent's as
    `others()` reads them (/etc/agentd). An agent installed after the console started is seen too: a
    local uid the console does not know makes it read them again, at most every `refresh_s`."""

    refresh_s = 60.0

    def __init__(
        self,
        own: Iterable[tuple[str | None, str]],
        others: Callable[[], Iterable[tuple[str | None, str]]],
        clock: Clock,
    ) -> None:
        self.own, self.others, self.clock = list(own), others, clock
        self.known = run_user_uids([*self.own, *others()])
        self.read_at = clock.monotonic()

    def whose(self, uid: int | None) -> str | None:
        """Whose user `uid` is ("this agent's run user NAME"), or None."""
        if uid is None:
            return None
        if uid not in self.known and uid not in (0, os.geteuid()):
            now = self.clock.monotonic()
            if now - self.read_at >= self.refresh_s:
                self.known, self.read_at = run_user_uids([*self.own, *self.others()]), now
        return self.known.get(uid)


def run_user_uids(users: Iterable[tuple[str | None, str]]) -> dict[int, str]:
    """uid → "WHAT NAME" ("this agent's run user agentd-arc-run") for each (name, what) that names an
    account here (a name that does not is no one's socket)."""
    found = {}
    for name, whose in users:
        if name is None:
            continue
        try:
            found[pwd.getpwnam(name).pw_uid] = f"{whose} {name}"
        except KeyError:
            continue
    return found


def owner(scope: Scope) -> Owner:
    """The owner of the request's connection, as found when it was accepted (agentd/web/peers.py)."""
    book: PeerBook = scope["app"].state.web.peers
    return book.owner(scope.get("client"), scope.get("server"))


def refusal(found: Owner, users: AttemptUsers | None) -> str | None:
    """Why the console does not answer a connection of `found`, or None when it does."""
    if found.unknown:
        return (
            "the console could not tell which user's connection this is: its socket was closed (or never "
            "seen) when the console accepted it"
        )
    whose = users.whose(found.uid) if users is not None else None
    if whose is not None:
        return f"the console does not answer {whose}: it runs an agent's attempts or sensors, never its operator"
    return None


class PeerGate:
    """Refuses (403, `"where": "client"`) a connection of an agent's run or sensor user (this agent's
    `[dispatch] run_as` and `[sensors] run_as`, or another installed agent's), and a local one whose
    owner is unknown: an attempt has no business with the console, not even its login form, and its
    token guesses must cost the operator nothing."""

    def __init__(self, app: ASGIApp, users: AttemptUsers | None) -> None:
        self.app, self.users = app, users

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (why := refusal(owner(scope), self.users)) is not None:
            body = {"error": {"what": why, "where": "client", "expected": OPERATOR_SIDE}}
            await JSONResponse(body, status_code=403, headers={"connection": "close"})(scope, receive, send)
            return
        await self.app(scope, receive, send)
