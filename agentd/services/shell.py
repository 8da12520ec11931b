"""The shell both long-running services share: READY, STATUS, WATCHDOG and STOPPING for systemd,
the status line in the database (`agentd status`), the /metrics endpoint, stop bookkeeping, and one
signal watcher for however many services run in the process (`agentd run` runs two).

Outside systemd (no NOTIFY_SOCKET) every notification is a no-op, so the services run unchanged in
a terminal, in tests and under `make run`.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal, Protocol

import anyio
import anyio.abc
import sdnotify

from agentd.clock import Clock
from agentd.config.environment import systemd_notify_socket, systemd_watchdog_interval
from agentd.evidence.rollback import publish_head
from agentd.outlook.metrics import DispatchMetrics, NullMetrics, SensorMetrics
from agentd.process import procs
from agentd.store import AsyncStore, Store

logger = logging.getLogger(__name__)

STATUS_REFRESH_S = 5.0  # the status line in the database (and systemd's STATUS=)
HEAD_EVERY = 100  # events between two chain_head lines in the journal (and one at every stop)
HEAD_FILE_EVERY_S = 1.0  # at most one chain_head file write a second while busy (docs/evidence.md)
ServiceName = Literal["dispatch", "sensors"]
StatusLine = Callable[[], Awaitable[str]]


class Notifier:
    def __init__(self) -> None:
        # sdnotify opens (and leaks) a socket even without systemd: only ask when systemd listens.
        self._systemd = sdnotify.SystemdNotifier() if systemd_notify_socket() else None
        self.last_status = ""

    def _send(self, message: str) -> None:
        if self._systemd is not None:
            self._systemd.notify(message)

    def ready(self, status: str) -> None:
        self.last_status = status
        self._send(f"READY=1\nSTATUS={status}")

    def status(self, status: str) -> None:
        if status != self.last_status:
            self.last_status = status
            self._send(f"STATUS={status}")

    def watchdog(self) -> None:
        self._send("WATCHDOG=1")

    def stopping(self, status: str) -> None:
        self.last_status = status
        self._send(f"STOPPING=1\nSTATUS={status}")

    def close(self) -> None:
        if self._systemd is not None and self._systemd.socket is not None:
            self._systemd.socket.close()


class Shell:
    """Everything a service does besides its work, started with `serve` inside the service's task
    group and ended with `stopped`."""

    def __init__(
        self,
        name: ServiceName,
        db: AsyncStore,
        clock: Clock,
        metrics: DispatchMetrics | SensorMetrics | NullMetrics,
        listen: str,
        notifier: Notifier | None = None,
        state_dir: Path | None = None,
    ) -> None:
        self.name, self.db, self.clock, self.metrics, self.listen = name, db, clock, metrics, listen
        self.state_dir = state_dir  # where the chain head is published beside the database (None: not)
        self._head_file: tuple[int, str] | None = None  # the head this service last wrote there
        self._head_due: tuple[int, str] | None = None  # the newest head a durable write returned
        self._head_moved: anyio.Event | None = None  # while serving: wakes the task that writes the file
        self.notifier = notifier or Notifier()
        self.identity = procs.this_process()
        self.started_at = clock.now()
        self._published = 0  # the last chain head sequence this service logged
        self._publishing = anyio.Lock()  # one status line read and written at a time

    async def serve(self, group: anyio.abc.TaskGroup, status_line: StatusLine) -> None:
        """/metrics, the service's row, READY (after whatever the service did before: the boot sweep), the
        watchdog and the status refresh, each a task of its own."""
        await group.start(self.metrics.serve, self.listen)
        async with self._publishing:  # the row first: `agentd status` lists it once `systemctl start` returns
            line = await status_line()
            await self.report(line)
        self.notifier.ready(line)
        group.start_soon(self._feed_watchdog)
        group.start_soon(self._refresh_status, status_line)
        if self.state_dir is not None:
            self._head_moved = anyio.Event()
            if self._head_due is not None:  # one found before (the boot sweep's)
                self._head_moved.set()
            group.start_soon(self._write_heads)

    async def _feed_watchdog(self) -> None:
        """A timer of its own that never waits on the database: a long attempt or a long-held write
        lock does not trip WatchdogSec; a wedged event loop does, which is what it is for."""
        interval = systemd_watchdog_interval()
        if interval is None:
            return
        while True:
            self.notifier.watchdog()
            await anyio.sleep(interval)

    async def _refresh_status(self, status_line: StatusLine) -> None:
        while True:
            await self.publish_head()
            await anyio.sleep(STATUS_REFRESH_S)
            await self.publish(status_line)

    async def publish(self, status_line: StatusLine) -> None:
        """The service's line, to systemd and to its row, now: every refresh, and whenever the service
        changes state (an attempt starts or ends, a pause). Read and written under one lock, so a line
        read before a change is never written after the change's own."""
        async with self._publishing:
            line = await status_line()
            self.notifier.status(line)
            await self.report(line)

    async def publish_head(self, *, always: bool = False) -> None:
        """Log the event chain's head (`chain_head sequence=N hash=H`) once it has moved on by
        HEAD_EVERY events, and at every stop: the journal holds it outside the state dir, so an
        auditor can tell a chain whose last events were cut (`agentd evidence verify --expect-head`)."""
        head = await self.db.call(Store.chain_head)
        if head is not None and (head[0] >= self._published + HEAD_EVERY or (always and head[0] != self._published)):
            self._published = head[0]
            logger.info("chain_head sequence=%d hash=%s service=%s", head[0], head[1], self.name)

    async def report(self, line: str) -> None:
        """The service's row; then the chain head that durable write found, published beside the
        database when it moved (agentd/evidence/rollback.py): every refresh, every attempt's end, every stop."""
        self.reported(await self.db.call(self.row(line)))

    def row(self, line: str) -> Callable[[Store], tuple[int, str] | None]:
        """Writing the service's row as `line`, as a verb that may join another's transaction."""
        return lambda store: store.report_service_status(
            self.name, self.identity, line, self.metrics.url, self.started_at, self.clock.now()
        )

    def reported(self, head: tuple[int, str] | None, line: str | None = None) -> None:
        """After a durable write (the row's, or an attempt's outcome commit: `line`, if it was written
        inside another transaction, is told to systemd too): the chain head it found, to be published
        beside the database. Never on this path (issue #43): while the service serves, a task of its own
        writes the file, at once after a quiet spell and at most once a second while busy; before it
        serves, the head waits for that task, or for the stop. The file may lag the database, never lead
        it: only a head a durable commit returned is ever due."""
        if line is not None:
            self.notifier.status(line)
        if head is None or self.state_dir is None:
            return
        if self._head_due is None or head[0] >= self._head_due[0]:
            self._head_due = head
        if self._head_moved is not None:
            self._head_moved.set()

    async def _write_heads(self) -> None:
        """The chain head file, rewritten when the head moved, then not again for HEAD_FILE_EVERY_S."""
        while self._head_moved is not None:
            await self._head_moved.wait()
            self._head_moved = anyio.Event()
            await self._write_due_head()
            await anyio.sleep(HEAD_FILE_EVERY_S)

    async def _write_due_head(self) -> None:
        head = self._head_due
        if head is None or head == self._head_file or self.state_dir is None:
            return
        try:
            await anyio.to_thread.run_sync(publish_head, self.state_dir, head)
        except OSError as exc:  # the database's own next write names a disk that cannot be used
            logger.warning("chain_head not published beside the database: %s", exc)
            return
        self._head_file = head

    def status(self, line: str) -> None:
        self.notifier.status(line)

    def stopping(self, line: str) -> None:
        self.notifier.stopping(line)

    async def stopped(self) -> None:
        """The row says stopped and the journal has the head; the port and systemd's socket are let go
        whatever happened (a database that is gone cannot be written, and the port must be free)."""
        try:
            with anyio.CancelScope(shield=True):
                self._head_moved = None  # the task that wrote the file is gone: from here on, at once
                await self.report("stopped")
                await self._write_due_head()  # a head still due when the task stopped
                await self.publish_head(always=True)
        finally:
            self.close()

    def close(self) -> None:
        self.notifier.close()
        self.metrics.close()


