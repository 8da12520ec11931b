"""Copying a backup's files: each regular file read without following a link, hashed as it is copied,
written new (0600) and never through a link; a folder published whole by a rename."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from pathlib import Path

from agentd.backup.manifest import Entry

CHUNK = 1 << 20
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def copy_hashed(source: Path, target: Path, relative: str) -> Entry:
    """`source` copied to the new file `target` (0600); its Entry at `relative` with the sha256 of what was
    copied. A link or a file that is not regular is refused (OSError)."""
    digest, size = hashlib.sha256(), 0
    src = os.open(source, _READ)
    try:
        if not _regular(src):
            raise OSError(f"{source}: not a regular file (never copied)")
        dst = os.open(target, _WRITE, 0o600)
        try:
            while block := os.read(src, CHUNK):
                digest.update(block)
                size += len(block)
                _write_all(dst, block)
        finally:
            os.close(dst)
    finally:
        os.close(src)
    return Entry(relative, digest.hexdigest(), size)


def write_hashed(data: bytes, target: Path, relative: str) -> Entry:
    fd = os.open(target, _WRITE, 0o600)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)
    return Entry(relative, hashlib.sha256(data).hexdigest(), len(data))


def hashed(path: Path | str) -> tuple[str, int]:
    """(sha256, size) of the regular file at `path`, never through a link."""
    digest, size = hashlib.sha256(), 0
    fd = os.open(path, _READ)
    try:
        if not _regular(fd):
            raise OSError(f"{path}: not a regular file")
        while block := os.read(fd, CHUNK):
            digest.update(block)
            size += len(block)
    finally:
        os.close(fd)
    return digest.hexdigest(), size


def regular_files(folder: Path) -> list[str]:
    """The names of the regular files directly in `folder` (links, folders and the rest are not evidence)."""
    with os.scandir(folder) as entries:
        return sorted(e.name for e in entries if e.is_file(follow_symlinks=False))


def copy_folder(source: Path, target: Path) -> dict[str, Entry]:
    """The regular files of `source` into the new folder `target` (0700): each by name, hashed as copied."""
    os.mkdir(target, 0o700)
    return {name: copy_hashed(source / name, target / name, name) for name in regular_files(source)}


def make_folders(path: Path) -> None:
    """`path` and its missing parents, each 0700."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)


def remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def sync_folder(folder: Path) -> None:
    """A rename in `folder` made durable."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


SYNC_EACH_UP_TO = 2_000  # files written: more, and one sync of the disks costs less than an fsync each


def flush_written(folders: list[Path]) -> None:
    """What was written into `folders` made durable: each file and folder fsynced when they are few (an
    incremental backup: a busy machine's other writes are not waited for), one sync of every disk when many."""
    written = [Path(root) / name for folder in folders for root, _, names in os.walk(folder) for name in names]
    if len(written) > SYNC_EACH_UP_TO:
        os.sync()
        return
    for path in written:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    for folder in {path.parent for path in written} | {folder.parent for folder in folders}:
        sync_folder(folder)


def publish(data: bytes, target: Path, written: list[Path]) -> None:
    """`data` at `target` whole or not at all: written under a temporary name, flushed, renamed, the folder
    flushed; what it names (the files in the `written` folders) is flushed first."""
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    remove(partial)
    fd = os.open(partial, _WRITE, 0o600)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    flush_written(written)  # the files the manifest names are on the disk before the manifest that names them
    os.rename(partial, target)
    sync_folder(target.parent)


def _regular(fd: int) -> bool:
    import stat

    return stat.S_ISREG(os.fstat(fd).st_mode)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
