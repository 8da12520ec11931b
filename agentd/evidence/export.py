"""`agentd evidence export`: a task's sealed evidence for someone else's tools.

- tracecore: one TraceCore v1.0 run artifact per attempt (agentd/evidence/tracecore.py), `<attempt>.json`.
- bundle: one .tar.gz with index.json (what is inside, the chain head, each attempt's manifest
  sha256 and artifact_hash, what was skipped and why), `chain_head` (SEQ:HASH, as `evidence verify
  --expect-head` takes it), every attempt folder as sealed (scratch/ is never evidence) and the
  TraceCore artifacts.

Only attempts whose evidence passes the check `evidence verify` makes are exported; the others are
skipped, named with why (the command exits 1). Nothing is followed: every file is read through a
descriptor opened without following a link, and the archive holds regular files only.

Read-only on the state dir. Everything is written beside its target first and moved into place
whole, so a failure leaves nothing half-written.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentd import __version__, frozen_value
from agentd.errors import InputError
from agentd.evidence import EVIDENCE_FILES, MANIFEST
from agentd.evidence.action_trace import TRACE_FILE, parse_trace
from agentd.evidence.tracecore import run_artifact
from agentd.evidence.verify import checked_attempt
from agentd.faults import refused_about
from agentd.process.files import Refused, open_beneath, read_whole_beneath, sha256_beneath
from agentd.records import TaskAttempt
from agentd.store import Store

BUNDLE_SPEC = "agentd-evidence-bundle/v1"


@dataclass
class Exported:
    attempts: list[str] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)  # {task_id, attempt_id, why}: exit 1
    pruned: list[str] = field(default_factory=list)  # attempts whose evidence retention removed (not a fault)


@frozen_value
class Sealed:
    attempt: TaskAttempt
    root: Path
    manifest: dict[str, Any]


def sealed_attempts(store: Store, state_dir: Path, task_ids: list[int], exported: Exported) -> list[Sealed]:
    """The tasks' attempts whose evidence passes the check `evidence verify` makes (agentd/evidence/verify.py);
    the others are listed as skipped with why (still running, a link, an edited file, …)."""
    found = []
    sealed = store.sealed_manifests()
    for attempts in store.attempts_by_task(task_ids).values():
        for attempt in attempts:
            if attempt.evidence_pruned_at is not None:
                exported.pruned.append(attempt.attempt_id)
                continue
            manifest, findings = checked_attempt(state_dir, attempt, sealed.get(attempt.attempt_id))
            why = "still running" if attempt.ended_at is None else "; ".join(str(f) for f in findings[:5])
            if len(findings) > 5:
                why += f"; and {len(findings) - 5} more (`agentd evidence verify --task {attempt.task_id}`)"
            if manifest is None or findings:
                exported.skipped.append({"task_id": attempt.task_id, "attempt_id": attempt.attempt_id, "why": why})
                continue
            found.append(Sealed(attempt, state_dir / "attempts" / str(attempt.task_id) / attempt.attempt_id, manifest))
    return found


def tracecore_artifact(store: Store, sealed: Sealed) -> dict[str, Any]:
    trace_ulid = (
        store.enqueued_event_id(sealed.attempt.task_id) or store.attempts_of(sealed.attempt.task_id)[0].attempt_id
    )
    try:
        steps = parse_trace(read_whole_beneath(sealed.root, TRACE_FILE) or b"")
        return run_artifact(sealed.manifest, steps, trace_ulid=trace_ulid)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{sealed.root}: the manifest or action trace cannot be exported: {exc!r}") from None


def export_tracecore(store: Store, state_dir: Path, task_ids: list[int], out: Path) -> Exported:
    """Write `<out>/<attempt_id>.json` for each sealed attempt; `out` must not exist yet."""
    exported = Exported()
    with _staging(out) as staging:
        staging.mkdir(mode=0o700)
        for sealed in sealed_attempts(store, state_dir, task_ids, exported):
            artifact = tracecore_artifact(store, sealed)
            (staging / f"{sealed.attempt.attempt_id}.json").write_text(_json(artifact), encoding="utf-8")
            exported.attempts.append(sealed.attempt.attempt_id)
    return exported


def export_bundle(store: Store, state_dir: Path, task_ids: list[int], out: Path, now: str | None = None) -> Exported:
    """Write one .tar.gz at `out` (which must not exist yet)."""
    exported = Exported()
    head = store.chain_head()
    entries: list[tuple[Path | bytes, str]] = []  # (the attempt folder, the file's name) or the bytes
    index_attempts = []
    for sealed in sealed_attempts(store, state_dir, task_ids, exported):
        attempt = sealed.attempt
        folder = f"attempts/{attempt.task_id}/{attempt.attempt_id}"
        for name in (*EVIDENCE_FILES, MANIFEST):
            if (sealed.root / name).exists():  # checked: a regular file, never a link
                entries.append((sealed.root / name, f"{folder}/{name}"))
        artifact = tracecore_artifact(store, sealed)
        index_attempts.append(
            {
                "task_id": attempt.task_id,
                "attempt_id": attempt.attempt_id,
                "folder": folder,
                "manifest_sha256": sha256_beneath(sealed.root, MANIFEST),
                "artifact_hash": sealed.manifest.get("artifact_hash"),
                "tracecore": f"tracecore/{attempt.attempt_id}.json",
                "tracecore_artifact_hash": artifact["artifact_hash"],
            }
        )
        entries.append((_json(artifact).encode(), f"tracecore/{attempt.attempt_id}.json"))
        exported.attempts.append(attempt.attempt_id)
    index = {
        "spec_version": BUNDLE_SPEC,
        "agentd_version": __version__,
        "exported_at": now,
        "task_ids": task_ids,
        "chain_head": {"sequence": head[0], "hash": head[1]} if head else None,
        "attempts": index_attempts,
        "skipped": exported.skipped,
        "pruned": exported.pruned,
    }
    with (
        _staging(out) as staging,
        open(os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as file,  # as evidence is
        tarfile.open(fileobj=file, mode="w:gz") as tar,
    ):
        _add_bytes(tar, "index.json", _json(index).encode())
        _add_bytes(tar, "chain_head", (f"{head[0]}:{head[1]}\n" if head else "").encode())
        for source, name in entries:
            if isinstance(source, bytes):
                _add_bytes(tar, name, source)
            else:
                _add_file(tar, source, name)
    return exported


@contextmanager
def _staging(out: Path) -> Iterator[Path]:
    """A path in a temporary sibling of `out`, moved to `out` only when everything was written. A link
    at `out` (dangling or not) or as its folder is refused: the export never writes through one. Any
    other OSError on the way (a name too long, a full disk, a read-only folder) is one line, with
    nothing written at `out`."""
    try:
        with _staged(out) as staging:
            yield staging
    except Refused:
        raise  # a planted link met while reading the evidence: the caller's finding
    except OSError as exc:
        raise InputError(f"cannot export to {out}: {refused_about(exc, out)}; nothing was written there") from None


@contextmanager
def _staged(out: Path) -> Iterator[Path]:
    for path, what in ((out, "--out"), (out.parent, "--out's folder")):
        if path.is_symlink():
            raise InputError(f"{path} is a symbolic link ({what}); give a path without one. Nothing was written")
    if os.path.lexists(out):
        raise InputError(f"{out} already exists; give --out a path that does not")
    if not out.parent.is_dir():
        raise InputError(f"{out.parent} is not a directory")
    temp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield temp / out.name
        if os.path.lexists(out):  # it appeared meanwhile: never replaced (rename would replace a link)
            raise InputError(f"{out} appeared while the export was written; nothing was written there")
        os.rename(temp / out.name, out)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _add_file(tar: tarfile.TarFile, source: Path, name: str) -> None:
    """An evidence file as a regular member, read through a descriptor opened without following a
    link (agentd/process/files.py): whatever is at the path now, the archive holds a file's bytes or fails."""
    with open_beneath(source.parent, source.name) as fd, os.fdopen(os.dup(fd), "rb") as handle:
        info = tarfile.TarInfo(name)
        status = os.fstat(fd)
        info.size, info.mode, info.mtime = status.st_size, 0o600, int(status.st_mtime)
        tar.addfile(info, handle)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o600
    tar.addfile(info, io.BytesIO(data))


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