class Service(Protocol):
    async def run(self) -> None: ...

    def request_stop(self, *, immediately: bool = False) -> None: ...


class Started(Service, Protocol):
    began: anyio.Event
    holds_lock: bool


class AfterDispatch:
    """A service of `agentd run` that starts once the dispatcher beside it has taken the agent's lock, and not
    at all when it could not: a second `agentd run` of the same agent serves no console and writes no status
    row over the running one's; it ends with the one line `dispatch_locked` says (docs/operate.md)."""

    def __init__(self, service: Service, dispatcher: Started) -> None:
        self.service, self.dispatcher = service, dispatcher

    async def run(self) -> None:
        await self.dispatcher.began.wait()
        if self.dispatcher.holds_lock:
            await self.service.run()

    def request_stop(self, *, immediately: bool = False) -> None:
        self.service.request_stop(immediately=immediately)


async def run_services(*services: Service, watch_signals: bool = True) -> None:
    """Run the services until they end; SIGTERM, SIGINT or SIGHUP (the terminal of a foreground
    `agentd run` closed) asks each to stop, a second signal asks them to stop at once (no grace period)."""
    async with anyio.create_task_group() as group:
        if watch_signals:
            group.start_soon(_watch_signals, services)
        async with anyio.create_task_group() as running:
            for service in services:
                running.start_soon(service.run)
        group.cancel_scope.cancel()


async def _watch_signals(services: tuple[Service, ...]) -> None:
    received = 0
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            received += 1
            logger.info("%s received: stopping%s", signal.Signals(signum).name, " at once" if received > 1 else "")
            for service in services:
                service.request_stop(immediately=received > 1)
