"""An attempt's evidence: its folder and sealed manifest, the action trace, the auditor's verify, the
exports (bundle, TraceCore), retention, and a database older than what happened (rollback).

May import: records, config, gateway, process, store, work.

May call: all_attempts, attempt_folder_keys, attempts_by_task, attempts_of, chain_head, deletable_tasks, delete_tasks,
enqueued_event_id, event_count, event_hash, event_sequence_reached, latest_event_checkpoint, mark_evidence_pruned,
prunable_event_prefix, prunable_evidence, prune_events, record_event, sealed_manifests, verify_event_chain.

Per-attempt evidence (docs/design.md, "Evidence", seed 001): `<state_dir>/attempts/<task>/<attempt>/`.

The directory holds what the attempt was told (prompt.md), what it was given (stdin.json),
what it printed, what it reported, and manifest.json: the attempt's identity, inputs, budgets
and timing, the sha256 of every file, and an artifact_hash over the non-volatile fields.
The manifest is written once, atomically, read-only; scratch/ (HOME and friends) is not evidence.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentd import edge, frozen_value
from agentd.edge import scrub, utf8_text
from agentd.evidence.action_trace import MAX_READ_BYTES, TRACE_FILE, parse_trace
from agentd.evidence.layout import EVIDENCE_FILES as EVIDENCE_FILES
from agentd.evidence.layout import EVIDENCE_SPEC as EVIDENCE_SPEC
from agentd.evidence.layout import MANIFEST as MANIFEST
from agentd.evidence.layout import MANIFEST_SCHEMA as MANIFEST_SCHEMA
from agentd.faults import is_storage_fault, os_storage_error
from agentd.hashing import canonical_json, sha256_hex
from agentd.process.files import (
    LINK,
    NOT_REGULAR,
    Refused,
    entry_problem,
    folder_problems,
    hashed_beneath,
    held_folder,
    make_run_dir,
    read_beneath,
    sha256_beneath,
    write_new,
    write_private,
)
from agentd.process.privilege import RunUser
from agentd.schema_check import SchemaCheck

# The artifact_hash is TraceCore's rule (seed 001 §6) applied to the manifest: the sha256 of its
# canonical JSON without what differs between two runs of the same work. Left out: the run's and
# the task's ids, the host, the times, and the inputs agentd rendered with those ids in them (the
# bundle names the task id and attempt number); the action trace counts by its time-free digest.
# What is left out is still pinned: every file by `files`, the manifest by the event chain.
VOLATILE = ("run_id", "runtime_identity", "started_at", "completed_at", "wall_clock_elapsed_s", "bundle_hash")
VOLATILE_FILES = ("prompt.md", "action_trace.jsonl")


@frozen_value
class AttemptPaths:
    """Where an attempt's evidence is sealed (`root`, in the state dir: only the services reach it) and
    where the attempt itself may write (`run`: its HOME, TMPDIR and the files it reports back, which
    agentd reads without following links and copies into `root`). Each path is built once, on first
    use: an attempt asks for them ~30 times."""

    root: Path
    run_root: Path | None = None  # default: beside root (tests, and tools that run no attempt)

    @functools.cached_property
    def run(self) -> Path:
        return self.run_root if self.run_root is not None else self.root.with_name(self.root.name + ".run")

    @functools.cached_property
    def prompt(self) -> Path:
        return self.root / "prompt.md"

    @functools.cached_property
    def stdin(self) -> Path:
        return self.root / "stdin.json"

    @functools.cached_property
    def stdout(self) -> Path:
        return self.root / "stdout.log"

    @functools.cached_property
    def stderr(self) -> Path:
        return self.root / "stderr.log"

    @functools.cached_property
    def result(self) -> Path:
        return self.root / "result.json"

    @functools.cached_property
    def last_message(self) -> Path:
        return self.root / "last_message.txt"

    @functools.cached_property
    def action_trace(self) -> Path:
        return self.root / "action_trace.jsonl"

    @functools.cached_property
    def model_calls(self) -> Path:
        """The attempt's model calls through the gateway (agentd/attempt/model_calls.py), written by agentd."""
        return self.root / "model_calls.jsonl"

    @functools.cached_property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @functools.cached_property
    def scratch(self) -> Path:
        """HOME, TMPDIR and the harness CLIs' own homes: written by the adapter, not evidence."""
        return self.run / "home"

    @functools.cached_property
    def reported_result(self) -> Path:
        """$AGENTD_RESULT_PATH: where the attempt writes its TaskOutcome (copied into `result`)."""
        return self.run / "result.json"

    @functools.cached_property
    def bundle_copy(self) -> Path:
        """$AGENTD_BUNDLE_PATH: the attempt's own copy of prompt.md (the evidence keeps the original)."""
        return self.run / "prompt.md"

    def reported(self, name: str) -> Path:
        """A file a harness writes for agentd to read back (codex's last message, hermes's usage)."""
        return self.run / name


