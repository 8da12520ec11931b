"""A backup's manifest (docs/backup-and-archive.md, "Backup"): what one backup holds, each file by its path in
the backup and its sha256, parsed strictly. Every path is a relative POSIX path of plain names: one that
names `..`, an absolute path, a link-like or empty part is refused, so a manifest never writes outside the
folder it is restored into."""

from __future__ import annotations

import json
import re
from dataclasses import field
from pathlib import PurePosixPath
from typing import Any

from agentd import frozen_value
from agentd.edge import INT64_MAX, quoted

FORMAT = "agentd-backup/1"
MANIFEST_PREFIX = "backup-"  # a folder DEST's published manifests: backup-<id>.json (docs/backup-and-archive.md)
MAX_MANIFEST_BYTES = 256 * 1024 * 1024
SHA256 = re.compile(r"^[0-9a-f]{64}$")
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+:@=-]{0,254}$")  # a plain file or folder name, never . or ..
BACKUP_ID = re.compile(r"^[0-9]{8}T[0-9]{6}Z-[0-9A-Z]{6,26}$")


class BadManifest(ValueError):
    """A manifest that is not one agentd wrote, or names a path outside its backup."""


@frozen_value
class Entry:
    """One file of the backup: where it is in the backup, its sha256 and size."""

    path: str
    sha256: str
    size: int

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "size": self.size}


@frozen_value
class Sealed:
    """One sealed attempt folder: its files are pinned by its own manifest.json, whose sha256 is here (and in
    the chain's task_attempt_finished event). `folder` is where it is in the backup."""

    task_id: int
    attempt_id: str
    folder: str
    manifest_sha256: str
    size: int = 0  # the folder's bytes: the next backup into the same folder reads them here, not from the disk

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "attempt_id": self.attempt_id,
            "folder": self.folder,
            "manifest_sha256": self.manifest_sha256,
            "size": self.size,
        }


@frozen_value
class Manifest:
    backup_id: str
    created_at: str
    agent_id: str
    schema_version: int
    state_dir: str
    chain_head: tuple[int, str] | None
    database: Entry
    config: Entry | None = None
    config_source: str | None = None
    files: tuple[Entry, ...] = ()  # the constitution's files and the open attempts' folders, each file
    sealed: tuple[Sealed, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "backup_id": self.backup_id,
            "created_at": self.created_at,
            "agent_id": self.agent_id,
            "schema_version": self.schema_version,
            "state_dir": self.state_dir,
            "chain_head": {"sequence": self.chain_head[0], "hash": self.chain_head[1]} if self.chain_head else None,
            "database": self.database.as_dict(),
            "config": self.config.as_dict() if self.config else None,
            "config_source": self.config_source,
            "files": [e.as_dict() for e in self.files],
            "sealed": [s.as_dict() for s in self.sealed],
        }

    def text(self) -> str:
        """One line per entry: readable, and quick to write for 10,000 sealed folders."""
        body = self.as_dict()
        lists = {key: body.pop(key) for key in ("files", "sealed")}
        head = json.dumps(body, indent=1, sort_keys=True)[:-2]
        parts = [head]
        for key, items in lists.items():
            rows = ",\n  ".join(json.dumps(item, sort_keys=True) for item in items)
            parts.append(f",\n {json.dumps(key)}: [\n  {rows}\n ]" if items else f",\n {json.dumps(key)}: []")
        return "".join(parts) + "\n}\n"

    def entries(self) -> list[Entry]:
        """Every file hashed here (the database, the config, the others); the sealed folders are pinned apart."""
        return [self.database, *([self.config] if self.config else []), *self.files]


def safe_path(text: object, where: str) -> str:
    """`text` if it is a relative path of plain names (no `..`, `.`, empty part, absolute start or backslash);
    BadManifest naming `where` otherwise."""
    if not isinstance(text, str) or not text or len(text) > 4096:
        raise BadManifest(f"{where}: expected a relative path, found {quoted(str(text))}")
    parts = text.split("/")
    if text.startswith("/") or any(NAME.fullmatch(part) is None for part in parts):
        raise BadManifest(
            f"{where}: expected a relative path of plain names (no .., no leading /), found {quoted(text)}"
        )
    assert not PurePosixPath(text).is_absolute() and ".." not in parts
    return text


