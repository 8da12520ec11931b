"""`agentd evidence export`: a task's sealed evidence for someone else's tools.

- tracecore: one TraceCore v1.0 run artifact per attempt (agentd/tracecore.py), `<attempt>.json`.
- bundle: one .tar.gz with index.json (what is inside, the chain head, each attempt's manifest
  sha256 and artifact_hash), `chain_head` (SEQ:HASH, as `evidence verify --expect-head` takes it),
  every attempt folder as sealed (scratch/ is never evidence) and the TraceCore artifacts.

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

from agentd import __version__
from agentd.action_trace import TRACE_FILE, read_trace
from agentd.errors import InputError
from agentd.evidence import EVIDENCE_FILES, MANIFEST, load_manifest
from agentd.hashing import sha256_file
from agentd.records import TaskAttempt
from agentd.store import Store
from agentd.tracecore import run_artifact

BUNDLE_SPEC = "agentd-evidence-bundle/v1"


@dataclass
class Exported:
    attempts: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # attempt: why it has no artifact


@dataclass(frozen=True)
class Sealed:
    attempt: TaskAttempt
    root: Path
    manifest: dict[str, Any]


def sealed_attempts(store: Store, state_dir: Path, task_ids: list[int], exported: Exported) -> list[Sealed]:
    """The tasks' attempts that ended with a readable manifest; the others are listed as skipped."""
    found = []
    for attempts in store.attempts_by_task(task_ids).values():
        for attempt in attempts:
            root = state_dir / "attempts" / str(attempt.task_id) / attempt.attempt_id
            why = None
            if attempt.ended_at is None:
                why = "still running"
            elif attempt.evidence_pruned_at is not None:
                why = "its evidence was pruned"
            manifest, problems = (None, []) if why else load_manifest(root)
            if manifest is None:
                exported.skipped.append(f"{attempt.attempt_id}: {why or '; '.join(problems)}")
                continue
            found.append(Sealed(attempt, root, manifest))
    return found


def tracecore_artifact(store: Store, sealed: Sealed) -> dict[str, Any]:
    trace_ulid = (
        store.enqueued_event_id(sealed.attempt.task_id) or store.attempts_of(sealed.attempt.task_id)[0].attempt_id
    )
    try:
        steps = read_trace(sealed.root / TRACE_FILE)
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
    entries: list[tuple[Path | bytes, str]] = []
    index_attempts = []
    for sealed in sealed_attempts(store, state_dir, task_ids, exported):
        attempt = sealed.attempt
        folder = f"attempts/{attempt.task_id}/{attempt.attempt_id}"
        for name in (*EVIDENCE_FILES, MANIFEST):
            if (sealed.root / name).is_file():
                entries.append((sealed.root / name, f"{folder}/{name}"))
        artifact = tracecore_artifact(store, sealed)
        index_attempts.append(
            {
                "task_id": attempt.task_id,
                "attempt_id": attempt.attempt_id,
                "folder": folder,
                "manifest_sha256": sha256_file(sealed.root / MANIFEST),
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
    }
    with _staging(out) as staging, tarfile.open(staging, "w:gz") as tar:
        _add_bytes(tar, "index.json", _json(index).encode())
        _add_bytes(tar, "chain_head", (f"{head[0]}:{head[1]}\n" if head else "").encode())
        for source, name in entries:
            if isinstance(source, bytes):
                _add_bytes(tar, name, source)
            else:
                tar.add(source, arcname=name, recursive=False)
    return exported


@contextmanager
def _staging(out: Path) -> Iterator[Path]:
    """A path in a temporary sibling of `out`, moved to `out` only when everything was written."""
    if out.exists():
        raise InputError(f"{out} already exists; give --out a path that does not")
    if not out.parent.is_dir():
        raise InputError(f"{out.parent} is not a directory")
    temp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield temp / out.name
        os.rename(temp / out.name, out)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), 0o600
    tar.addfile(info, io.BytesIO(data))


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
