"""`agentd evidence verify`: what an auditor checks offline, from a (possibly read-only) copy of a
state dir: the event chain, the head someone outside recorded, and every attempt's evidence.

Each finding says where (an event sequence, a file, a manifest field) and what is wrong. Nothing is
written: the database is opened read-only and the attempt folders are only read.

What this protects against, and what not: the chain makes any edit, insertion or removal of an event
visible, including removing the last ones (SQLite's AUTOINCREMENT high-water mark remembers how far
the sequence went, and a head published outside the state dir — the journal's `chain_head` lines,
`agentd_event_chain_head_sequence` — pins it for someone who can also rewrite that). Attempt
manifests pin every evidence file by sha256, and each manifest's own sha256 is in its attempt's
task_attempt_finished event, so the chain pins the manifests too. A writer with the agent's own
user can rewrite the whole state dir consistently (chain and manifests recomputed); only a head held
elsewhere, recorded before the rewrite, catches that. Adapters run as that same user."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentd import frozen_value
from agentd.edge import INT64_MAX, quoted, whole_number
from agentd.evidence import MANIFEST, inspect_attempt_dir
from agentd.records import TaskAttempt
from agentd.store import Store

HEAD = re.compile(r"^([0-9]+):([0-9a-f]{64})$")


@frozen_value
class Finding:
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.where}: {self.what}"


@dataclass
class Verification:
    events: int = 0
    attempts: int = 0
    head: tuple[int, str] | None = None
    findings: list[Finding] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": not self.findings,
            "events_checked": self.events,
            "attempts_checked": self.attempts,
            "head": {"sequence": self.head[0], "hash": self.head[1]} if self.head else None,
            "findings": [{"where": f.where, "what": f.what} for f in self.findings],
        }


def parse_head(text: str) -> tuple[int, str]:
    """`SEQ:HASH` as the journal's chain_head line prints it; ValueError naming the form otherwise."""
    match = HEAD.match(text.strip().lower())
    sequence = None if match is None else whole_number(match.group(1))
    if match is None or sequence is None or not 1 <= sequence <= INT64_MAX:
        raise ValueError(f"expected SEQUENCE:SHA256 (e.g. 812:3f2a…, 64 hex digits), found {quoted(text)}")
    return sequence, match.group(2)


def verify(
    store: Store, state_dir: Path, *, task_id: int | None = None, expect_head: tuple[int, str] | None = None
) -> Verification:
    """The chain (always whole: one task's events prove nothing without their predecessors), the
    expected head, and the evidence of every attempt (or of one task's)."""
    result = Verification()
    result.events = store.event_count()
    result.head = store.chain_head()
    result.findings += [Finding(f"event {b.sequence}", b.reason) for b in store.verify_event_chain()]
    result.findings += _tail_findings(store, result.head)
    if expect_head is not None:
        result.findings += _expected_head_findings(store, result.head, expect_head)
    attempts = store.attempts_of(task_id) if task_id is not None else store.all_attempts()
    sealed = store.sealed_manifests()
    for attempt in attempts:
        result.attempts += 1
        result.findings += attempt_findings(state_dir, attempt, sealed.get(attempt.attempt_id))
    if task_id is None:
        result.findings += _unknown_folders(state_dir, {(a.task_id, a.attempt_id) for a in attempts})
    return result


def _tail_findings(store: Store, head: tuple[int, str] | None) -> list[Finding]:
    reached = store.event_sequence_reached()
    last = head[0] if head else 0
    if reached > last:
        return [Finding(f"event {last + 1}", f"events {last + 1}..{reached} were removed from the end of the chain")]
    return []


def _expected_head_findings(store: Store, head: tuple[int, str] | None, expected: tuple[int, str]) -> list[Finding]:
    sequence, wanted = expected
    where = f"event {sequence}"
    found = store.event_hash(sequence)
    if found is None:
        last = head[0] if head else 0
        if sequence > last:
            return [Finding(where, f"the recorded head is {sequence}, but the chain ends at {last}: events cut")]
        return [Finding(where, "the recorded head is missing from the chain")]
    if found != wanted:
        return [Finding(where, f"hash {found} differs from the recorded head {wanted}")]
    return []


def attempt_findings(state_dir: Path, attempt: TaskAttempt, sealed: tuple[int, str] | None) -> list[Finding]:
    """Everything wrong with one ended attempt's evidence, as `evidence verify` reports it: the folder, and a
    run whose tool calls were not all decided by its policy (intact evidence of a broken promise)."""
    manifest, findings = checked_attempt(state_dir, attempt, sealed)
    return findings + undecided_calls(state_dir, attempt, manifest)