def parse_manifest(data: bytes) -> Manifest:
    """The manifest in `data`; BadManifest saying what is wrong and where."""
    if len(data) > MAX_MANIFEST_BYTES:
        raise BadManifest(f"manifest: larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        raw = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadManifest(f"manifest: expected JSON, found invalid JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise BadManifest(f"manifest: expected a JSON object, found {type(raw).__name__}")
    if raw.get("format") != FORMAT:
        raise BadManifest(f"manifest format: expected {FORMAT!r}, found {quoted(str(raw.get('format')))}")
    backup_id = _text(raw, "backup_id")
    if BACKUP_ID.fullmatch(backup_id) is None:
        raise BadManifest(f"backup_id: expected YYYYMMDDTHHMMSSZ-ID, found {quoted(backup_id)}")
    files = _list(raw, "files")
    sealed = _list(raw, "sealed")
    config = raw.get("config")
    manifest = Manifest(
        backup_id=backup_id,
        created_at=_text(raw, "created_at"),
        agent_id=_text(raw, "agent_id"),
        schema_version=_whole(raw, "schema_version"),
        state_dir=_text(raw, "state_dir"),
        chain_head=_head(raw.get("chain_head")),
        database=_entry(raw.get("database"), "database"),
        config=None if config is None else _entry(config, "config"),
        config_source=None if raw.get("config_source") is None else _text(raw, "config_source"),
        files=tuple(_entry(item, f"files[{index}]") for index, item in enumerate(files)),
        sealed=tuple(_sealed(item, f"sealed[{index}]") for index, item in enumerate(sealed)),
    )
    _no_twice([e.path for e in manifest.entries()] + [s.folder for s in manifest.sealed])
    return manifest


def _no_twice(paths: list[str]) -> None:
    seen: set[str] = set()
    for path in paths:
        if path in seen:
            raise BadManifest(f"{path}: named twice")
        seen.add(path)


def _text(raw: dict[str, Any], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value or len(value) > 4096 or "\x00" in value:
        raise BadManifest(f"{key}: expected text, found {quoted(str(value))}")
    return value


def _whole(raw: dict[str, Any], key: str) -> int:
    value = raw.get(key)
    if type(value) is not int or not 0 <= value <= INT64_MAX:
        raise BadManifest(f"{key}: expected a whole number, found {quoted(str(value))}")
    return value


def _list(raw: dict[str, Any], key: str) -> list[Any]:
    value = raw.get(key, [])
    if not isinstance(value, list):
        raise BadManifest(f"{key}: expected a list, found {type(value).__name__}")
    return value


def _sha(raw: dict[str, Any], key: str, where: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or SHA256.fullmatch(value) is None:
        raise BadManifest(f"{where}.{key}: expected 64 lowercase hex digits, found {quoted(str(value))}")
    return value


def _head(raw: object) -> tuple[int, str] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise BadManifest("chain_head: expected {sequence, hash} or null")
    sequence = raw.get("sequence")
    if type(sequence) is not int or not 1 <= sequence <= INT64_MAX:
        raise BadManifest(f"chain_head.sequence: expected a whole number from 1, found {quoted(str(sequence))}")
    return sequence, _sha(raw, "hash", "chain_head")


def _entry(raw: object, where: str) -> Entry:
    if not isinstance(raw, dict):
        raise BadManifest(f"{where}: expected {{path, sha256, size}}, found {type(raw).__name__}")
    size = raw.get("size")
    if type(size) is not int or not 0 <= size <= INT64_MAX:
        raise BadManifest(f"{where}.size: expected a whole number of bytes, found {quoted(str(size))}")
    return Entry(safe_path(raw.get("path"), f"{where}.path"), _sha(raw, "sha256", where), size)


def _sealed(raw: object, where: str) -> Sealed:
    if not isinstance(raw, dict):
        raise BadManifest(f"{where}: expected {{task_id, attempt_id, folder, manifest_sha256}}")
    task_id = raw.get("task_id")
    if type(task_id) is not int or not 1 <= task_id <= INT64_MAX:
        raise BadManifest(f"{where}.task_id: expected a task id, found {quoted(str(task_id))}")
    attempt_id = raw.get("attempt_id")
    if not isinstance(attempt_id, str) or NAME.fullmatch(attempt_id) is None:
        raise BadManifest(f"{where}.attempt_id: expected an attempt id, found {quoted(str(attempt_id))}")
    folder = safe_path(raw.get("folder"), f"{where}.folder")
    size = raw.get("size", 0)
    if type(size) is not int or not 0 <= size <= INT64_MAX:
        raise BadManifest(f"{where}.size: expected a whole number of bytes, found {quoted(str(size))}")
    return Sealed(task_id, attempt_id, folder, _sha(raw, "manifest_sha256", where), size)
