"""Files between the service and its attempts. Writing: private files (0600) created exclusively and
never through a link, atomically; folders and files the run user's group may use. Reading what an
attempt wrote (its result, its harness's files, the artifacts in its workspace) as the service user:
never through a symbolic link, never a FIFO or a device, never past a size cap.

Everything an attempt can write it can also replace between agentd's check and agentd's read, so no
path is resolved and then opened: each is walked one component at a time from a directory agentd
holds open (O_NOFOLLOW at every step), and what is opened is checked to be a regular file. A link an
attempt planted to the database, an env_file or /etc/shadow is refused, not followed.

Removing what an attempt (or a command) wrote in (`remove_tree`): any depth, never raising, as the run user
what the service cannot.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from agentd import frozen_value
from agentd.process.privilege import RunUser, run_as

logger = logging.getLogger(__name__)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO never hangs us


LINK = "a symbolic link (never followed)"
NOT_REGULAR = "not a regular file (never read)"


class Refused(OSError):
    """The path is not a regular file reached without links, inside the root."""


@frozen_value
class Found:
    data: bytes  # at most limit + 1 bytes: more than limit means it was larger
    size: int  # the file's size when it was opened
    mtime: float


Root = Path | int  # a folder by its path, or one the caller holds open (`held_folder`): walked from, never closed


@contextmanager
def held_folder(root: Path) -> Iterator[int]:
    """A descriptor of the folder `root` itself (a link there is refused: Refused), for reading many files
    in it with one open of the folder instead of one per file (`evidence verify` reads ~8 per attempt)."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused(exc.errno, f"{root} is a symbolic link or not a folder") from None
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def _bare_name(relative: str | PurePosixPath) -> bool:
    """A file's own name, right in the folder: no separator, not `.` or `..`, not empty."""
    return isinstance(relative, str) and "/" not in relative and relative not in ("", ".", "..")


@contextmanager
def _parent_beneath(root: Root, relative: str | PurePosixPath) -> Iterator[tuple[int, str]]:
    """(a descriptor of the folder holding `relative`'s last part, that part), every folder on the way
    opened without following a link."""
    if _bare_name(relative):  # no path to parse
        parts: tuple[str, ...] = (str(relative),)
    else:
        path = PurePosixPath(relative)
        parts = path.parts
        if not parts or path.is_absolute() or any(p in ("..", ".") for p in parts):
            raise Refused(errno.EINVAL, f"{str(relative)!r} is not a plain path inside {root}")
    # A held folder is the caller's to close (a copy is walked from); a root by path is agentd's own (its
    # config names it), opened here.
    fds = [os.dup(root) if isinstance(root, int) else os.open(root, _DIR_FLAGS & ~os.O_NOFOLLOW)]
    try:
        for part in parts[:-1]:
            fds.append(_step(fds[-1], part, _DIR_FLAGS, relative))
        yield fds[-1], parts[-1]
    finally:
        for opened in reversed(fds):
            os.close(opened)


@contextmanager
def open_beneath(root: Root, relative: str | PurePosixPath, owner: int | None = None) -> Iterator[int]:
    """A read-only descriptor of the regular file at `relative` under `root`, reached without
    following any link; Refused (an OSError) if it escapes, is a link, is not a regular file, or (with
    `owner`) belongs to another user."""
    fd, _ = _open_regular(root, relative, owner)
    try:
        yield fd
    finally:
        os.close(fd)


def _open_regular(root: Root, relative: str | PurePosixPath, owner: int | None) -> tuple[int, os.stat_result]:
    """`open_beneath`'s descriptor (the caller closes it) and what fstat said of it."""
    if isinstance(root, int) and _bare_name(relative):
        fd = _step(root, str(relative), _FILE_FLAGS, relative)  # a name in a held folder: nothing to walk
    else:
        with _parent_beneath(root, relative) as (parent, name):
            fd = _step(parent, name, _FILE_FLAGS, relative)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Refused(errno.EINVAL, f"{str(relative)!r} is not a regular file")
        _owned(info, owner, relative)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def _owned(info: os.stat_result, owner: int | None, relative: str | PurePosixPath) -> None:
    """What an attempt reports is its run user's: a file another party left where it reads (a sensor, another
    agent, the operator) is never taken for the attempt's own (docs/install-and-deploy.md, "The boundary")."""
    if owner is not None and info.st_uid != owner:
        raise Refused(
            errno.EPERM, f"{str(relative)!r} belongs to uid {info.st_uid}, not to the attempt's user (uid {owner})"
        )


