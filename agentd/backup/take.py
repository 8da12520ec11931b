"""`agentd backup DEST` (docs/backup-and-archive.md, "Backup"): one consistent snapshot of an agent while its
services run. The database through SQLite's online backup; from that copy, which attempts exist: their sealed
evidence folders, the open ones' folders as they are, the identity TOML, the constitution and the chain head;
a manifest of sha256s published last, by a rename, so what a killed backup leaves is never a backup."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentd import frozen_value
from agentd.backup import files
from agentd.backup.manifest import MANIFEST_PREFIX, Entry, Manifest, Sealed
from agentd.clock import Clock, format_ts
from agentd.config import Config
from agentd.errors import InputError
from agentd.evidence.layout import MANIFEST
from agentd.hashing import new_ulid
from agentd.outlook.backups import record_success
from agentd.store import open_store
from agentd.store.backup import snapshot_database

ARCHIVE_SUFFIXES = (".tar", ".tar.gz", ".tgz")
# What the seal writes: an open attempt's folder is copied without them, so the boot sweep after a restore
# seals it as it would after a crash (agentd/attempt/sweep.py).
SEALED_LATER = (MANIFEST, "action_trace.jsonl")


@dataclass
class BackupReport:
    backup_id: str
    dest: str
    manifest: str
    created_at: str
    agent_id: str
    schema_version: int
    chain_head: tuple[int, str] | None
    sealed_copied: int = 0
    sealed_reused: int = 0
    open_attempts: int = 0
    bytes_copied: int = 0
    bytes_total: int = 0
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        head = self.chain_head
        return {
            "backup_id": self.backup_id,
            "dest": self.dest,
            "manifest": self.manifest,
            "created_at": self.created_at,
            "agent_id": self.agent_id,
            "schema_version": self.schema_version,
            "chain_head": {"sequence": head[0], "hash": head[1]} if head else None,
            "sealed_copied": self.sealed_copied,
            "sealed_reused": self.sealed_reused,
            "open_attempts": self.open_attempts,
            "bytes_copied": self.bytes_copied,
            "bytes_total": self.bytes_total,
            "seconds": round(self.seconds, 3),
            "problems": self.problems,
        }


@frozen_value
class Held:
    """An attempt a backup holds: its task and id (where its folder is)."""

    task_id: int
    attempt_id: str


def is_archive(dest: Path) -> bool:
    return dest.name.endswith(ARCHIVE_SUFFIXES)


def take_backup(config: Config, dest: Path, clock: Clock) -> BackupReport:
    """Back the agent up into `dest` (a folder, or an archive file ending .tar, .tar.gz or .tgz) and record it
    as the last good backup. InputError for a DEST that cannot be one."""
    dest = dest.absolute()
    started, now = clock.monotonic(), clock.now()
    backup_id = f"{now:%Y%m%dT%H%M%SZ}-{new_ulid(clock)[-10:]}"
    if _inside(dest, config.paths.state_dir):
        raise InputError(
            f"backup: DEST {dest} is inside the state dir {config.paths.state_dir}; give a place outside it"
        )
    target: Target = ArchiveTarget(dest, backup_id) if is_archive(dest) else FolderTarget(dest, backup_id)
    with target.open():
        report, manifest = _fill(config, target, backup_id, now)
        target.publish(manifest)
    report.seconds = clock.monotonic() - started
    record_success(config.paths.state_dir, report.backup_id, now, str(dest), report.bytes_total, config.backup.every_s)
    return report


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _fill(config: Config, target: Target, backup_id: str, now: Any) -> tuple[BackupReport, Manifest]:
    snapshot = f"snapshots/{backup_id}"
    database = target.build / "agentd.db"
    snapshot_database(config.db_path, database)
    store = open_store(database, _NoClock(), readonly=True)
    try:
        attempts, sealed, head, version = (
            store.backup_attempts(),
            store.sealed_manifests(),
            store.chain_head(),
            store.schema_version,
        )
    finally:
        store.close()
    sha, size = files.hashed(database)
    report = BackupReport(
        backup_id, str(target.dest), target.manifest_name, format_ts(now), config.agent.agent_id, version, head
    )
    db_entry = Entry(f"{snapshot}/agentd.db", sha, size)
    config_entry = files.copy_hashed(config.path, target.build / "config.toml", f"{snapshot}/config.toml")
    extra = _constitution(config, target, snapshot)
    sealed_entries: list[Sealed] = []
    for task_id, attempt_id, ended, pruned in attempts:
        attempt = Held(task_id, attempt_id)
        if not ended:
            extra += _open_attempt(config, target, snapshot, attempt)
            report.open_attempts += 1
        elif not pruned:
            found = _sealed_attempt(config, target, attempt, sealed.get(attempt_id), report)
            sealed_entries += [found] if found else []
    report.bytes_total += sum(e.size for e in (db_entry, config_entry, *extra))
    report.bytes_copied += sum(e.size for e in (db_entry, config_entry, *extra))
    manifest = Manifest(
        backup_id=backup_id,
        created_at=format_ts(now),
        agent_id=config.agent.agent_id,
        schema_version=version,
        state_dir=str(config.paths.state_dir),
        chain_head=head,
        database=db_entry,
        config=config_entry,
        config_source=str(config.path),
        files=tuple(extra),
        sealed=tuple(sealed_entries),
    )
    return report, manifest


def _constitution(config: Config, target: Target, snapshot: str) -> list[Entry]:
    """SOUL.md and PURPOSE.md as the TOML names them (`constitution accept` rewrites them: agentd's own)."""
    folder = target.build / "constitution"
    files.make_folders(folder)
    found = []
    for key, path in (("soul", config.constitution.soul_path), ("purpose", config.constitution.purpose_path)):
        source = Path(path) if Path(path).is_absolute() else config.path.parent / path
        if source.is_file():
            found.append(files.copy_hashed(source, folder / key, f"{snapshot}/constitution/{key}"))
    return found


def _open_attempt(config: Config, target: Target, snapshot: str, attempt: Held) -> list[Entry]:
    """A running attempt's folder as it is now, but what its seal writes (the boot sweep seals it after a restore)."""
    source = config.paths.state_dir / "attempts" / str(attempt.task_id) / attempt.attempt_id
    if not source.is_dir() or source.is_symlink():
        return []
    relative = f"open/{attempt.task_id}/{attempt.attempt_id}"
    files.make_folders(target.build / relative)
    entries = []
    for name in files.regular_files(source):
        if name in SEALED_LATER or name.endswith(".tmp"):
            continue
        with contextlib.suppress(FileNotFoundError):  # sealed and swept meanwhile: that is the next backup's
            entries.append(
                files.copy_hashed(source / name, target.build / relative / name, f"{snapshot}/{relative}/{name}")
            )
    return entries


def _sealed_attempt(
    config: Config, target: Target, attempt: Held, recorded: tuple[int, str] | None, report: BackupReport
) -> Sealed | None:
    """One sealed folder into the backup, or found there already: the same manifest (by the sha256 the chain
    recorded) means the same folder, since a sealed folder never changes."""
    folder = f"evidence/{attempt.task_id}/{attempt.attempt_id}"
    expected = recorded[1] if recorded is not None else None
    kept = target.kept(folder, expected) if expected is not None else None
    if kept is not None:
        report.sealed_reused += 1
        report.bytes_total += kept
        return Sealed(attempt.task_id, attempt.attempt_id, folder, expected, kept)  # type: ignore[arg-type]
    source = config.paths.state_dir / "attempts" / str(attempt.task_id) / attempt.attempt_id
    try:
        copied = target.put_sealed(source, folder)
    except FileNotFoundError:
        report.problems.append(f"{source}: no evidence folder; not backed up (`agentd evidence verify` names it)")
        return None
    if MANIFEST not in copied:
        report.problems.append(f"{source}: no sealed manifest; not backed up (`agentd evidence verify` names it)")
        return None
    sha, size = copied[MANIFEST].sha256, sum(e.size for e in copied.values())
    if expected is not None and expected != sha:
        report.problems.append(f"{source / MANIFEST}: sha256 {sha} differs from the one event {recorded[0]} recorded")  # type: ignore[index]
    report.sealed_copied += 1
    report.bytes_copied += size
    report.bytes_total += size
    return Sealed(attempt.task_id, attempt.attempt_id, folder, sha, size)


class _NoClock:
    """The snapshot is only read: nothing in it asks the time."""

    def now(self) -> Any:
        raise AssertionError("a backup's snapshot is read only")

    def monotonic(self) -> float:
        return time.monotonic()


class Target:
    """Where a backup is written: `build` is the folder this backup's own files go in until it is published."""

    dest: Path
    build: Path
    manifest_name: str

    @contextlib.contextmanager
    def open(self) -> Iterator[None]:
        raise NotImplementedError

    def kept(self, folder: str, manifest_sha256: str) -> int | None:
        """The size of the sealed folder at `folder` when a backup already holds it with this manifest; else None."""
        return None

    def put_sealed(self, source: Path, folder: str) -> dict[str, Entry]:
        """Copy a sealed attempt folder to `folder`: its files, each hashed as copied."""
        raise NotImplementedError

    def publish(self, manifest: Manifest) -> None:
        raise NotImplementedError


class FolderTarget(Target):
    """A folder DEST: sealed evidence kept once for every backup (evidence/TASK/ATTEMPT), each backup's own
    files in snapshots/ID, and its manifest backup-ID.json, the last thing written."""

    def __init__(self, dest: Path, backup_id: str) -> None:
        self.dest, self.backup_id = dest, backup_id
        self.build = dest / "snapshots" / f".partial-{backup_id}"
        self.manifest_name = str(dest / f"{MANIFEST_PREFIX}{backup_id}.json")
        self.sizes: dict[str, tuple[str, int]] = {}  # folder → (manifest sha256, bytes), as the last backup listed
        self.copied: list[Path] = []  # the sealed folders this backup copied (flushed before the manifest)

    @contextlib.contextmanager
    def open(self) -> Iterator[None]:
        if self.dest.exists() and not self.dest.is_dir():
            raise InputError(f"backup: DEST {self.dest} is a file; give a folder, or a path ending .tar or .tar.gz")
        files.make_folders(self.dest / "snapshots")
        files.make_folders(self.dest / "evidence")
        lock = os.open(self.dest / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise InputError(
                    f"backup: another backup is writing to {self.dest}; try again when it is done"
                ) from None
            self._clear_leftovers()
            self.sizes = self._last_sizes()
            files.make_folders(self.build)
            try:
                yield
            finally:
                files.remove(self.build)
        finally:
            os.close(lock)

    def _last_sizes(self) -> dict[str, tuple[str, int]]:
        """Each sealed folder's (manifest sha256, bytes) as the last published manifest lists them: only numbers
        for the report, each matched by the folder's own manifest before it is used, so the file is read, not
        judged (a restore judges it)."""
        published = sorted(self.dest.glob(f"{MANIFEST_PREFIX}*.json"))
        try:
            listed = json.loads(published[-1].read_bytes())["sealed"] if published else []
            return {str(s["folder"]): (str(s["manifest_sha256"]), int(s["size"])) for s in listed}
        except (OSError, ValueError, KeyError, TypeError):
            return {}  # each kept folder's size is read from the disk instead

    def _clear_leftovers(self) -> None:
        """What a killed backup left: snapshots whose manifest was never published. (A sealed folder it left half
        copied, evidence/TASK/.partial-ATTEMPT, is removed when that folder is copied again: never restored.)"""
        published = {
            p.name.removeprefix(MANIFEST_PREFIX).removesuffix(".json")
            for p in self.dest.glob(f"{MANIFEST_PREFIX}*.json")
        }
        for snapshot in (self.dest / "snapshots").iterdir():
            if snapshot.name not in published:
                files.remove(snapshot)
        for partial in self.dest.glob(".*.partial-*"):
            files.remove(partial)

    def kept(self, folder: str, manifest_sha256: str) -> int | None:
        """Found by reading the folder's manifest.json in DEST (one small read): the size from the last published
        manifest that lists it, else from the folder itself."""
        where = f"{self.dest}/{folder}"  # strings, not Paths: this runs once per sealed folder of the agent
        try:
            if files.hashed(f"{where}/{MANIFEST}")[0] != manifest_sha256:
                return None
        except OSError:
            return None
        known = self.sizes.get(folder)
        if known is not None and known[0] == manifest_sha256:
            return known[1]
        return sum(os.stat(f"{where}/{name}").st_size for name in files.regular_files(Path(where)))

    def put_sealed(self, source: Path, folder: str) -> dict[str, Entry]:
        final = self.dest / folder
        files.make_folders(final.parent)
        partial = final.with_name(f".partial-{final.name}")
        files.remove(partial)
        copied = files.copy_folder(source, partial)
        files.remove(final)
        os.rename(partial, final)
        self.copied.append(final)
        return copied

    def publish(self, manifest: Manifest) -> None:
        snapshot = self.dest / "snapshots" / self.backup_id
        os.rename(self.build, snapshot)
        files.publish(manifest.text().encode(), Path(self.manifest_name), [snapshot, *self.copied])


class ArchiveTarget(Target):
    """An archive file DEST: everything in one tar (gzip for .tar.gz/.tgz), the manifest its last member,
    written under a temporary name and renamed into place whole."""

    def __init__(self, dest: Path, backup_id: str) -> None:
        self.dest, self.backup_id = dest, backup_id
        self.root = dest.with_name(f".{dest.name}.partial-{backup_id}")
        self.build = self.root / "snapshots" / backup_id
        self.manifest_name = str(dest)

    @contextlib.contextmanager
    def open(self) -> Iterator[None]:
        if self.dest.is_dir():
            raise InputError(f"backup: DEST {self.dest} is a folder; an archive path ends .tar or .tar.gz")
        if not self.dest.parent.is_dir():
            raise InputError(f"backup: DEST's folder {self.dest.parent} does not exist")
        for leftover in self.dest.parent.glob(f".{self.dest.name}.partial-*"):
            files.remove(leftover)
        files.make_folders(self.build)
        try:
            yield
        finally:
            files.remove(self.root)

    def put_sealed(self, source: Path, folder: str) -> dict[str, Entry]:
        files.make_folders((self.root / folder).parent)
        return files.copy_folder(source, self.root / folder)

    def publish(self, manifest: Manifest) -> None:
        partial = self.dest.with_name(f".{self.dest.name}.partial-{self.backup_id}.tar")
        mode = "w:gz" if self.dest.name.endswith((".tar.gz", ".tgz")) else "w"
        with tarfile.open(partial, mode, format=tarfile.PAX_FORMAT) as archive:  # type: ignore[call-overload]
            for path in sorted(self._files()):
                archive.add(path, arcname=str(path.relative_to(self.root)), recursive=False)
            data = manifest.text().encode()
            info = tarfile.TarInfo(f"{MANIFEST_PREFIX}{self.backup_id}.json")
            info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
            archive.addfile(info, _bytes(data))
        os.chmod(partial, 0o600)
        _rename_durably(partial, self.dest)

    def _files(self) -> Iterator[Path]:
        for folder, _, names in os.walk(self.root):
            for name in names:
                yield Path(folder) / name


def _bytes(data: bytes) -> Any:
    import io

    return io.BytesIO(data)


def _rename_durably(partial: Path, final: Path) -> None:
    fd = os.open(partial, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(partial, final)
    files.sync_folder(final.parent)