def attempt_paths(state_dir: Path, task_id: int, attempt_id: str, runs: Path | None = None) -> AttemptPaths:
    """The attempt's evidence folder, and its run folder under `runs` ([paths] run_dir)."""
    return AttemptPaths(state_dir / "attempts" / str(task_id) / attempt_id, runs / attempt_id if runs else None)


def make_attempt_dir(paths: AttemptPaths, user: RunUser | None = None) -> None:
    """The attempt's evidence folder (the service's alone) and its run folder with home/ in it (the
    attempt's HOME and TMPDIR both), which the run user may write: a directory is ~0.4 ms to create
    on a VM's disk, and an attempt makes three."""
    for directory in (paths.root.parent, paths.root):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o700)
    make_run_dir(paths.run.parent, user, mode=0o750)
    make_run_dir(paths.run, user)
    make_run_dir(paths.scratch, user)


def file_hashes(paths: AttemptPaths) -> dict[str, dict[str, Any]]:
    """The sha256 and size of each evidence file in the folder: one listing, each file opened from the
    folder held open (no link followed), its size from the same descriptor."""
    found = {}
    with held_folder(paths.root) as folder:
        with os.scandir(folder) as listing:
            present = {entry.name for entry in listing if entry.is_file(follow_symlinks=False)}
        for name in EVIDENCE_FILES:
            if name in present:
                with contextlib.suppress(FileNotFoundError):
                    digest, size = hashed_beneath(folder, name)
                    found[name] = {"sha256": digest, "bytes": size}
    return found


def artifact_hash(manifest: dict[str, Any]) -> str:
    """Equal for two runs of the same work with the same result; see VOLATILE."""
    stable = {k: v for k, v in manifest.items() if k not in (*VOLATILE, "artifact_hash")}
    if isinstance(stable.get("task_ref"), dict):
        stable["task_ref"] = {"task_type": stable["task_ref"].get("task_type")}
    if isinstance(stable.get("files"), dict):
        stable["files"] = {k: v for k, v in stable["files"].items() if k not in VOLATILE_FILES}
    return sha256_hex(canonical_json(stable))


@frozen_value
class Sealed:
    artifact_hash: str
    manifest_sha256: str  # of manifest.json as written: the event chain records it


def seal(
    paths: AttemptPaths, fields: dict[str, Any], *, trace: str = "", best_effort: bool = False
) -> tuple[Sealed | None, str | None]:
    """Write the action trace, hash the attempt's files and write its manifest: (Sealed, None), or
    with best_effort (agentd's own failure path) (None, why not) for anything but an unusable disk."""
    try:
        paths.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        discard_partial_writes(paths)
        write_new(paths.action_trace, trace)
        return write_manifest(paths, fields), None
    except Exception as exc:
        if isinstance(exc, OSError) and is_storage_fault(exc):
            raise os_storage_error(exc) from None
        if not best_effort:
            raise
        return None, f"not written: {type(exc).__name__}: {scrub(str(exc))[:300]}"


def discard_partial_writes(paths: AttemptPaths) -> None:
    """The temporary file of an atomic write a kill cut short (`manifest.json.tmp`; an older agentd
    wrote every file so): agentd's own, never evidence, removed before the seal so the folder holds
    what the manifest names."""
    partial = {f"{name}.tmp" for name in (*EVIDENCE_FILES, MANIFEST)}
    with os.scandir(paths.root) as entries:  # one listing, not an unlink per name that is almost never there
        found = [entry.name for entry in entries if entry.name in partial]
    for name in found:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(paths.root / name)


def write_manifest(paths: AttemptPaths, fields: dict[str, Any]) -> Sealed:
    """Hash the evidence files and seal the manifest (read-only)."""
    manifest = {"spec_version": EVIDENCE_SPEC, **fields, "files": file_hashes(paths)}
    manifest["artifact_hash"] = artifact_hash(manifest)
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    write_private(paths.manifest, text, mode=0o400)  # read-only from its creation
    return Sealed(manifest["artifact_hash"], sha256_hex(text.encode()))


