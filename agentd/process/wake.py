"""The dispatcher's doorbell: a unix datagram socket in the state dir.

Whoever adds work (`agentd task add`, the sensor service) or wants a running task stopped
(`agentd task cancel`) sends one byte; the dispatcher wakes from its idle sleep at once instead
of at the poll ceiling. No listener means nothing is lost: the work is in the database.
`Doorbell` is the listening side, and any service's "wake me early" (a ring from inside).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.abc

SOCKET_NAME = "dispatch.sock"
MAX_PATH = 107  # sun_path


def socket_path(state_dir: Path) -> Path:
    return state_dir / SOCKET_NAME


def poke(state_dir: Path) -> bool:
    """Wake the dispatcher if it is listening; True if the poke was delivered."""
    path = socket_path(state_dir)
    if len(str(path)) > MAX_PATH:
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        try:
            sock.sendto(b"!", str(path))
        except OSError:
            return False  # no dispatcher, or its queue is full: it will look anyway
    return True


@contextlib.asynccontextmanager
async def doorbell(state_dir: Path) -> AsyncIterator[anyio.abc.UNIXDatagramSocket | None]:
    """Bind the socket for the lifetime of the context (None if the path is too long)."""
    path = socket_path(state_dir)
    if len(str(path)) > MAX_PATH:
        yield None
        return
    path.unlink(missing_ok=True)  # a previous dispatcher's, known dead: we hold the lock
    sock = await anyio.create_unix_datagram_socket(local_path=path, local_mode=0o600)
    try:
        yield sock
    finally:
        await sock.aclose()
        path.unlink(missing_ok=True)


class Doorbell:
    """Wait until rung (from the socket, or by `ring()` in this process) or a timeout passes."""

    def __init__(self) -> None:
        self._rung = anyio.Event()

    def ring(self) -> None:
        self._rung.set()

    async def wait(self, timeout_s: float) -> bool:
        """True if rung (the ring is then used up), False if the timeout passed first."""
        with anyio.move_on_after(max(timeout_s, 0.0)):
            await self._rung.wait()
        if self._rung.is_set():
            self._rung = anyio.Event()
            return True
        return False

    async def listen(
        self, state_dir: Path, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Bind the state dir's socket and ring on every poke until cancelled (without a socket,
        e.g. a path too long for one, the callers' poll ceilings still hold)."""
        async with doorbell(state_dir) as sock:
            task_status.started()
            if sock is None:
                await anyio.sleep_forever()
                return
            while True:
                await sock.receive()
                self.ring()
