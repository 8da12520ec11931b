"""The `agentd web` service: the application on hypercorn inside anyio (its asyncio backend, as the other
services run), on its own database connection, until asked to stop (docs/web.md)."""

from __future__ import annotations

import errno
import logging
import socket
import threading
from collections.abc import Callable, Iterable

import anyio
from hypercorn.asyncio import serve
from hypercorn.config import Config as HyperConfig
from hypercorn.config import Sockets
from starlette.applications import Starlette
from starlette.routing import BaseRoute

from agentd.clock import Clock
from agentd.config import Config
from agentd.config.addresses import exposure_problem, listen_address, listen_parts
from agentd.errors import InputError, contained
from agentd.process import procs
from agentd.process.activation import passed_socket
from agentd.services.shell import STATUS_REFRESH_S, Notifier
from agentd.store import AsyncStore, Store
from agentd.web import (
    api,
    chart_pages,
    console,
    evidence_pages,
    handoff,
    live,
    output_pages,
    steering,
    task_forms,
    workflow_pages,
)
from agentd.web.app import Web, build_app, templates
from agentd.web.auth import LoginThrottle, Sessions
from agentd.web.gate import AttemptUsers
from agentd.web.limits import Streams
from agentd.web.peers import PeerBook, PeerSocket, cannot_tell_apart

logger = logging.getLogger(__name__)
GRACE_S = 2.0  # open requests (a live stream ends at once) get this long when the service stops


def bind(listen: str, beyond_loopback: bool = False) -> socket.socket:
    """The listening socket of HOST:PORT (port 0: any free one): the one systemd holds for it
    (process/activation.py), else bound here. InputError naming [web] listen, also for an address beyond
    loopback that the config does not allow (`--listen` is held to it too)."""
    host, port = listen_parts(listen_address(listen))
    if (problem := exposure_problem(listen, beyond_loopback)) is not None:
        raise InputError(f"web.listen: {problem}")
    if (held := passed_socket(listen, "web.listen")) is not None:
        return held
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise InputError(f"web.listen: cannot listen on {listen} ({exc.strerror or exc})") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        fix = "; set [web] listen to a free port, or --listen 127.0.0.1:0" if exc.errno == errno.EADDRINUSE else ""
        raise InputError(f"web.listen: cannot listen on {listen} ({exc.strerror or exc}){fix}") from None
    return sock


