"""What a long-running service tells systemd: READY, STATUS, WATCHDOG, STOPPING.

Outside systemd (no NOTIFY_SOCKET) every call is a no-op, so the services run unchanged in a
terminal, in tests and under `make run`.
"""

from __future__ import annotations

import logging

import sdnotify

from agentd.config import systemd_notify_socket

logger = logging.getLogger(__name__)


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
