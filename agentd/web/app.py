"""The Starlette application of `agentd web`: its routes (agentd/web/api.py, agentd/web/console.py), who a
request acts for (a bearer token, or a console session), the answers to refused requests, and the headers
every answer carries (no page loads anything from another origin)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentd.clock import Clock
from agentd.config import Config
from agentd.config.addresses import ip_of, listen_parts
from agentd.edge import quoted, whole_number
from agentd.errors import InputError, NotFound, UnreadableRow
from agentd.store import AsyncStore, Store
from agentd.web.auth import COOKIE, LoginThrottle, Operator, Session, Sessions, split_token, token_matches
from agentd.web.bodies import DrainRefusedBodies
from agentd.web.gate import AttemptUsers, PeerGate, owner
from agentd.web.inputs import FIELD_FIRST, BadInput, from_input_error
from agentd.web.limits import RETRY_STREAM_S, Streams, TooManyStreams
from agentd.web.peers import PeerBook

logger = logging.getLogger(__name__)
HERE = Path(__file__).parent
T = TypeVar("T")
SECURITY_HEADERS = {
    # Everything a page uses is served from here: no CDN, no inline script, no other origin.
    "content-security-policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


class Unauthorized(Exception):
    """No token, a malformed one, a wrong or revoked one: 401 (the console: the login page)."""


class Throttled(Exception):
    def __init__(self, retry_after_s: float) -> None:
        super().__init__(f"too many failed logins from this client, or from all; try again in {retry_after_s:.0f}s")
        self.retry_after_s = retry_after_s


class Forbidden(Exception):
    """A console POST without this session's CSRF token: 403, nothing done."""


@dataclass
class Web:
    """What every request handler reaches: the agent's config, its database, the clock, the sessions and
    the login brake; `stopping` ends the live streams when the service stops."""

    config: Config
    db: AsyncStore
    clock: Clock
    sessions: Sessions
    throttle: LoginThrottle
    templates: Jinja2Templates
    stopping: anyio.Event = field(default_factory=anyio.Event)
    stream_poll_s: float = 0.5
    attempt_users: AttemptUsers | None = None  # whose sockets are refused (PeerGate); None: nobody's
    peers: PeerBook = field(default_factory=lambda: PeerBook(enabled=False))  # each connection's owner
    streams: Streams = field(default_factory=lambda: Streams(16, 4))  # the live streams open, and their lane

    async def read(self, verb: Callable[..., T], *args: Any) -> T:
        """A read on the service's one connection, off the event loop (one thread hop)."""
        return await self.db.call(verb, *args)


def web_of(request: Request) -> Web:
    """The service's shared state, from the application."""
    found: Web = request.app.state.web
    return found


def client_address(request: Request) -> str:
    """Who failed logins are counted by: a client on this machine by the user owning its socket alone
    (every local address is this machine: an agent's attempts guessing tokens must not lock the
    operator's own browser out, and 127.x.y.z rotated is still one user), any other by its address."""
    found = owner(request.scope)
    if found.uid is not None:
        return f"local uid {found.uid}"
    return request.client.host if request.client else "unknown"


async def bearer(request: Request) -> Operator:
    """The operator of the request's `Authorization: Bearer <token>`; Unauthorized or Throttled otherwise."""
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        raise Unauthorized("no bearer token: send Authorization: Bearer <token> (`agentd web token add NAME`)")
    return await check_token(request, given)


async def check_token(request: Request, given: str) -> Operator:
    """A presented token, counted against the client's failed logins (a throttled client is refused
    before its token is even looked at: a brute force learns nothing while it waits)."""
    web, address = web_of(request), client_address(request)
    wait = web.throttle.retry_after(address)
    if wait is not None:
        raise Throttled(wait)
    parts = split_token(given)
    stored = await web.read(Store.web_token, parts[0]) if parts else None
    if parts is None or not token_matches(stored, parts[1]) or stored is None:
        web.throttle.failed(address)
        raise Unauthorized("the token is not valid (wrong, revoked, or not a token agentd issued)")
    web.throttle.succeeded(address)
    return Operator(stored.name, stored.token_id)