def trace_summary(steps: Sequence[Any], dropped: int = 0) -> dict[str, Any]:
    """The manifest's account of the action trace: how many steps and tool calls it holds, a digest of
    the steps without their times (what two runs of the same work share), and how many steps the cap
    dropped (agentd/evidence/action_trace.py MAX_TRACE_STEPS), when it dropped any."""
    timeless = [{k: v for k, v in step.as_dict().items() if k not in ("started_at", "ended_at")} for step in steps]
    return {
        "steps": len(steps),
        "tool_calls": sum(1 for step in steps if step.kind == "tool"),
        "digest": sha256_hex(canonical_json(timeless)),
        **({"steps_dropped": dropped} if dropped else {}),
    }


def verify_attempt_dir(root: Path) -> list[str]:
    return check_attempt_dir(root)[1]


def check_attempt_dir(root: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """The sealed manifest and the problems with one attempt's evidence: a missing, extra or edited
    file, a forged hash, a manifest outside its schema, an unreadable action trace. What
    strict_evidence checks, and what `agentd evidence verify` checks of each attempt (beside what
    only the database can tell)."""
    evidence = inspect_attempt_dir(root)
    return evidence.manifest, evidence.problems


@frozen_value
class AttemptEvidence:
    """One attempt folder as `check_attempt_dir` judges it, and the sha256 of manifest.json's bytes
    (None if there is none): what the event chain sealed, from the same read."""

    manifest: dict[str, Any] | None
    manifest_sha256: str | None
    problems: list[str]


def inspect_attempt_dir(root: Path) -> AttemptEvidence:
    """check_attempt_dir's verdict with each file read once and the folder listed once. Nothing is
    followed or opened that is not a plain file: a link (the folder itself, its task folder, or an
    entry) and a FIFO, device or socket are problems in themselves, so a planted `stdout.log ->
    /etc/passwd` or a FIFO where a log was is named, never read (agentd/process/files.py)."""
    refused = [f"{path}: {why}" for path, why in folder_problems(root, depth=2)]  # the folder, its task's
    if refused:
        return AttemptEvidence(None, None, refused)
    try:
        with held_folder(root) as folder:  # opened once: every file is read from it, by name
            return _inspect(root, folder)
    except Refused:  # turned into a link since the look above
        return AttemptEvidence(None, None, [f"{root}: {LINK}"])


def _inspect(root: Path, folder: int) -> AttemptEvidence:
    with os.scandir(folder) as listing:
        entries = {entry.name: entry for entry in listing}
    odd = {name: why for name, entry in entries.items() if (why := entry_problem(entry)) and not _scratch(entry)}
    oddities = [f"{root / name}: {why}" for name, why in sorted(odd.items())]
    manifest, manifest_sha256, problems = _read_manifest(root, folder) if MANIFEST not in odd else (None, None, [])
    if manifest is None:
        return AttemptEvidence(None, manifest_sha256, oddities + problems)
    regular = {name: entry for name, entry in entries.items() if name not in odd}
    actual, trace, unreadable = _hash_files(root, folder, regular)
    problems = [
        problem
        for problem in manifest_problems(root, manifest, actual) + schema_problems(root, manifest)
        if not any(problem == f"{root / name}: listed in the manifest but missing" for name in odd)
    ]
    for extra in sorted(name for name in regular if name not in (*EVIDENCE_FILES, MANIFEST, SCRATCH)):
        problems.append(f"{root / extra}: present but not part of the evidence")
    if trace is not None:
        try:
            parse_trace(trace)
        except ValueError as exc:
            problems.append(f"{root / TRACE_FILE}: {exc}")
    return AttemptEvidence(manifest, manifest_sha256, oddities + unreadable + problems)


def _scratch(entry: os.DirEntry[str]) -> bool:
    return entry.name == SCRATCH and entry.is_dir(follow_symlinks=False)


def _hash_files(
    root: Path, folder: int, entries: dict[str, os.DirEntry[str]]
) -> tuple[dict[str, dict[str, Any]], bytes | None, list[str]]:
    """The evidence files present (name → {"sha256": …}, each read through open_beneath), the action
    trace's bytes, read once for its hash and its parse (None if there is none), and the files that
    turned into something else between the listing and the read (a race with whoever planted it)."""
    actual: dict[str, dict[str, Any]] = {}
    trace, unreadable = None, []
    for name in EVIDENCE_FILES:
        if name not in entries:
            continue
        try:
            if name == TRACE_FILE:  # read once for its hash and its parse, up to what agentd writes (~5 MiB)
                found = read_beneath(folder, name, MAX_READ_BYTES)
                if len(found.data) > MAX_READ_BYTES:  # hashed as any file, not parsed
                    unreadable.append(f"{root / name}: over {MAX_READ_BYTES:,} bytes, far more than agentd writes")
                    actual[name] = {"sha256": sha256_beneath(folder, name)}
                else:
                    trace = found.data
                    actual[name] = {"sha256": sha256_hex(trace)}
            else:
                actual[name] = {"sha256": sha256_beneath(folder, name)}
        except Refused:
            unreadable.append(f"{root / name}: {LINK} or {NOT_REGULAR}")
        except FileNotFoundError:
            continue
    return actual, trace, unreadable


SCRATCH = "scratch"  # the attempt's HOME and temp files: removed when it ends, never evidence


def schema_problems(root: Path, manifest: dict[str, Any]) -> list[str]:
    """Every field outside MANIFEST_SCHEMA, by its path."""
    named, more = manifest_check().named(manifest, key=lambda e: [str(p) for p in e.path])
    return [
        f"{root / MANIFEST} {'.'.join(str(p) for p in error.absolute_path) or '(top)'}: "
        f"outside the manifest schema: {message}"
        for error, message in named
    ] + ([f"{root / MANIFEST}: {more:,} more field(s) outside the manifest schema"] if more else [])


@functools.cache
def manifest_check() -> SchemaCheck:
    """MANIFEST_SCHEMA compiled once: its fast yes is ~50 times faster than jsonschema."""
    return SchemaCheck(MANIFEST_SCHEMA)


MAX_MANIFEST_BYTES = 16 * 1024 * 1024  # agentd writes a few kB; a larger one is not agentd's


def load_manifest(root: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """The attempt's sealed manifest, or None and why it cannot be read (a link is never followed)."""
    manifest, _, problems = _read_manifest(root)
    return manifest, problems


def _read_manifest(root: Path, folder: int | None = None) -> tuple[dict[str, Any] | None, str | None, list[str]]:
    """load_manifest, with the sha256 of the bytes it read (None when it read none); `folder`: `root` held
    open. Whatever a tampered manifest holds (a link, a pipe, gigabytes, JSON nested past what `json`
    reads, not UTF-8) is a reason, never an exception."""
    path = root / MANIFEST
    try:
        found = read_beneath(root if folder is None else folder, MANIFEST, MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        return None, None, [f"{root}: no {MANIFEST}"]
    except Refused:
        return None, None, [f"{path}: {LINK} or {NOT_REGULAR}"]
    if len(found.data) > MAX_MANIFEST_BYTES:
        return None, None, [f"{path}: over {MAX_MANIFEST_BYTES:,} bytes, far more than agentd writes"]
    digest = sha256_hex(found.data)
    try:  # decoded as Path.read_text decodes (universal newlines), so every reason reads the same
        text = found.data.decode("utf-8")  # its UnicodeDecodeError says where, as read_text's does
        loaded = json.loads(utf8_text(found.data) if "\r" in text else text, object_pairs_hook=edge.one_of_each)
    except edge.Refused as exc:  # a key written twice: agentd never writes one, and readers would disagree
        return None, digest, [f"{path}: {exc}"]
    except RecursionError:
        return None, digest, [f"{path}: not JSON agentd reads (nested deeper than Python's JSON parser goes)"]
    except ValueError as exc:  # not UTF-8 (UnicodeDecodeError is one), or not JSON
        return None, digest, [f"{path}: not JSON ({exc})"]
    if not isinstance(loaded, dict):
        return None, digest, [f"{path}: not a JSON object"]
    return loaded, digest, []


def manifest_problems(
    root: Path, manifest: dict[str, Any], actual: dict[str, dict[str, Any]] | None = None
) -> list[str]:
    """The files against the hashes the manifest records, and the manifest against its own hash.
    A tampered manifest (files not an object, an entry without sha256) is reported, never raised.
    `actual`: the folder's files already hashed (name → {"sha256": …}), else they are hashed here."""
    problems = []
    files = manifest.get("files")
    recorded: dict[str, Any] = files if isinstance(files, dict) else {}
    actual = file_hashes(AttemptPaths(root)) if actual is None else actual
    for name in sorted(set(recorded) | set(actual)):
        entry = recorded.get(name)
        if name not in actual:
            problems.append(f"{root / name}: listed in the manifest but missing")
        elif name not in recorded:
            problems.append(f"{root / name}: present but not in the manifest")
        elif not isinstance(entry, dict) or entry.get("sha256") != actual[name]["sha256"]:
            problems.append(f"{root / name}: sha256 differs from the manifest (edited after the attempt)")
    if manifest.get("artifact_hash") != artifact_hash(manifest):
        problems.append(f"{root / MANIFEST}: artifact_hash does not match its fields")
    return problems
