"""What a long-running service tells systemd: READY, STATUS, WATCHDOG, STOPPING.

Outside systemd (no NOTIFY_SOCKET) every call is a no-op, so the services run unchanged in a
terminal, in tests and under `make run`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import anyio
import sdnotify

from agentd.config import systemd_notify_socket, systemd_watchdog_interval

logger = logging.getLogger(__name__)

STATUS_REFRESH_S = 5.0  # the status line (and the watchdog, unless systemd wants it sooner)


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


async def keep_alive(
    notifier: Notifier, status_line: Callable[[], Awaitable[str]], report: Callable[[str], Awaitable[None]]
) -> None:
    """Feed the watchdog and refresh the status line from a task of its own: a long attempt never
    starves it, a wedged event loop does (which is what WatchdogSec is for)."""
    interval = min(systemd_watchdog_interval() or STATUS_REFRESH_S, STATUS_REFRESH_S)
    while True:
        notifier.watchdog()
        line = await status_line()
        notifier.status(line)
        await report(line)
        await anyio.sleep(interval)