async def session_of(request: Request) -> tuple[Operator, Session]:
    """The console session of the request's cookie, its token still live; Unauthorized otherwise."""
    web = web_of(request)
    session = web.sessions.read(request.cookies.get(COOKIE))
    if session is None:
        raise Unauthorized("not logged in")
    stored = await web.read(Store.web_token, session.token_id)
    if stored is None or stored.revoked_at is not None:
        raise Unauthorized("the token this session logged in with was revoked")
    return Operator(stored.name, stored.token_id), session


async def bearer_or_session(request: Request) -> tuple[Operator, Session | None]:
    """A GET the console's own scripts make (the live stream: EventSource sends no headers) may use the
    session cookie instead of a bearer token. Never for a POST: those need the CSRF token."""
    if "authorization" in request.headers:
        return await bearer(request), None
    return await session_of(request)


def _is_api(request: Request) -> bool:
    """An API client (a path under /api/, or any request with a bearer token) is answered in JSON."""
    return request.url.path.startswith("/api/") or "authorization" in request.headers


def error_json(status: int, what: str, where: str, expected: str | None, **headers: str) -> JSONResponse:
    """The API's error body: what was wrong, where, what was expected."""
    body = {"error": {"what": what, "where": where, "expected": expected}}
    return JSONResponse(body, status_code=status, headers=headers)


async def on_bad_input(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BadInput)
    if _is_api(request):
        return JSONResponse(exc.as_json(), status_code=exc.status)
    return await console_error(
        request, exc.status, f"{exc.where}: {exc.what}" + (f" (expected {exc.expected})" if exc.expected else "")
    )


async def on_input_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, InputError)
    if isinstance(exc, NotFound) and "task_id" in request.path_params and not FIELD_FIRST.match(str(exc)):
        return await on_bad_input(request, BadInput(404, str(exc), "path.task_id", "a task that exists"))
    prefix = "path" if request.method == "GET" else "body"
    return await on_bad_input(request, from_input_error(exc, prefix))


async def on_unauthorized(request: Request, exc: Exception) -> Response:
    if _is_api(request):
        headers = {"WWW-Authenticate": 'Bearer realm="agentd"'}
        return error_json(401, str(exc), "header.authorization", "a bearer token of a named operator", **headers)
    return RedirectResponse("/login", status_code=303)


async def on_throttled(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, Throttled)
    retry = str(max(int(exc.retry_after_s + 0.999), 1))
    if _is_api(request):
        return error_json(429, str(exc), "client", "no more than the allowed failed logins", **{"Retry-After": retry})
    return await console_error(request, 429, str(exc), {"Retry-After": retry})


async def on_too_many_streams(request: Request, exc: Exception) -> Response:
    expected = 'fewer live streams: close one (docs/web.md, "Live events")'
    return error_json(429, str(exc), "client", expected, **{"Retry-After": str(RETRY_STREAM_S)})


async def on_forbidden(request: Request, exc: Exception) -> Response:
    if _is_api(request):
        return error_json(403, str(exc), "body.csrf", "this session's CSRF token")
    return await console_error(request, 403, str(exc))


async def on_unreadable_row(request: Request, exc: Exception) -> Response:
    """A row edited outside agentd: the service's data, not the request, is at fault (500), in one line."""
    logger.warning("%s: %s", request.url.path, exc)
    if _is_api(request):
        return error_json(500, str(exc), "database", "rows agentd wrote (`agentd evidence verify`)")
    return await console_error(request, 500, str(exc))


async def on_http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if _is_api(request):
        return error_json(exc.status_code, str(exc.detail), "path", "an endpoint docs/web.md lists")
    return await console_error(request, exc.status_code, str(exc.detail))


async def console_error(request: Request, status: int, message: str, headers: dict[str, str] | None = None) -> Response:
    """The console's error page, with the status, and the navigation when the request has a live session
    (docs/web.md, "Errors": every page of a logged-in operator keeps the way on)."""
    web = web_of(request)
    operator: Operator | None = None
    csrf = ""
    if request.cookies.get(COOKIE):
        try:
            operator, session = await session_of(request)
            csrf = web.sessions.csrf(session)
        except (Unauthorized, InputError, UnreadableRow):
            operator = None  # no session to show: the page without the navigation
    context = {
        "status": status,
        "message": message,
        "operator": operator,
        "csrf": csrf,
        "agent_id": web.config.agent.agent_id,
    }
    return web.templates.TemplateResponse(request, "error.html", context, status_code=status, headers=headers)


