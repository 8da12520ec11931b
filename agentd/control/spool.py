"""The spool handler's file: each external message appended as one JSON line, whole, under a lock, synced
(file and folder) before it counts as delivered; a re-send whose line is already there is not written
twice (docs/messages.md). Every OS error names what could not be done, and where (`doing`)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from agentd.records.messages import Delivery, Sent

SCAN_BYTES = 64 * 1024  # a re-send's look for its line in the spool, per read
SPOOL_LOCK_S = 10.0  # the longest wait for another writer's lock on a spool; then the attempt is a retry
LOCK_POLL_S = 0.05


class Failed(Exception):
    """What a handler could not do, where, and the OS's word for why (`doing`)."""


@contextlib.contextmanager
def doing(what: str, where: Path) -> Iterator[None]:
    """Any OSError inside becomes Failed("cannot <what> <where>: <strerror> (<ERRNO>)"): an OSError
    from a write or an fsync names no file (`cannot read None`, before), and a full disk, a quota, a
    read-only remount and an I/O error must each say which."""
    try:
        yield
    except OSError as exc:
        raise Failed(f"cannot {what} {where}: {os_error_text(exc)}") from exc


def os_error_text(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno) if exc.errno is not None else None
    text = exc.strerror or str(exc) or type(exc).__name__
    return f"{text} ({name})" if name else text


# --- spool -----------------------------------------------------------------------------------------


def spool_line(delivery: Delivery) -> bytes:
    line = {"idempotency_key": delivery.idempotency_key, "message": delivery.message, "task_id": delivery.task_id}
    return json.dumps(line, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode() + b"\n"


def append_line(path: Path, line: bytes, resent: bool, lock_wait_s: float = SPOOL_LOCK_S) -> Sent:
    """Append one whole line and fsync it, under an exclusive flock: agentd's own writers (and any other
    that takes the lock) interleave whole lines. Never removes or rewrites a byte already in the file:
    if it does not end in a newline (an earlier write cut short, or a writer that does not lock still
    writing its line), agentd's line starts with one, so it is whole on its own. A re-send first looks
    for its own line: an interrupted attempt may have written it already. Any OSError is a retry that
    says what failed, where and why; the message is delivered only once its line is synced."""
    try:
        with doing("create the folder of", path):
            created = not path.exists()
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with doing("open", path):
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except Failed as exc:
        return Sent("retry", str(exc))
    try:
        return _append_locked(fd, path, line, resent, created, lock_wait_s)
    except Failed as exc:
        return Sent("retry", str(exc))
    finally:
        os.close(fd)


def _append_locked(fd: int, path: Path, line: bytes, resent: bool, created: bool, lock_wait_s: float) -> Sent:
    with doing("lock", path):
        _lock(fd, path, lock_wait_s)
    if resent:
        with doing("read", path):
            if _holds_line(fd, line):
                return Sent("delivered", note="already in the spool: an interrupted attempt had written it")
    with doing("append to", path):
        _write_all(fd, _fresh_line(fd) + line)
    with doing("sync", path):
        os.fsync(fd)
    if created:
        with doing("sync the folder of", path):
            _fsync_dir(path.parent)
    return Sent("delivered")


def _lock(fd: int, path: Path, wait_s: float) -> None:
    """flock, waiting at most wait_s: a writer that holds the lock forever makes a retry, never a
    delivery slot (or a stop) that waits forever."""
    for _ in range(max(round(wait_s / LOCK_POLL_S), 1)):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(LOCK_POLL_S)  # on a worker thread: the event loop goes on
    raise Failed(f"cannot lock {path}: another writer held it for {wait_s:g}s")


def _fresh_line(fd: int) -> bytes:
    """A newline if the file ends inside a line (never a byte removed: that line may be someone's)."""
    size = os.fstat(fd).st_size
    return b"\n" if size and os.pread(fd, 1, size - 1) != b"\n" else b""


def _holds_line(fd: int, line: bytes) -> bool:
    """Whether `line` is already one of the file's whole lines (agentd writes a message's line the same
    way every time). Read in chunks: a spool can be large, and a line of it too."""
    needle, offset, carry = b"\n" + line, 0, b"\n"  # the file's start counts as a line's start
    while chunk := os.pread(fd, SCAN_BYTES, offset):
        seen = carry + chunk
        if needle in seen:
            return True
        carry, offset = seen[-(len(needle) - 1) :], offset + len(chunk)
    return False


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