class Served(HyperConfig):
    """hypercorn's settings, serving the one socket given (hypercorn's own `bind` would make a plain
    socket of it, whose accept the console could not see)."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__()
        self.held = sock

    def create_sockets(self) -> Sockets:
        return Sockets(secure_sockets=[], insecure_sockets=[self.held], quic_sockets=[])


def routes() -> list[BaseRoute]:
    """The API's and the console's routes."""
    pages = (live, task_forms, console, steering, evidence_pages, output_pages, workflow_pages, chart_pages)
    return [*api.routes(), *(route for module in pages for route in module.routes())]


class WebService:
    """The service `agentd web` (and `agentd run`) runs. `ready` is set once it listens; `url` says where."""

    def __init__(
        self,
        config: Config,
        db: AsyncStore,
        *,
        clock: Clock,
        listen: str | None = None,
        beside: bool = False,
        run_users: Callable[[], Iterable[tuple[str | None, str]]] = tuple,
        held: socket.socket | None = None,
    ) -> None:
        """`run_users`: what reads the (name, whose) of the run users besides this agent's own whose requests
        are refused (the CLI's reads the other installed agents'; read again for a uid it does not know)."""
        self.config, self.db, self.clock = config, db, clock
        own = [(config.dispatch.run_as, "this agent's run user"), (config.sensors.run_as, "this agent's sensor user")]
        self.attempt_users = AttemptUsers(own, run_users, clock)
        self.listen = listen or config.web.listen
        self.held = held  # bound before the services started (agentd/services/ports.py): served as it is
        self.beside = beside  # under `agentd run`: a port in use costs the console, never the dispatcher
        self.stream_poll_s = 0.5  # how often a live stream looks for new events
        self.handoff_poll_s = handoff.POLL_S
        self.ready = threading.Event()
        self.url = ""
        self._stop_asked = False
        self._web: Web | None = None
        self._me, self._started = procs.this_process(), clock.now()
        # systemd's READY= and STOPPING= are the unit's main process's to send: `agentd run`'s dispatcher sends
        # them for the process, so the console beside it says nothing.
        self.notifier = Notifier() if not beside else None

    def build(self, peers: PeerBook) -> Web:
        """The state every request handler reaches."""
        web = self.config.web
        return Web(
            config=self.config,
            db=self.db,
            clock=self.clock,
            sessions=Sessions(self.clock, web.session_hours),
            throttle=LoginThrottle(self.clock, web.login_failures, web.login_window_s, web.login_failures_total),
            templates=templates(),
            stream_poll_s=self.stream_poll_s,
            attempt_users=self.attempt_users,
            peers=peers,
            streams=Streams(web.max_streams, web.max_streams_per_token),
        )

    async def run(self) -> None:
        """Serve until request_stop; the socket is bound before `ready`, so a client may connect at once."""
        try:
            sock = self.held if self.held is not None else bind(self.listen, self.config.web.beyond_loopback)
        except InputError as exc:
            if not self.beside:
                raise
            logger.error("the console is not served: %s ([web] listen, or AGENTD_WEB__ENABLED=false)", exc)
            return
        host, port = sock.getsockname()[:2]
        self.url = f"http://{host if ':' not in host else f'[{host}]'}:{port}/"
        if (why := cannot_tell_apart()) is not None:  # said once, at start: what "Who may connect" relies on
            logger.warning(
                "the console cannot tell local clients apart (%s): the agents' run users are not refused and "
                'failed logins are counted per address only (docs/web.md, "Who may connect")',
                why,
            )
        peers = PeerBook(enabled=why is None)
        self._web = web = self.build(peers)
        app = build_app(web, routes())
        served = Served(PeerSocket.listening(sock, peers))  # each connection's owner looked up at accept
        served.graceful_timeout = GRACE_S
        served.accesslog = None
        served.errorlog = logger
        if self._stop_asked:
            web.stopping.set()
        logger.info("console and API at %s", self.url)
        line = f"serving the console and API at {self.url}"
        handing = anyio.CancelScope()  # a hand-off pass in flight when serving ends is cut short
        try:
            # READY once the row is written, so `agentd status` lists the console as soon as `systemctl
            # start` returns (the unit is Type=notify).
            await self._report(line)
            self.ready.set()
            if self.notifier is not None:
                self.notifier.ready(line)
            async with anyio.create_task_group() as group:
                group.start_soon(self._keep_reporting, web, line)
                if self.config.web.approval_handler is not None:
                    group.start_soon(self._keep_handing_off, web, handing)
                group.start_soon(self._serve, app, served, web, handing)
        finally:
            if self.notifier is not None:
                self.notifier.stopping("stopped")
                self.notifier.close()
            with anyio.CancelScope(shield=True):
                await self._report("stopped")

    async def _serve(self, app: Starlette, served: HyperConfig, web: Web, handing: anyio.CancelScope) -> None:
        """hypercorn until the stop event, in a task of its own: what its shutdown does to the task it runs
        in (it cancels and collects its own tasks) never reaches the service's task, whose task group
        must end by its own rules (it once ended by a cancellation it could not tell from its own)."""
        try:
            await serve(app, served, shutdown_trigger=web.stopping.wait)  # type: ignore[arg-type]
        finally:
            web.stopping.set()  # served or failed: the other loops end too
            handing.cancel()

    async def _keep_handing_off(self, web: Web, handing: anyio.CancelScope) -> None:
        with handing:
            await handoff.keep_handing_off(web, self.handoff_poll_s)

    async def _keep_reporting(self, web: Web, line: str) -> None:
        """The service's row, as dispatch and sensors keep theirs: `agentd status` calls it live only
        while this very process runs and the row is fresh. Ends (never cancelled) once it stops."""
        while True:
            with anyio.move_on_after(STATUS_REFRESH_S):
                await web.stopping.wait()
            if web.stopping.is_set():
                return
            await self._report(line)

    async def _report(self, line: str) -> None:
        with contained(logger, "the console's status row could not be written"):
            now = self.clock.now()
            await self.db.call(Store.report_service_status, "web", self._me, line, None, self._started, now)

    def request_stop(self, *, immediately: bool = False) -> None:
        """Stop listening, end the live streams, let open requests finish (GRACE_S at most)."""
        self._stop_asked = True
        if self._web is not None:
            self._web.stopping.set()