def build_app(web: Web, routes: list[BaseRoute]) -> Starlette:
    """The application: the routes, the static files (htmx, the stylesheet, the console's script), the
    error answers, and the security headers on every answer."""
    static = Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static")
    app = Starlette(
        routes=[*routes, static],
        exception_handlers={
            BadInput: on_bad_input,
            InputError: on_input_error,
            Unauthorized: on_unauthorized,
            Throttled: on_throttled,
            Forbidden: on_forbidden,
            TooManyStreams: on_too_many_streams,
            HTTPException: on_http,
            UnreadableRow: on_unreadable_row,
        },
    )
    app.state.web = web
    app.add_middleware(PeerGate, users=web.attempt_users)
    app.add_middleware(KnownHosts, names=own_names(web.config))
    app.add_middleware(SecurityHeaders)  # a refused host's answer carries them too
    app.add_middleware(DrainRefusedBodies, book=web.peers, stopping=web.stopping)  # outside every refusal
    return app


def own_names(config: Config) -> frozenset[str]:
    """The DNS names the console answers to: [web] host_names, and the host [web] listen names when that
    is a name (its clients send it)."""
    host = listen_parts(config.web.listen)[0].lower()
    return frozenset(config.web.host_names) | (frozenset() if ip_of(host) is not None else {host})


def answers_to(host: str | None, names: frozenset[str]) -> bool:
    """Whether the console answers a request whose Host header is `host` (docs/web.md, "Its host"): an IP
    address, localhost (or a name under .localhost), or one of `names` ([web] host_names), with any port.
    Any other name is what a page of another site sends once its DNS name points at 127.0.0.1 (DNS
    rebinding): the browser takes it for that site's own, so only this check tells the two apart."""
    if host is None:
        return True  # no Host header: HTTP/1.0, never a browser's request
    if host.startswith("["):
        host, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and whole_number(rest[1:]) is not None)):
            return False
    else:
        name, colon, port = host.rpartition(":")
        if colon:
            if whole_number(port) is None:
                return False
            host = name
    if not host.isascii():
        return False
    host = (host[:-1] if host.endswith(".") else host).lower()
    if ip_of(host) is not None:
        return True
    return host == "localhost" or host.endswith(".localhost") or host in names


class KnownHosts:
    """Refuses (400) a request whose Host header the console does not answer to (`answers_to`), before
    any route, login or static file sees it: a failed login it never counts, a page it never serves."""

    def __init__(self, app: ASGIApp, names: frozenset[str]) -> None:
        self.app, self.names = app, names

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            hosts = [value.decode("latin-1") for key, value in scope["headers"] if key == b"host"]
            if len(hosts) > 1 or not answers_to(hosts[0] if hosts else None, self.names):
                what = f"this console does not answer to the host {quoted(', '.join(hosts))}"
                expected = "an IP address, localhost, or a name in [web] host_names"
                await error_json(400, what, "header.host", expected)(scope, receive, send)
                return
        await self.app(scope, receive, send)


class SecurityHeaders:
    """Adds SECURITY_HEADERS to every answer that has not set its own (pure ASGI: a live stream passes
    through untouched, unlike a middleware that wraps the response)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)


def templates() -> Jinja2Templates:
    """The console's Jinja2 templates (autoescaped), with `when` for a time (agentd/web/times.py) and `visible`
    for text an attempt chose, every blank in it shown (agentd/edge.py)."""
    from agentd.edge import visible
    from agentd.web.task_page import state_words, with_code
    from agentd.web.times import exact, when

    found = Jinja2Templates(directory=HERE / "templates")
    found.env.filters["when"] = when
    found.env.filters["exact"] = exact
    found.env.filters["with_code"] = with_code
    found.env.filters["state_words"] = state_words
    found.env.filters["visible"] = visible
    return found


def text(body: str, status: int = 200) -> PlainTextResponse:
    return PlainTextResponse(body, status_code=status)