def undecided_calls(state_dir: Path, attempt: TaskAttempt, manifest: dict[str, Any] | None) -> list[Finding]:
    """A tool call that ran without the decision its tool policy makes on every call (docs/policy.md, "Every
    call accounted for"): the attempt is not clean, whatever else its evidence shows."""
    where = str(state_dir / "attempts" / str(attempt.task_id) / attempt.attempt_id / MANIFEST)
    said = manifest.get("tool_policy") if manifest is not None else None
    violations = said.get("violations") if isinstance(said, dict) else None
    if attempt.termination_reason != "policy_violation" and not violations:
        return []
    listed = violations if isinstance(violations, list) else []
    calls = "; ".join(f"{v.get('tool')} {v.get('call_id')}: {v.get('what')}" for v in listed[:3] if isinstance(v, dict))
    return [
        Finding(
            f"{where} tool_policy",
            f"a tool call ran without agentd's decision (policy violation): {calls or 'see the attempt'}",
        )
    ]


def checked_attempt(
    state_dir: Path, attempt: TaskAttempt, sealed: tuple[int, str] | None
) -> tuple[dict[str, Any] | None, list[Finding]]:
    """One attempt's sealed manifest and what is wrong with its evidence: the one check `evidence
    verify`, `replay` and `evidence export` share (a folder that verify faults is never replayed or
    exported). `sealed` is (sequence, sha256) of manifest.json as its task_attempt_finished event
    recorded it. Nothing in the folder is followed: links and special files are findings."""
    root = state_dir / "attempts" / str(attempt.task_id) / attempt.attempt_id
    if attempt.ended_at is None:
        return None, []  # still running: sealed when it ends
    if attempt.evidence_pruned_at:
        return None, [Finding(str(root), "still present after it was pruned")] if os.path.lexists(root) else []
    if not os.path.lexists(root):
        return None, [
            Finding(str(root), f"attempt {attempt.attempt_id} of task {attempt.task_id} has no evidence folder")
        ]
    evidence = inspect_attempt_dir(root)  # the manifest's bytes read once: judged, and hashed for the chain
    findings = [_as_finding(problem) for problem in evidence.problems]
    found = evidence.manifest_sha256
    if sealed is not None and found is not None:
        sequence, recorded = sealed
        if found != recorded:
            findings.append(
                Finding(
                    str(root / MANIFEST), f"sha256 {found} differs from the one event {sequence} recorded ({recorded})"
                )
            )
    if evidence.manifest is not None:
        findings += _row_agrees(root, evidence.manifest, attempt)
    return evidence.manifest, findings


def _row_agrees(root: Path, manifest: dict[str, Any], attempt: TaskAttempt) -> list[Finding]:
    """The database's attempt row and the sealed manifest tell the same story."""
    pairs = {
        "run_id": attempt.attempt_id,
        "exit_status": attempt.exit_status,
        "termination_reason": attempt.termination_reason,
    }
    return [
        Finding(f"{root / MANIFEST} {key}", f"says {manifest.get(key)!r}, the attempt row says {value!r}")
        for key, value in pairs.items()
        if manifest.get(key) != value and not _swept_before_0017(key, manifest, attempt)
    ]


def _swept_before_0017(key: str, manifest: dict[str, Any], attempt: TaskAttempt) -> bool:
    """A boot-swept attempt sealed `unknown` before migration 0017 made its row `error` (seed 000 §8's enum)."""
    return key == "exit_status" and manifest.get(key) == "unknown" and attempt.exit_status == "error"


def _unknown_folders(state_dir: Path, known: set[tuple[int, str]]) -> list[Finding]:
    """An attempt folder no attempt row names: evidence of something the database does not know."""
    findings = []
    for task_dir in _listed(state_dir / "attempts"):
        for folder in _listed(Path(task_dir.path)):
            if (whole_number(task_dir.name), folder.name) not in known:
                findings.append(Finding(folder.path, "an attempt folder no attempt in the database names"))
    return findings


def _listed(directory: Path) -> list[os.DirEntry[str]]:
    """A directory's entries by name (one scandir, no stat per entry); none if it is not a directory."""
    if not directory.is_dir():
        return []
    with os.scandir(directory) as entries:
        return sorted(entries, key=lambda entry: entry.name)


def _as_finding(problem: str) -> Finding:
    where, _, what = problem.partition(": ")
    return Finding(where, what)
