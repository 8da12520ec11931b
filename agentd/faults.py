"""Storage that cannot be used, named: SQLite's and the OS's errors turned into one StorageError
line (the path, the problem, what to do). SQLite reports a full or read-only file system as an I/O
error or "cannot open" at times, so the file system itself is asked what it is."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from agentd.errors import DatabaseGone, StorageError

# SQLite's primary result codes for a database that cannot be used (not a bug in a statement).
_FAULTS = {
    5: ("another process holds its write lock", "find it with `fuser {path}` and let it finish, then retry"),
    8: (
        "it is read-only",
        "remount the state dir read-write (read-only commands still work: status, task list/show, events)",
    ),
    10: ("a disk I/O error", "check the disk (dmesg, smartctl); agentd retries when the service restarts"),
    11: ("the database file is damaged", "restore it from a backup, or move it aside and run `agentd init`"),
    13: ("the disk is full", "free space (old evidence under attempts/ can go); the services resume by themselves"),
    14: (
        "it cannot be opened",
        "check that it exists and that this user may read and write it (sudo -u agentd agentd …)",
    ),
    23: ("permission denied", "run as the user that owns the state dir (sudo -u agentd agentd …)"),
    26: ("it is not an agentd database", "point [paths] state_dir at the right folder"),
}


def storage_error(exc: sqlite3.Error, path: Path) -> StorageError | None:
    """The StorageError an SQLite error means, or None when it is a statement's own problem (a
    constraint, a bug) rather than the storage's. SQLite reports a full or read-only file system
    as an I/O error or "cannot open" at times, so the file system is asked what it is."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None or (code & 0xFF) not in _FAULTS:
        return None
    primary = code & 0xFF
    if primary in (8, 10, 13, 14):  # READONLY, IOERR, FULL, CANTOPEN: which is it really?
        primary = _file_system_fault(path) or primary
    problem, fix = _FAULTS[primary]
    return StorageError(path, problem, fix.format(path=path))


def _file_system_fault(path: Path) -> int | None:
    """READONLY, FULL or PERM if the state dir's file system says so, else None."""
    directory = path if path.is_dir() else path.parent
    try:
        stats = os.statvfs(directory)
    except OSError:
        return None
    if stats.f_flag & os.ST_RDONLY:
        return 8
    if stats.f_bavail == 0 or stats.f_favail == 0:
        return 13
    if not os.access(directory, os.R_OK | os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.R_OK)):
        return 23
    return None


_OS_FAULTS = {
    errno.ENOSPC: 13,
    errno.EDQUOT: 13,
    errno.EROFS: 8,
    errno.EACCES: 23,
    errno.EPERM: 23,
    errno.EIO: 10,
}


def os_storage_error(exc: OSError, path: Path | None = None) -> StorageError:
    """A file-system error while agentd wrote its state, as one clear line."""
    where = exc.filename or path or "the state dir"
    fault = _FAULTS.get(_OS_FAULTS.get(exc.errno or 0, 0))
    if exc.errno == errno.EIO and isinstance(where, str | Path):
        fault = _FAULTS.get(_file_system_fault(Path(where)) or 10)
    if fault is None:
        return StorageError(where, exc.strerror or str(exc), "check the state dir and the disk it is on")
    problem, fix = fault
    return StorageError(where, problem, fix.format(path=where))


def is_storage_fault(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _OS_FAULTS


FileIdentity = tuple[int, int]  # (st_dev, st_ino): which file a path named when it was opened


def file_identity(path: Path) -> FileIdentity | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


_GONE_FIX = (
    "this process stops rather than write where no one will read it; put the database back (or run `agentd "
    "init` for a new one) and start the service again: its start-up check says if the database is older "
    "than the evidence"
)
_GONE_FOR_A_READER = "this command stops rather than go on reading what no one writes any more; run it again"


def database_gone(path: Path, opened: FileIdentity | None, *, reading: bool = False) -> DatabaseGone | None:
    """DatabaseGone if `path` no longer names the file opened as `opened` (deleted, moved away, or
    replaced by another file), else None. An error other than "not there" is left to SQLite to report."""
    if opened is None:
        return None
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return DatabaseGone(
            path,
            "the database file was deleted (or moved away) while this process had it open",
            _GONE_FOR_A_READER if reading else _GONE_FIX,
        )
    except OSError:
        return None
    if (info.st_dev, info.st_ino) != opened:
        problem = "the database file was replaced by another file while this process had it open"
        fix = _GONE_FOR_A_READER if reading else _GONE_FIX
        return DatabaseGone(path, f"{problem} (inode {opened[1]} is now {info.st_ino})", fix)
    return None


def refused_about(exc: OSError, about: object) -> str:
    """What the system refused while agentd worked on the operator's `about` (an --out, a DIR, a --root):
    its reason, and the file it was at when that is another one."""
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(about) else ""
    return f"{exc.strerror or exc}{where}"