def lstat_beneath(root: Root, relative: str | PurePosixPath, owner: int | None = None) -> os.stat_result:
    """What is at `relative` under `root` (a file, a folder, …), reached without following a link;
    Refused if the path goes through a link or ends in one, or (with `owner`) belongs to another user."""
    with _parent_beneath(root, relative) as (parent, name):
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
    if stat.S_ISLNK(info.st_mode):
        raise Refused(errno.ELOOP, f"{str(relative)!r} is a symbolic link")
    _owned(info, owner, relative)
    return info


def sha256_beneath(root: Root, relative: str | PurePosixPath) -> str:
    """The sha256 of the regular file at `relative` (see `open_beneath`), read in chunks."""
    return hashed_beneath(root, relative)[0]


def hashed_beneath(root: Root, relative: str | PurePosixPath) -> tuple[str, int]:
    """(the sha256, the bytes read) of the regular file at `relative` (see `open_beneath`), read in chunks."""
    digest, size = hashlib.sha256(), 0
    fd, _ = _open_regular(root, relative, None)
    try:
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest(), size


def sha256_at_most(
    root: Root, relative: str | PurePosixPath, limit: int, owner: int | None = None
) -> tuple[str | None, int]:
    """(the sha256 of the regular file at `relative` (see `open_beneath`), the bytes read), or (None, the
    bytes read) once it holds more than `limit`: a file the caller does not trust to be small is
    never read past what it may cost."""
    digest, read = hashlib.sha256(), 0
    with open_beneath(root, relative, owner) as fd:
        while chunk := os.read(fd, min(1 << 20, limit + 1 - read)):
            read += len(chunk)
            if read > limit:
                return None, read
            digest.update(chunk)
    return digest.hexdigest(), read


