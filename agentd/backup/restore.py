"""`agentd restore SRC` (docs/backup-and-archive.md, "Restore"): a backup put back onto a stopped agent or a fresh
state dir. Every file is copied into a staging folder inside the state dir and checked against the manifest
(each sealed attempt folder against its own manifest, whose sha256 the backup's manifest and the chain both
pin) before anything of the agent's is touched; then the database, evidence and chain head are swapped in by
renames, and what they replace is kept aside. Running tasks come back through the boot sweep, as after a crash."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentd.backup import files
from agentd.backup.manifest import MANIFEST_PREFIX, BadManifest, Entry, Manifest, parse_manifest, safe_path
from agentd.backup.take import is_archive
from agentd.clock import Clock
from agentd.errors import InputError
from agentd.evidence import inspect_attempt_dir
from agentd.evidence.layout import MANIFEST
from agentd.evidence.rollback import publish_head
from agentd.process import procs
from agentd.store import migrate, open_store
from agentd.store.backup import database_version
from agentd.store.migrations import available_migrations

DB_FILES = ("agentd.db", "agentd.db-wal", "agentd.db-shm")
STALE_STATUS_S = 30.0  # a service row refreshed this recently is a live service's (agentd/outlook/liveness.py)


class BackupRefused(InputError):
    """A backup that restore will not put back: unpublished, altered, or not for this agent without --yes."""


@dataclass
class Target:
    """Where a restore goes: the agent (its id as its TOML names it, or the backup's on a fresh machine), its
    state dir, and its identity TOML (None: written from the backup)."""

    agent_id: str
    state_dir: Path
    config_path: Path
    config_exists: bool


@dataclass
class RestoreReport:
    backup_id: str
    agent_id: str
    state_dir: str
    chain_head: tuple[int, str] | None
    sealed: int
    open_attempts: int
    files: int
    set_aside: str | None
    config: str
    notes: list[str] = field(default_factory=list)
    verify_findings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        head = self.chain_head
        return {
            "backup_id": self.backup_id,
            "agent_id": self.agent_id,
            "state_dir": self.state_dir,
            "chain_head": {"sequence": head[0], "hash": head[1]} if head else None,
            "sealed_attempts": self.sealed,
            "open_attempts": self.open_attempts,
            "files": self.files,
            "set_aside": self.set_aside,
            "config": self.config,
            "notes": self.notes,
            "verify": {"ok": not self.verify_findings, "findings": self.verify_findings},
        }


def read_manifest(src: Path, staging: Path | None = None) -> tuple[Manifest, Path]:
    """The published manifest SRC holds and the folder its paths are relative to. SRC: a backup folder (its
    latest backup), one of its backup-ID.json manifests, or an archive (unpacked into `staging`, or only read
    when there is none). BackupRefused for anything else, saying what was found."""
    src = src.absolute()
    if ".partial-" in src.name:
        raise BackupRefused(f"restore: {src}: what a backup left unfinished (never published); not a backup")
    if src.is_file() and is_archive(src):
        return _archive_manifest(src, staging)
    if src.is_file():
        return _parsed(src), src.parent
    if not src.is_dir():
        raise BackupRefused(f"restore: {src}: no backup there (expected a folder, a backup-ID.json or a .tar)")
    published = sorted(src.glob(f"{MANIFEST_PREFIX}*.json"))
    if not published:
        raise BackupRefused(f"restore: {src}: no published backup (a backup killed mid-way publishes none)")
    return _parsed(published[-1]), src


def _parsed(path: Path) -> Manifest:
    try:
        return parse_manifest(path.read_bytes())
    except BadManifest as exc:
        raise BackupRefused(f"restore: {path}: {exc}") from None


def _archive_manifest(src: Path, staging: Path | None) -> tuple[Manifest, Path]:
    """An archive's manifest (its backup-ID.json member); with `staging`, every member it names unpacked there
    as plain files (never a link, a device, or a path outside it)."""
    try:
        with tarfile.open(src) as archive:
            members = archive.getmembers()
            named = [m for m in members if m.isfile() and "/" not in m.name and m.name.startswith(MANIFEST_PREFIX)]
            if len(named) != 1:
                raise BackupRefused(f"restore: {src}: expected one {MANIFEST_PREFIX}ID.json, found {len(named)}")
            handle = archive.extractfile(named[0])
            assert handle is not None
            try:
                manifest = parse_manifest(handle.read())
            except BadManifest as exc:
                raise BackupRefused(f"restore: {src}: {exc}") from None
            if staging is not None:
                _unpack(archive, members, staging)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BackupRefused(f"restore: {src}: not a readable archive ({exc})") from None
    return manifest, staging or src.parent


def _unpack(archive: tarfile.TarFile, members: list[tarfile.TarInfo], staging: Path) -> None:
    for member in members:
        if not member.isfile() or member.name.startswith(MANIFEST_PREFIX):
            continue  # folders are made as needed; links and devices are never unpacked
        try:
            relative = safe_path(member.name, "archive member")
        except BadManifest as exc:
            raise BackupRefused(f"restore: {exc}") from None
        target = staging / relative
        files.make_folders(target.parent)
        handle = archive.extractfile(member)
        assert handle is not None
        files.write_hashed(handle.read(), target, relative)


def running_services(state_dir: Path, now: Any) -> list[str]:
    """The services of the agent at `state_dir` that run now (the dispatch lock's holder, and each service row
    a live process on this host refreshed lately), as words for the refusal; none when it has no database."""
    if not (state_dir / "agentd.db").is_file():
        return []
    store = open_store(state_dir / "agentd.db", _Now(now), readonly=True)
    try:
        holder, rows = store.dispatch_lock_holder(), store.service_statuses()
    finally:
        store.close()
    here, found = procs.this_process(), []
    if holder is not None:
        owner = procs.ProcessIdentity(holder.pid, holder.pid_started, holder.host, holder.boot_id)
        fresh = (now - holder.heartbeat_at).total_seconds() < STALE_STATUS_S
        if procs.is_running(owner, here) or (procs.is_running(owner, here) is None and fresh):
            found.append(f"the dispatcher (pid {holder.pid} on {holder.host} holds the dispatch lock)")
    for row in rows:
        if row["status"] == "stopped" or (row["service"] == "dispatch" and found):
            continue
        owner = procs.ProcessIdentity(
            row["pid"], row.get("pid_started") or 0, row.get("host") or "", row.get("boot_id") or ""
        )
        if row.get("pid_started") is not None and procs.is_running(owner, here):
            found.append(f"{row['service']} (pid {row['pid']})")
    return found


class _Now:
    def __init__(self, now: Any) -> None:
        self._now = now

    def now(self) -> Any:
        return self._now

    def monotonic(self) -> float:
        return time.monotonic()


def what_differs(manifest: Manifest, target: Target) -> list[str]:
    """What a restore onto `target` changes beyond putting the agent back as it was: another agent's backup,
    or a database of another schema version. A newer schema than this agentd knows is refused."""
    latest = max(m.version for m in available_migrations())
    if manifest.schema_version > latest:
        raise BackupRefused(
            f"restore: the backup's database is schema version {manifest.schema_version}, newer than this agentd's "
            f"{latest}; restore it with the agentd that made it (or a newer one)"
        )
    notes = []
    if manifest.agent_id != target.agent_id:
        notes.append(
            f"the backup is agent {manifest.agent_id!r}'s; its tasks, events and evidence become agent "
            f"{target.agent_id!r}'s"
        )
    if manifest.schema_version < latest:
        notes.append(f"the backup's database (schema version {manifest.schema_version}) is migrated to {latest}")
    return notes


def restore(src: Path, target: Target, clock: Clock) -> RestoreReport:
    """Put the backup at `src` back as `target`. BackupRefused (nothing of the agent's written) for a backup
    that is unpublished or altered, or while a service of the agent runs."""
    state_dir = target.state_dir
    files.make_folders(state_dir)
    staging = state_dir / f".restore-{os.getpid()}"
    files.remove(staging)
    files.make_folders(staging)
    try:
        manifest, root = read_manifest(src, staging / "src")
        _refuse_if_running(state_dir, clock)
        new, report = _stage(manifest, root, staging, target)
        _refuse_if_running(state_dir, clock)
        report.set_aside = _swap(manifest, new, state_dir)
    finally:
        files.remove(staging)
    _settle(manifest, target, clock, report)
    return report


def _refuse_if_running(state_dir: Path, clock: Clock) -> None:
    running = running_services(state_dir, clock.now())
    if running:
        raise BackupRefused(
            f"restore: a service of this agent runs ({'; '.join(running)}); stop it first "
            "(`systemctl stop agentd@NAME.target`, or end `agentd run`)"
        )


def _stage(manifest: Manifest, root: Path, staging: Path, target: Target) -> tuple[Path, RestoreReport]:
    """Every file of the backup copied into `staging`/new and checked; BackupRefused naming the first problems."""
    new = staging / "new"
    files.make_folders(new / "attempts")
    problems: list[str] = []
    copied = _copy_entries(manifest, root, staging, new, problems)
    for sealed in manifest.sealed:
        folder = new / "attempts" / str(sealed.task_id) / sealed.attempt_id
        files.make_folders(folder.parent)
        try:
            files.copy_folder(root / sealed.folder, folder)
        except OSError as exc:
            problems.append(f"{sealed.folder}: cannot be read ({exc.strerror or exc})")
            continue
        found = inspect_attempt_dir(folder)
        if found.manifest_sha256 != sealed.manifest_sha256:
            problems.append(
                f"{sealed.folder}/{MANIFEST}: sha256 {found.manifest_sha256} differs from the backup's "
                f"{sealed.manifest_sha256}"
            )
        problems += [
            f"{sealed.folder}: {p.replace(str(folder) + '/', '').replace(str(folder), '')}" for p in found.problems
        ]
    if not problems:
        problems += _head_problems(manifest, new / "agentd.db")
    if problems:
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        raise BackupRefused(f"restore: the backup does not match its manifest, nothing restored: {shown}")
    report = RestoreReport(
        manifest.backup_id,
        target.agent_id,
        str(target.state_dir),
        manifest.chain_head,
        len(manifest.sealed),
        len({e.path.split("/")[4] for e in manifest.files if e.path.split("/")[2:3] == ["open"]}),
        copied + sum(1 for _ in manifest.sealed),
        None,
        str(target.config_path),
    )
    return new, report


def _copy_entries(manifest: Manifest, root: Path, staging: Path, new: Path, problems: list[str]) -> int:
    """The database, config, constitution and open attempts' files, each checked as it is copied."""
    prefix = f"snapshots/{manifest.backup_id}/"
    copied = 0
    for entry in manifest.entries():
        if not entry.path.startswith(prefix):
            problems.append(f"{entry.path}: outside this backup's snapshot ({prefix})")
            continue
        inner = entry.path.removeprefix(prefix)
        place = _place(inner, staging, new)
        if place is None:
            problems.append(f"{entry.path}: not a file a backup holds")
            continue
        files.make_folders(place.parent)
        try:
            found = files.copy_hashed(root / entry.path, place, entry.path)
        except OSError as exc:
            problems.append(f"{entry.path}: cannot be read ({exc.strerror or exc})")
            continue
        problems += _differs(entry, found)
        copied += 1
    return copied


def _place(inner: str, staging: Path, new: Path) -> Path | None:
    parts = inner.split("/")
    if inner == "agentd.db":
        return new / "agentd.db"
    if inner == "config.toml" or (len(parts) == 2 and parts[0] == "constitution" and parts[1] in ("soul", "purpose")):
        return staging / inner
    if len(parts) == 4 and parts[0] == "open" and parts[1].isdigit():
        return new / "attempts" / parts[1] / parts[2] / parts[3]
    return None


def _differs(entry: Entry, found: Entry) -> list[str]:
    if found.sha256 != entry.sha256 or found.size != entry.size:
        return [f"{entry.path}: sha256 {found.sha256} ({found.size} bytes) differs from the manifest's {entry.sha256}"]
    return []


def _head_problems(manifest: Manifest, database: Path) -> list[str]:
    store = open_store(database, _Now(None), readonly=True) if _current(database) else None
    if store is None:
        return []  # an older schema: its head is checked after the migration, by evidence verify
    try:
        head = store.chain_head()
    finally:
        store.close()
    return [] if head == manifest.chain_head else [f"the database's chain head {head} is not the manifest's"]


def _current(database: Path) -> bool:
    return database_version(database) == max(m.version for m in available_migrations())


def _swap(manifest: Manifest, new: Path, state_dir: Path) -> str | None:
    """The staged database and evidence in place of the state dir's; what they replace kept in .replaced-ID."""
    aside = state_dir / f"replaced-before-{manifest.backup_id}"
    moved = False
    for name in (*DB_FILES, "attempts", "chain_head"):
        if os.path.lexists(state_dir / name):
            files.make_folders(aside)
            os.rename(state_dir / name, aside / name)
            moved = True
    os.rename(new / "agentd.db", state_dir / "agentd.db")
    os.rename(new / "attempts", state_dir / "attempts")
    files.sync_folder(state_dir)
    return str(aside) if moved else None


def _settle(manifest: Manifest, target: Target, clock: Clock, report: RestoreReport) -> None:
    """The restored database brought to this agentd's schema, moved to this state dir, its old services
    forgotten; the chain head published beside it."""
    database = target.state_dir / "agentd.db"
    migrate(database, clock)
    store = open_store(database, clock)
    try:
        if str(target.state_dir) != manifest.state_dir:
            store.relocate_evidence_dirs(f"{manifest.state_dir}/attempts", f"{target.state_dir}/attempts")
        store.forget_services()
        head = store.chain_head()
    finally:
        store.close()
    if head is not None:
        publish_head(target.state_dir, head, force=True)


@contextlib.contextmanager
def staged_config(src: Path) -> Iterator[tuple[Manifest, bytes | None, dict[str, bytes]]]:
    """The backup's identity TOML and constitution files, checked against the manifest, read from SRC without
    writing anything: what `agentd restore` writes where the agent's config is missing."""
    with tempfile.TemporaryDirectory(prefix="agentd-restore-") as scratch:
        manifest, root = read_manifest(src, Path(scratch) / "src" if is_archive(src) else None)
        found: dict[str, bytes] = {}
        config: bytes | None = None
        for entry in manifest.entries():
            inner = entry.path.removeprefix(f"snapshots/{manifest.backup_id}/")
            if inner != "config.toml" and not inner.startswith("constitution/"):
                continue
            data = (root / entry.path).read_bytes()
            probe = Entry(entry.path, hashlib.sha256(data).hexdigest(), len(data))
            if _differs(entry, probe):
                raise BackupRefused(
                    f"restore: the backup does not match its manifest, nothing restored: {_differs(entry, probe)[0]}"
                )
            if inner == "config.toml":
                config = data
            else:
                found[inner.removeprefix("constitution/")] = data
        yield manifest, config, found
