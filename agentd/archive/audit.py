"""What an auditor checks from the bucket alone, and what the witnessed head says of a local chain
(docs/backup-and-archive.md, "Witnessed head", "Auditing from the bucket").

From the bucket: the archived chain (every segment, each event's hash recomputed, the segments agreeing where
they overlap), the latest witnessed head in that chain, and every attempt folder an archived
task_attempt_finished event sealed: present, its manifest the one the event recorded, every file the one its
manifest records (the same checks `agentd evidence verify` makes of a folder on the VM). Against a local chain: a
chain shorter than a witnessed head, or one that differs from the witnessed copy at some event, was rolled back;
the first missing or different event is named."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentd.archive.bucket import Bucket
from agentd.archive.folder import unpack_folder
from agentd.archive.location import parsed_attempt_key, parsed_events_key, parsed_head_key
from agentd.evidence import MANIFEST, inspect_attempt_dir
from agentd.evidence.verify import Finding
from agentd.store import EventCheckpoint, Store
from agentd.store.events import CHAIN_COLUMNS, chain_breaks

SEQUENCE, TYPE = CHAIN_COLUMNS.index("sequence"), CHAIN_COLUMNS.index("type")
PAYLOAD, PREV, HASH = CHAIN_COLUMNS.index("payload"), CHAIN_COLUMNS.index("prev_hash"), CHAIN_COLUMNS.index("hash")
TASK, ATTEMPT, EVENT_ID = (
    CHAIN_COLUMNS.index("task_id"),
    CHAIN_COLUMNS.index("attempt_id"),
    CHAIN_COLUMNS.index("event_id"),
)
HEX64 = frozenset("0123456789abcdef")


@dataclass
class Audit:
    """An archive as the auditor found it: events and attempt folders checked, the latest witnessed head, the
    findings (each where and what) and notes (what was not checked, and why)."""

    events: int = 0
    attempts: int = 0
    head: tuple[int, str] | None = None
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": not self.findings,
            "events_checked": self.events,
            "attempts_checked": self.attempts,
            "witnessed_head": {"sequence": self.head[0], "hash": self.head[1]} if self.head else None,
            "findings": [{"where": f.where, "what": f.what} for f in self.findings],
            "notes": self.notes,
        }


@dataclass
class ArchivedChain:
    rows: list[tuple[Any, ...]]  # each a row of CHAIN_COLUMNS, by sequence
    findings: list[Finding]

    def hashes(self) -> dict[int, str]:
        return {row[SEQUENCE]: row[HASH] for row in self.rows}

    def describe(self, sequence: int) -> str:
        """`(TYPE of task N, EVENT_ID)` for an archived event, '' for one the archive does not hold."""
        row = next((r for r in self.rows if r[SEQUENCE] == sequence), None)
        if row is None:
            return ""
        task = f" of task {row[TASK]}" if row[TASK] is not None else ""
        return f" ({row[TYPE]}{task}, {row[EVENT_ID]})"


def archived_chain(bucket: Bucket) -> ArchivedChain:
    """Every event in the bucket's segments, merged by sequence (segments may overlap where an upload was
    made again; they must agree there)."""
    by_sequence: dict[int, tuple[Any, ...]] = {}
    findings = []
    for key in bucket.keys("events/"):
        span = parsed_events_key(key)
        stored = bucket.get(key) if span is not None else None
        if span is None or stored is None:
            findings.append(Finding(bucket.root + key, "not a chain segment agentd writes"))
            continue
        for number, line in enumerate(stored.body.decode("utf-8", errors="replace").splitlines(), start=1):
            row = _row(line)
            where = f"{bucket.root}{key} line {number}"
            if row is None or not span[0] <= row[SEQUENCE] <= span[1]:
                findings.append(Finding(where, "not an event of this segment's span, as agentd writes it"))
            elif by_sequence.setdefault(row[SEQUENCE], row) != row:
                findings.append(Finding(where, f"event {row[SEQUENCE]} differs from another segment's copy of it"))
    return ArchivedChain([by_sequence[s] for s in sorted(by_sequence)], findings)


def _row(line: str) -> tuple[Any, ...] | None:
    try:
        loaded = json.loads(line)
        row = tuple(loaded[column] for column in CHAIN_COLUMNS)
    except (ValueError, KeyError, TypeError, RecursionError):
        return None
    return row if type(row[SEQUENCE]) is int else None


def witnessed_heads(bucket: Bucket) -> dict[int, str]:
    """sequence → hash of every head object in the bucket (one named otherwise, or saying otherwise, is left out)."""
    heads = {}
    for key in bucket.keys("heads/"):
        sequence = parsed_head_key(key)
        stored = bucket.get(key) if sequence is not None else None
        if sequence is None or stored is None:
            continue
        try:
            body = json.loads(stored.body)
        except (ValueError, RecursionError):
            continue
        hash_ = body.get("hash") if isinstance(body, dict) else None
        if body.get("sequence") == sequence and isinstance(hash_, str) and len(hash_) == 64 and set(hash_) <= HEX64:
            heads[sequence] = hash_
    return heads


def audit_archive(bucket: Bucket) -> Audit:
    """The chain, the witnessed heads and every sealed folder, from the bucket alone (nothing of the VM)."""
    found = Audit()
    chain = archived_chain(bucket)
    found.findings += chain.findings
    found.events = len(chain.rows)
    start = None
    if chain.rows and chain.rows[0][SEQUENCE] != 1:  # archiving began after events were pruned on the VM
        first = chain.rows[0]
        start = EventCheckpoint(first[SEQUENCE] - 1, first[PREV], 0)
        found.notes.append(
            f"the archived chain starts at event {first[SEQUENCE]}: the events before it were not archived"
        )
    found.findings += [Finding(f"event {b.sequence}", b.reason) for b in chain_breaks(chain.rows, start)]
    heads, hashes = witnessed_heads(bucket), chain.hashes()
    if heads:
        found.head = max(heads.items())
    for sequence, wanted in sorted(heads.items()):
        if hashes.get(sequence) != wanted:
            what = "is not in the archived chain" if sequence not in hashes else "differs from the archived event"
            found.findings.append(Finding(f"event {sequence}", f"the witnessed head {sequence}:{wanted[:12]}… {what}"))
    with tempfile.TemporaryDirectory(prefix="agentd-audit-") as scratch:
        _audit_folders(bucket, chain, Path(scratch), found)
    return found


def _audit_folders(bucket: Bucket, chain: ArchivedChain, scratch: Path, found: Audit) -> None:
    sealed = {}
    for row in chain.rows:
        if row[TYPE] == "task_attempt_finished" and row[ATTEMPT] is not None:
            recorded = _manifest_sha256(row[PAYLOAD])
            sealed[(row[TASK], row[ATTEMPT])] = (row[SEQUENCE], recorded)
    objects = {parsed: key for key in bucket.keys("attempts/") if (parsed := parsed_attempt_key(key)) is not None}
    for (task_id, attempt_id), (sequence, recorded) in sorted(sealed.items(), key=lambda item: item[1][0]):
        where = f"{bucket.root}attempts/{task_id}/{attempt_id}.tar"
        if recorded is None:
            found.notes.append(
                f"event {sequence}: attempt {attempt_id} was sealed without a manifest hash: not checked"
            )
            continue
        found.attempts += 1
        key = objects.get((task_id, attempt_id))
        stored = bucket.get(key) if key is not None else None
        if stored is None:
            found.findings.append(Finding(where, f"sealed by event {sequence}, but not in the archive"))
            continue
        if stored.metadata.get("manifest-sha256") != recorded:
            found.findings.append(
                Finding(where, f"its metadata's manifest-sha256 is not the one event {sequence} recorded")
            )
        root = scratch / str(task_id) / attempt_id
        root.parent.mkdir(mode=0o700, exist_ok=True)
        found.findings += [Finding(where, why) for why in unpack_folder(stored.body, root)]
        evidence = inspect_attempt_dir(root)
        found.findings += [_relative(problem, root, where) for problem in evidence.problems]
        if evidence.manifest_sha256 is not None and evidence.manifest_sha256 != recorded:
            found.findings.append(
                Finding(
                    f"{where} {MANIFEST}",
                    f"sha256 {evidence.manifest_sha256} differs from the one event {sequence} recorded ({recorded})",
                )
            )
    ahead = len(set(objects) - set(sealed))
    if ahead:
        found.notes.append(f"{ahead} attempt object(s) sealed after the last archived event: the next head covers them")


def _manifest_sha256(payload: Any) -> str | None:
    try:
        loaded = json.loads(payload) if isinstance(payload, str) else None
    except (ValueError, RecursionError):
        return None
    value = loaded.get("manifest_sha256") if isinstance(loaded, dict) else None
    return value if isinstance(value, str) else None


def _relative(problem: str, root: Path, where: str) -> Finding:
    """A problem inspect_attempt_dir found in the scratch copy, named by the object it came from."""
    path, _, what = problem.partition(": ")
    inside = path.removeprefix(str(root)).lstrip("/")
    return Finding(f"{where}{' ' + inside if inside else ''}", what)


# --- a local chain against a witnessed head -----------------------------------------------------------------


def rollback_findings(
    store: Store, head: tuple[int, str], witnessed: Mapping[int, str], describe: Callable[[int], str] = lambda s: ""
) -> list[Finding]:
    """The local chain against the witnessed head `head` and the witnessed hashes `witnessed` (sequence → hash:
    the archived chain's events, or the fleet's heads): the first event that differs from its witnessed copy, or
    the first one missing below the head, as a rollback; none when the local chain holds the head."""
    local = store.chain_head()
    last = local[0] if local else 0
    checkpoint = store.latest_event_checkpoint()
    first_local = checkpoint.through_sequence + 1 if checkpoint else 1
    known = dict(witnessed) | {head[0]: head[1]}
    candidates = sorted(s for s in known if first_local <= s <= min(last, head[0]))
    differs = _first_different(store, candidates, known)
    if differs is not None:
        mine = store.event_hash(differs) or ""
        return [
            Finding(
                f"event {differs}",
                f"rollback: event {differs}{describe(differs)} is not the one witnessed (here {mine[:12]}…, "
                f"witnessed {known[differs][:12]}…): the local chain forks from the head witnessed at event {head[0]}",
            )
        ]
    if head[0] > last:
        return [
            Finding(
                f"event {last + 1}",
                f"rollback: the local chain ends at event {last}, but the head {head[0]}:{head[1][:12]}… was "
                f"witnessed: event {last + 1}{describe(last + 1)} and every event after it are missing here",
            )
        ]
    return []


def _first_different(store: Store, candidates: list[int], known: Mapping[int, str]) -> int | None:
    """The first of `candidates` (ascending) whose local hash is not the witnessed one. A hash chain agrees up to
    its first difference and never after, so a binary search finds it in log(n) reads."""
    low, high = 0, len(candidates)
    while low < high:
        middle = (low + high) // 2
        if store.event_hash(candidates[middle]) == known[candidates[middle]]:
            low = middle + 1
        else:
            high = middle
    return candidates[low] if low < len(candidates) else None