def _step(parent: int, name: str, flags: int, relative: str | PurePosixPath) -> int:
    try:
        return os.open(name, flags, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise Refused(exc.errno, f"{str(relative)!r} goes through a symbolic link or a non-folder") from None
        raise


def read_beneath(root: Root, relative: str | PurePosixPath, limit: int, owner: int | None = None) -> Found:
    """The first limit + 1 bytes of the file (see `open_beneath`), its size and mtime."""
    fd, info = _open_regular(root, relative, owner)
    try:
        chunks, left = [], limit + 1
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(fd)
    return Found(b"".join(chunks), info.st_size, info.st_mtime)


def read_tail_beneath(root: Root, relative: str | PurePosixPath, limit: int) -> tuple[bytes, bool] | None:
    """The last `limit` bytes of the regular file at `relative` (see `open_beneath`) and whether the file
    holds more before them; None if there is none to read."""
    try:
        with open_beneath(root, relative) as fd:
            size = os.fstat(fd).st_size
            os.lseek(fd, max(size - limit, 0), os.SEEK_SET)
            return os.read(fd, limit), size > limit
    except OSError:  # missing, a link, not a regular file, pruned: nothing to show
        return None


def read_reported(path: Path, limit: int, owner: int | None = None) -> tuple[bytes | None, str | None]:
    """A file an attempt left directly in its run dir: (its bytes up to limit, None), (None, None) if
    there is none, or (None, why it cannot be used). With `owner` (the run user's uid) a file of anyone
    else's is refused."""
    try:
        found = read_beneath(path.parent, path.name, limit, owner)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, exc.strerror if isinstance(exc, Refused) else f"cannot read it ({exc.strerror})"
    if len(found.data) > limit:
        return None, f"larger than {limit} bytes; agentd reads at most that much"
    return found.data, None


def read_whole_beneath(root: Root, relative: str | PurePosixPath) -> bytes | None:
    """All of the regular file at `relative` (see `open_beneath`); None if there is none. For files
    agentd sealed itself, whose size it recorded: an attempt's own files go through `read_beneath`."""
    try:
        with open_beneath(root, relative) as fd:
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
            return b"".join(chunks)
    except FileNotFoundError:
        return None


def entry_problem(entry: os.DirEntry[str]) -> str | None:
    """Why a folder entry is not to be read (LINK, or NOT_REGULAR for a FIFO, device, socket or
    folder), without following it; None for a regular file."""
    if entry.is_symlink():
        return LINK
    return None if entry.is_file(follow_symlinks=False) else NOT_REGULAR


def folder_problems(path: Path, *, depth: int = 1) -> list[tuple[Path, str]]:
    """(path, why) if `path` or one of its `depth - 1` nearest parents is a link or not a folder."""
    chain = [path]
    while len(chain) < depth and chain[-1].parent != chain[-1]:
        chain.append(chain[-1].parent)  # only the parents asked for: `.parents` would build every one
    for folder in reversed(chain):
        try:
            info = os.lstat(folder)
        except FileNotFoundError:
            return [(folder, "no such folder")]
        if stat.S_ISLNK(info.st_mode):
            return [(folder, LINK)]
        if not stat.S_ISDIR(info.st_mode):
            return [(folder, "not a folder")]
    return []


# The folders the services and the run user share, in the run user's group (which the services' user is a
# member of: units/agentd.sysusers). No setgid bit: what the run user makes there takes its own group, and
# what a service makes there is given that group by `make_run_dir` or `write_shared`; the units'
# RestrictSUIDSGID= refuses any chmod that sets S_ISGID (docs/decisions.md, "Judged as deployed").
# A run dir is sticky besides: the run user may make and remove its own files there, never rename or remove
# one a service put there for it (its bundle copy, a harness's settings), so what it reads is what the
# attempt's events record (docs/install-and-deploy.md, "The boundary").
RUN_DIR_MODE = 0o1770
WORKSPACE_MODE = 0o770


def make_run_dir(directory: Path, user: RunUser | None, *, mode: int = RUN_DIR_MODE) -> None:
    """A folder the run user may use: the service's, in the run user's group (which the service is a
    member of), `mode`. Without a run user, 0700."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    if user is not None:
        info = os.stat(directory, follow_symlinks=False)
        if info.st_gid != user.gid:
            os.chown(directory, -1, user.gid, follow_symlinks=False)
        if info.st_mode & 0o7777 != mode:
            os.chmod(directory, mode, follow_symlinks=False)


def keep_workspace(directory: Path, user: RunUser | None) -> str | None:
    """The workspace, as `make_run_dir` makes a run dir (its errors raised: a workspace that is not the
    run user's is the operator's to fix). One the run user owns (as `agentd install` makes it) only that
    user may change, and an attempt may have changed it (`chmod 700 $AGENTD_WORKSPACE`): its group and
    mode are put back by a process of that user, and what cannot be put back is returned, to be logged,
    never raised: an attempt must not be able to keep the services from starting
    (docs/install-and-deploy.md, "The boundary")."""
    mode = WORKSPACE_MODE
    try:
        info = os.stat(directory, follow_symlinks=False)
    except FileNotFoundError:
        info = None
    if info is None or user is None or info.st_uid != user.uid or os.geteuid() in (0, user.uid):
        make_run_dir(directory, user, mode=mode)
        return None
    if _kept(info, user, mode):
        return None
    run_as(["chgrp", "--", str(user.gid), str(directory)], user)
    # Five digits: GNU chmod keeps a folder's setgid bit for a shorter numeric mode.
    run_as(["chmod", "--", f"{mode:05o}", str(directory)], user)
    now = os.stat(directory, follow_symlinks=False)
    if _kept(now, user, mode):
        return None
    return (
        f"{directory}: mode {now.st_mode & 0o7777:04o}, group {now.st_gid}; expected {mode:04o} and group "
        f"{user.gid}, which its owner {user.name} (the run user) changed and could not put back: the services "
        "may not read what attempts leave there until it is"
    )


def _kept(info: os.stat_result, user: RunUser, mode: int) -> bool:
    return stat.S_ISDIR(info.st_mode) and info.st_gid == user.gid and info.st_mode & 0o7777 == mode


def write_shared(path: Path, text: str | bytes, user: RunUser | None) -> None:
    """A file the service writes for the attempt to read (its bundle copy, a harness's config), before
    the attempt starts: the run user's group may read it, no one may change it but the service (in a
    sticky run dir, not even rename or remove it); without a run user, 0600 like every private file.
    Written in place (`write_new`): nothing reads it until the attempt starts."""
    write_new(path, text)
    if user is not None:
        os.chown(path, -1, user.gid, follow_symlinks=False)
        os.chmod(path, 0o440, follow_symlinks=False)


_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_PLANTED_AGAIN = 3  # a name still taken after this many removals is refused (FileExistsError)


def create_private(path: Path, mode: int = 0o600) -> int:
    """A new file (`mode`) at `path`, for writing: created exclusively, never through a link. Whatever
    is there is removed first (a link is removed, not followed), so nothing planted in a folder the run
    user may write (a link to the database) can turn the service's write into a write elsewhere. The
    usual case, a free name, is one system call."""
    for _ in range(_PLANTED_AGAIN):
        try:
            return os.open(path, _NEW_FILE, mode)
        except FileExistsError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    return os.open(path, _NEW_FILE, mode)


def write_private(path: Path, text: str, *, mode: int = 0o600) -> None:
    """Write a file only the service user can read, atomically (a temporary name, then a rename): for a
    file that is read as a whole or not at all, such as an attempt's sealed manifest."""
    tmp = path.with_name(path.name + ".tmp")
    write_new(tmp, text, mode=mode)
    os.replace(tmp, path)


def write_new(path: Path, text: str | bytes, *, mode: int = 0o600) -> None:
    """Write a private file (`mode`) in place, as `create_private` creates it: for a file in a folder that
    is still being filled, whose seal comes later (an attempt's evidence before its manifest, its run
    folder before it starts). A write a crash cuts short is sealed as the crash left it by the boot
    sweep, as the attempt's other files are; the rename and the temporary's removal that an atomic
    write costs are saved (docs/evidence.md, "The attempt folder")."""
    if isinstance(text, str):
        text = text.encode("utf-8")
    with os.fdopen(create_private(path, mode), "wb") as handle:
        handle.write(text)


def hand_over(made: Path | int, folder: Path) -> None:
    """What root just made (a path, or an open file) in `folder`, another user's, becomes that user's,
    with the folder's group: an operator's command run as root leaves nothing in the services' state dir
    that they cannot open (docs/install-and-deploy.md, "Deploy on a VM"). Anyone else made it as
    themselves, and may not give it away: nothing to do."""
    if os.geteuid() != 0:
        return
    owner = os.stat(folder)
    if owner.st_uid == 0:
        return
    if isinstance(made, int):
        os.fchown(made, owner.st_uid, owner.st_gid)
    else:
        os.chown(made, owner.st_uid, owner.st_gid, follow_symlinks=False)


def private_folders(folder: Path, within: Path) -> None:
    """`folder` and the parents it lacks below `within`, each made 0700 and `within`'s owner's (hand_over)."""
    missing = [path for path in (folder, *folder.parents) if path.is_relative_to(within) and path != within]
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
            hand_over(path, within)


def remove_tree(path: Path, user: RunUser | None = None) -> None:
    """A folder an attempt (or a command) wrote in is gone, and its removal never raises: shutil.rmtree
    first (no process); what that leaves goes with `rm -rf`, as this process, then as `user`. rmtree
    recurses once per level, so a tree nested past Python's recursion limit (3,000 folders one in
    another: anything may make one) raised RecursionError; a folder the run user made unreadable to the
    service only that user may empty. A tree that still stands is logged."""
    with contextlib.suppress(RecursionError):  # rm below walks what it left
        shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):
        remove_as(path, None)
    if os.path.lexists(path) and user is not None:
        remove_as(path, user)
    if os.path.lexists(path):
        logger.warning("%s could not be removed; remove it by hand", path)


def remove_as(path: Path, user: RunUser | None) -> None:
    """`rm -rf path` as `user` (a folder the run user made unreadable to the service), or as this
    process for None; no caps pass on. GNU rm walks a tree of any depth."""
    run_as(["rm", "-rf", "--one-file-system", "--", str(path)], user)
